"""The reporter's close stops its flusher even when an append loses the first cancellation (as 3.11's
wait_for can make it), so the connector's clean-up cannot hang on it. No API server or log needed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from connectors.kubernetes.reporting import Reporter
from tests.stubborn import LosesFirstCancel


class StubbornPublisher(LosesFirstCancel):
    """An append that never commits and loses the first cancellation, returning as if it had committed."""

    def envelope(self, event: Any, *, id: str | None = None) -> Any:
        return (event, id)

    async def publish(self, envelopes: list[Any]) -> None:
        await self.block()


def test_close_stops_a_flusher_that_lost_its_first_cancellation() -> None:
    async def main() -> tuple[StubbornPublisher, Reporter, asyncio.Future[None]]:
        publisher = StubbornPublisher()
        reporter = Reporter(publisher)  # type: ignore[arg-type]
        sent = reporter.submit([("an event", "id-1")])  # type: ignore[list-item]
        await asyncio.wait_for(publisher.started.wait(), 10)
        await asyncio.wait_for(reporter.close(), 10)
        return publisher, reporter, sent

    publisher, reporter, sent = asyncio.run(main())
    assert publisher.swallowed == 1
    assert sent.done() and sent.exception() is None  # the append "committed" and the flusher went on
    with pytest.raises(RuntimeError, match="the reporter stopped"):  # then it ended, cancelled
        reporter.submit([("another event", "id-2")])  # type: ignore[list-item]
