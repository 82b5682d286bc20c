"""One definition of a hot GPU model: the read side (the fleet projection behind ``fedsched resources``)
and the scheduler (with the policy's default threshold) call the same models hot on the same log."""

from __future__ import annotations

import pytest

from events.catalog.base import Event
from events.catalog.inventory import GpuHealthReported, GpuHealthSample
from events.catalog.types import Health
from events.wire.envelope import Envelope
from services.scheduler.core.policy import FleetState, PolicyConfig
from services.scheduler.core.policy.capacity import model_pressure
from services.scheduler.core.policy.context import Ctx
from services.scheduler.core.state import SchedulerState
from tests.unit.projections.builders import Fold, a_job, a_node, placed


def both_hot(events: list[tuple[Event, int]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    fold, state = Fold(), SchedulerState()
    for i, (event, at_s) in enumerate(events):
        fold.feed(event, at_s=at_s)
        state.fold(Envelope(id=f"e-{i}", time_ms=1_000_000 + at_s * 1000, data=event))
    snap = state.snapshot(1_000_000 + 3600_000)
    fleet = FleetState(snap.nodes)
    ctx = Ctx.__new__(Ctx)  # only what ``hot`` reads
    ctx.config, ctx.pressure = PolicyConfig(), model_pressure(fleet)
    return fold.get("fleet", "fleet").hot_models(), tuple(sorted(ctx.hot))


def failed(*indices: int) -> GpuHealthReported:
    samples = tuple(GpuHealthSample(index=i, health=Health.FAILED, xid_errors=1) for i in indices)
    return GpuHealthReported(cluster="c1", node="n1", gpus=samples)


def taking(job: str, gpus: tuple[int, ...], node: str = "n1") -> list[tuple[Event, int]]:
    return [(a_job(job, gpus=len(gpus)), 1), (placed(job, node=node, gpus=gpus), 2)]


@pytest.mark.parametrize(
    ("case", "events", "hot"),
    [
        ("8 of 10 taken", taking("j", tuple(range(8))), ()),
        ("9 of 10 taken", taking("j", tuple(range(9))), ("A100",)),
        ("7 of the 8 that work taken", [*taking("j", tuple(range(7))), (failed(8, 9), 3)], ()),
        ("8 of the 8 that work taken", [*taking("j", tuple(range(8))), (failed(8, 9), 3)], ("A100",)),
        ("demand alone", [(a_job("j", gpus=10), 1)], ()),
    ],
)  # fmt: skip
def test_the_read_side_and_the_scheduler_agree_on_what_is_hot(case, events, hot):
    read_side, scheduler = both_hot([(a_node(gpus=10), 0), *events])
    assert read_side == scheduler == hot, case
