"""A replica asking GPUs and NPUs is refused at submission only when the known fleet has no node with
both kinds (``JobCommands._fleet_can_hold``): a fleet not known yet refuses nothing, a replica of one
kind is never looked at, and the refusal names ``resources.npus``."""

from __future__ import annotations

from typing import Any

import pytest

from events.catalog.jobs import JobSubmitted
from events.catalog.types import Resources
from services.api.commands import JobCommands
from services.api.errors import InvalidArgument

pytestmark = pytest.mark.asyncio


class Reads:
    def __init__(self, known: bool, both: bool) -> None:
        self.answer, self.calls = (known, both), 0

    async def accelerators(self) -> tuple[bool, bool]:
        self.calls += 1
        return self.answer


def commands(reads: Reads) -> JobCommands:
    none: Any = None
    return JobCommands(none, none, reads)  # type: ignore[arg-type]


def job(**resources: int) -> JobSubmitted:
    return JobSubmitted(job_id="j1", name="j1", tenant="team-a", resources=Resources(cpu_milli=1000, **resources))


async def test_a_gpu_and_npu_replica_is_refused_when_no_known_node_has_both() -> None:
    with pytest.raises(InvalidArgument) as refused:
        await commands(Reads(known=True, both=False))._fleet_can_hold(job(gpus=2, npus=2))
    assert refused.value.field == "resources.npus"
    assert "asks 2 GPUs and 2 NPUs per replica" in str(refused.value)


async def test_a_share_and_npus_is_refused_alike() -> None:
    with pytest.raises(InvalidArgument, match="500m of a GPU and 1 NPU per replica"):
        await commands(Reads(known=True, both=False))._fleet_can_hold(job(gpu_milli=500, npus=1))


@pytest.mark.parametrize(("known", "both"), [(False, False), (True, True)])
async def test_it_is_accepted_while_the_fleet_is_unknown_or_has_a_node_with_both(known: bool, both: bool) -> None:
    await commands(Reads(known, both))._fleet_can_hold(job(gpus=1, npus=1))


@pytest.mark.parametrize("resources", [{"gpus": 2}, {"npus": 2}, {"gpu_milli": 500}])
async def test_a_replica_of_one_kind_costs_no_read(resources: dict[str, int]) -> None:
    reads = Reads(known=True, both=False)
    await commands(reads)._fleet_can_hold(job(**resources))
    assert reads.calls == 0
