"""The fleet view behind a submission's warnings (``JobService._largest_nodes``): read at most every few
seconds, but never held while the fleet is not known yet (an empty view warns of nothing, and held for
seconds it hid the warnings of the first submissions after the nodes joined)."""

from __future__ import annotations

from typing import Any

import pytest

from services.api.jobs import JobService, shape_warnings

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(10)]


class Reads:
    def __init__(self, *views: dict[str, int]) -> None:
        self.views, self.calls = list(views), 0

    async def largest_nodes(self) -> dict[str, int]:
        self.calls += 1
        return self.views.pop(0) if len(self.views) > 1 else self.views[0]


def service(reads: Reads) -> JobService:
    none: Any = None
    return JobService(none, reads, none, none, none)  # type: ignore[arg-type]


async def test_a_fleet_not_known_yet_is_read_again_at_the_next_submission() -> None:
    reads = Reads({}, {"A100": 8})
    jobs = service(reads)
    assert await jobs._largest_nodes() == {}
    assert await jobs._largest_nodes() == {"A100": 8}
    assert shape_warnings(["H100"], 1, await jobs._largest_nodes()) != []


async def test_a_known_fleet_is_read_once_for_a_burst_of_submissions() -> None:
    reads = Reads({"A100": 8}, {"A100": 4})
    jobs = service(reads)
    for _ in range(5):
        assert await jobs._largest_nodes() == {"A100": 8}
    assert reads.calls == 1
