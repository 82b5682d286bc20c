"""The reporter's close ends it for good whenever it comes, even before its flusher task first ran (the race
behind a "Future exception was never retrieved: the reporter stopped" in test_refusals): what was submitted
fails and its exception is taken, later submits raise instead of starting a second flusher that appends
after the connector stopped, and a watcher waiting for room is told rather than left waiting. An outage of
the embedded log (asyncpg's connection errors) is retried like one of Kafka, not the reporter's end.
No API server or log needed."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import asyncpg
import pytest

from connectors.kubernetes.reporting import Reporter
from connectors.kubernetes.throttle import Backoff

pytestmark = [pytest.mark.timeout(30)]


class Recording:
    """Appends at once, or fails first with the errors given."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.published: list[list[Any]] = []

    def envelope(self, event: Any, *, id: str | None = None) -> Any:
        return (event, id)

    async def publish(self, envelopes: list[Any]) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.published.append(envelopes)


def run(main: Any) -> tuple[Any, list[dict[str, Any]]]:
    unretrieved: list[dict[str, Any]] = []

    async def wrapped() -> Any:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: unretrieved.append(context))
        return await main()

    result = asyncio.run(wrapped())
    gc.collect()
    return result, unretrieved


def test_a_close_before_the_flusher_first_ran_fails_what_was_submitted_and_ends_the_reporter() -> None:
    publisher = Recording()

    async def main() -> tuple[asyncio.Future[None], BaseException | None, int]:
        reporter = Reporter(publisher)  # type: ignore[arg-type]
        sent = reporter.submit([("an event", "id-1")])  # type: ignore[list-item]
        await reporter.close()  # no await in between: the flusher task has not run once
        refused = None
        try:
            reporter.submit([("a late event", "id-2")])  # type: ignore[list-item]
        except RuntimeError as error:
            refused = error
        tasks = len(asyncio.all_tasks()) - 1
        await asyncio.sleep(0.05)
        return sent, refused, tasks

    (sent, refused, tasks), unretrieved = run(main)
    assert sent.done() and isinstance(sent.exception(), RuntimeError)
    assert refused is not None and "the reporter stopped" in str(refused)
    assert tasks == 0, "a second flusher outlived the close"
    assert publisher.published == []  # nothing appended after the close
    assert unretrieved == []


def test_a_watcher_waiting_for_room_is_told_the_reporter_stopped() -> None:
    async def main() -> BaseException | None:
        reporter = Reporter(Recording(ValueError("a bug in the append")), max_pending=1)  # type: ignore[arg-type]
        for i in range(3):
            reporter.submit([(f"event {i}", f"id-{i}")])  # type: ignore[list-item]
        try:
            await asyncio.wait_for(reporter.room(), 5)  # the flusher dies of the bug meanwhile
        except RuntimeError as error:
            return error
        finally:
            await reporter.close()
        return None

    error, unretrieved = run(main)
    assert error is not None and "the reporter stopped" in str(error)
    assert unretrieved == []


@pytest.mark.parametrize(
    "outage",
    [
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
        asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
    ],
)
def test_an_outage_of_the_embedded_log_is_retried_not_the_end(outage: BaseException) -> None:
    publisher = Recording(outage, outage)

    async def main() -> None:
        reporter = Reporter(publisher, backoff=Backoff(0.001, 0.002))  # type: ignore[arg-type]
        try:
            await asyncio.wait_for(reporter.publish([("an event", "id-1")]), 5)  # type: ignore[list-item]
        finally:
            await reporter.close()

    _, unretrieved = run(main)
    assert publisher.published == [[("an event", "id-1")]]
    assert unretrieved == []
