"""A watch whose client goes away stops its tail tasks even when a read loses the first cancellation
(as 3.11's wait_for can make the embedded log's read lose it). No log or database needed."""

from __future__ import annotations

import asyncio

import pytest

from events.catalog.topics import JOBS
from events.log import LogRecord, TopicPartition
from services.api.watch import live
from tests.stubborn import LosesFirstCancel


class StubbornReader(LosesFirstCancel):
    """Reads that never find anything; the first cancellation is lost (the read returns nothing)."""

    async def read(
        self, tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0
    ) -> list[LogRecord]:
        await self.block()
        return []


def test_a_watch_cancelled_by_its_client_ends_though_a_tail_lost_its_first_cancellation() -> None:
    async def main() -> tuple[StubbornReader, asyncio.Task[object]]:
        reader = StubbornReader()
        stream = live(reader, "job-1", [(TopicPartition(JOBS.name, 0), 0)], "queued", follow=True)  # type: ignore[arg-type]
        watcher: asyncio.Task[object] = asyncio.create_task(anext(stream))  # type: ignore[arg-type]
        await asyncio.wait_for(reader.started.wait(), 10)
        watcher.cancel()  # the client goes away
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(watcher, 10)
        assert asyncio.all_tasks() == {asyncio.current_task()}  # the tail ended with the watch
        return reader, watcher

    reader, watcher = asyncio.run(main())
    assert reader.swallowed == 1
    assert watcher.cancelled()
