"""Seeded faults: reproducible schedules, and what each kind of fault does to nodes and runs."""

from __future__ import annotations

import pytest

from connectors.sim import Fault, FaultKind, FaultPlan, SimConfig
from events.catalog.inventory import GpuHealthReported, NodeObserved, NodeRemoved
from events.catalog.jobs import JobFailed, JobStarted, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.catalog.types import Health

from .builders import T0, Story, a_cluster, a_job, a_node, a_placement

pytestmark = pytest.mark.timeout(30)

CONFIG = SimConfig(fault_rate=0.5, seed=7, start_delay_s=0, fault_min_s=600, fault_max_s=1200)


def nodes_spec():  # type: ignore[no-untyped-def]
    return a_cluster(*(a_node(f"node-{i}").gpus(4, "T4", 15109) for i in range(8)))


def fault_events(seed: int, hours: int = 4) -> list[tuple[str, int, str]]:
    story = Story(nodes_spec(), SimConfig(fault_rate=0.5, seed=seed)).at(hours * 3600)
    kinds = (GpuHealthReported, NodeRemoved, NodeObserved)
    return [(e.id, e.time_ms, e.event.model_dump_json()) for e in story.emitted[9:] if isinstance(e.event, kinds)]


def test_the_same_seed_gives_the_same_fault_events() -> None:
    first = fault_events(7)
    assert len(first) > 20
    assert first == fault_events(7)
    assert first != fault_events(8)


def test_the_schedule_does_not_depend_on_how_time_was_cut() -> None:
    plan = FaultPlan("sim-test", nodes_spec().nodes, CONFIG, T0)
    whole = plan.between(T0, T0 + 5 * 3_600_000)
    cut = FaultPlan("sim-test", nodes_spec().nodes, CONFIG, T0)
    pieces: list[Fault] = []
    for start in range(T0, T0 + 5 * 3_600_000, 777_777):
        pieces += cut.between(start, min(start + 777_777, T0 + 5 * 3_600_000))
    assert whole == pieces
    assert [f.at_ms for f in whole] == sorted(f.at_ms for f in whole)
    assert {f.kind for f in whole} == set(FaultKind) - {FaultKind.NPU_FAILURE}  # no node here has NPUs


def test_stepping_the_clock_finely_or_coarsely_gives_the_same_events() -> None:
    coarse = Story(nodes_spec(), CONFIG).at(7200)
    fine = Story(nodes_spec(), CONFIG)
    for second in range(0, 7201, 13):
        fine.at(second)
    fine.at(7200)
    assert [(e.id, e.time_ms) for e in coarse.emitted] == [(e.id, e.time_ms) for e in fine.emitted]


def first_fault(kind: FaultKind) -> Fault:
    plan = FaultPlan("sim-test", nodes_spec().nodes, CONFIG, T0)
    return next(f for f in plan.between(T0, T0 + 10 * 3_600_000) if f.kind is kind)


def test_a_gpu_failure_fails_the_runs_on_that_gpu_only_and_the_gpu_comes_back() -> None:
    fault = first_fault(FaultKind.GPU_FAILURE)
    assert fault.gpu is not None
    other = (fault.gpu + 1) % 4
    story = Story(nodes_spec(), CONFIG)
    story.start(a_job("hit").gpus(1).runtime(10**6), a_placement("hit").on(fault.node, fault.gpu))
    story.start(a_job("spared").gpus(1).runtime(10**6), a_placement("spared").on(fault.node, other))
    story.at((fault.at_ms - T0) / 1000)
    [failed] = story.events(JobFailed)
    assert failed.event.job_id == "hit" and failed.event.reason is ReasonCode.GPU_FAILURE  # type: ignore[attr-defined]
    assert failed.event.node == fault.node and failed.time_ms == fault.at_ms  # type: ignore[attr-defined]
    health = [e.event for e in story.events(GpuHealthReported) if e.event.node == fault.node]  # type: ignore[attr-defined]
    sample = health[-1].gpus[fault.gpu]  # type: ignore[attr-defined]
    assert (sample.health, sample.xid_errors, sample.last_xid) == (Health.FAILED, 1, fault.xid)
    # While it is down, a placement on it is refused; after recovery it is healthy again.
    story.start(a_job("late").gpus(1), a_placement("late").on(fault.node, fault.gpu))
    assert story.events(JobFailed, "late")[0].event.reason is ReasonCode.GPU_UNHEALTHY  # type: ignore[attr-defined]
    story.at((fault.until_ms - T0) / 1000)
    snapshot = [e.event for e in story.events(NodeObserved) if e.event.node == fault.node][-1]  # type: ignore[attr-defined]
    assert snapshot.gpus[fault.gpu].health is Health.OK  # type: ignore[attr-defined]
    assert not story.events(JobFailed, "spared")


def test_a_lost_node_fails_its_runs_is_removed_and_returns_with_a_newer_generation() -> None:
    fault = first_fault(FaultKind.NODE_LOST)
    story = Story(nodes_spec(), CONFIG)
    story.start(a_job("victim").gpus(1).runtime(10**6), a_placement("victim").on(fault.node, 0))
    story.at((fault.at_ms - T0) / 1000)
    assert story.events(JobFailed, "victim")[0].event.reason is ReasonCode.NODE_FAILURE  # type: ignore[attr-defined]
    [removed] = [e.event for e in story.events(NodeRemoved) if e.event.node == fault.node]  # type: ignore[attr-defined]
    assert removed.reason is ReasonCode.NODE_LOST  # type: ignore[attr-defined]
    story.start(a_job("late").gpus(1), a_placement("late").on(fault.node, 1))
    assert story.events(JobFailed, "late")[0].event.reason is ReasonCode.NODE_LOST  # type: ignore[attr-defined]
    story.at((fault.until_ms - T0) / 1000)
    back = [e.event for e in story.events(NodeObserved) if e.event.node == fault.node][-1]  # type: ignore[attr-defined]
    assert back.generation > removed.generation  # type: ignore[attr-defined]


def test_a_cordoned_node_takes_no_new_work_but_keeps_what_runs() -> None:
    fault = first_fault(FaultKind.NODE_CORDONED)
    story = Story(nodes_spec(), CONFIG)
    start_s = (fault.at_ms - T0) / 1000 - 10
    story.at(start_s).start(a_job("old").gpus(1).runtime(30), a_placement("old").on(fault.node, 0))
    story.at((fault.at_ms - T0) / 1000)
    cordoned = [e.event for e in story.events(NodeObserved) if e.event.node == fault.node][-1]  # type: ignore[attr-defined]
    assert cordoned.schedulable is False  # type: ignore[attr-defined]
    story.start(a_job("new").gpus(1), a_placement("new").on(fault.node, 1)).at(start_s + 40)
    assert story.events(JobFailed, "new")[0].event.reason is ReasonCode.NODE_UNSCHEDULABLE  # type: ignore[attr-defined]
    assert story.events(JobSucceeded, "old") and story.events(JobStarted, "old")
