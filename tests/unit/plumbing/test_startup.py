"""A service's first connection waits out an outage (``events.plumbing.startup.patiently``): a refused
connection is retried with backoff and health names the dependency meanwhile; what a failed attempt left
open is closed; an error that is not an outage is raised at once."""

from __future__ import annotations

import asyncio

import pytest

from events.plumbing import outage as outages
from events.plumbing.outage import Outage, unreachable_now
from events.plumbing.startup import patiently

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(10)]


class Flaky:
    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.calls, self.undone, self.seen_unreachable = failures, error, 0, 0, []

    async def start(self) -> str:
        self.calls += 1
        self.seen_unreachable.append(unreachable_now())
        if self.calls <= self.failures:
            raise self.error
        return "connected"

    async def undo(self) -> None:
        self.undone += 1


def reports_nothing(outage: Outage) -> bool:
    """Whether ``outage`` is counted in this process's health and names nothing there now. Not
    ``"postgres" not in unreachable_now()``: health counts every ``Outage`` alive in the process, and one
    an earlier test left failing on postgres (still referenced, or garbage the cyclic collector has not
    reached yet) made that assertion fail in CI once."""
    return outage in outages._WATCHED and outage.failing is None and not outage.unreachable()


def quick() -> Outage:
    return Outage("test", initial_s=0.001, maximum_s=0.002)


async def test_a_refused_connection_is_tried_again_until_it_gets_through() -> None:
    flaky = Flaky(3, ConnectionRefusedError(111, "refused"))
    outage = quick()
    assert await patiently("postgres", flaky.start, component="test", undo=flaky.undo, outage=outage) == "connected"
    assert (flaky.calls, flaky.undone) == (4, 3)
    assert "postgres" in flaky.seen_unreachable[-1]  # health named it while it was away
    assert outage.failing is None  # and no more once through


async def test_an_error_that_is_not_an_outage_is_raised_at_once() -> None:
    flaky = Flaky(1, ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):
        await patiently("log", flaky.start, component="test", undo=flaky.undo, outage=quick())
    assert (flaky.calls, flaky.undone) == (1, 0)


class Then:
    """Refused ``refusals`` times, then a bug."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals

    async def start(self) -> str:
        if self.refusals:
            self.refusals -= 1
            raise ConnectionRefusedError(111, "refused")
        raise ValueError("a bug")


async def test_given_up_after_an_outage_health_names_the_dependency_no_more() -> None:
    outage = quick()
    with pytest.raises(ValueError, match="a bug"):
        await patiently("postgres", Then(2).start, component="test", outage=outage)
    assert reports_nothing(outage)


async def test_stopped_while_waiting_out_an_outage_health_names_the_dependency_no_more() -> None:
    outage = Outage("test", initial_s=30, maximum_s=30, jitter=0.0)
    waiting = asyncio.ensure_future(patiently("postgres", Then(5).start, component="test", outage=outage))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while outage.failing is None:
        assert loop.time() < deadline
        await asyncio.sleep(0.001)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert reports_nothing(outage)
