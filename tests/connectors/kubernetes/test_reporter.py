"""The reporter's close stops its flusher even when an append loses the first cancellation (as 3.11's
wait_for can make it), so the connector's clean-up cannot hang on it. No API server or log needed."""

from __future__ import annotations

import asyncio
import gc
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


class HangingPublisher:
    """An append that never ends (the log is away): what it was given stays in doubt."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    def envelope(self, event: Any, *, id: str | None = None) -> Any:
        return (event, id)

    async def publish(self, envelopes: list[Any]) -> None:
        self.started.set()
        await asyncio.Event().wait()


def test_a_closed_reporter_fails_what_it_held_without_leaving_unretrieved_errors() -> None:
    """Events being appended and events still queued when the reporter stops both fail with its reason; a
    submitter that stopped waiting (cancelled with the connector) leaves no "Future exception was never
    retrieved" for asyncio to log later, in whatever test or process is running then."""
    unretrieved: list[dict[str, Any]] = []

    async def main() -> tuple[asyncio.Future[None], asyncio.Future[None]]:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: unretrieved.append(context))
        publisher = HangingPublisher()
        reporter = Reporter(publisher, max_batch=1)  # type: ignore[arg-type]
        appending = reporter.submit([("an event", "id-1")])  # type: ignore[list-item]
        await asyncio.wait_for(publisher.started.wait(), 10)
        queued = reporter.submit([("another event", "id-2")])  # type: ignore[list-item]
        await asyncio.wait_for(reporter.close(), 10)
        return appending, queued

    appending, queued = asyncio.run(main())
    for sent in (appending, queued):
        assert sent.done() and isinstance(sent.exception(), RuntimeError)
    del appending, queued, sent
    gc.collect()
    assert unretrieved == []
