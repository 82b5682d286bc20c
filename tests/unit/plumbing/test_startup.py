"""A service's first connection waits out an outage (``events.plumbing.startup.patiently``): a refused
connection is retried with backoff and health names the dependency meanwhile; what a failed attempt left
open is closed; an error that is not an outage is raised at once."""

from __future__ import annotations

import pytest

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
