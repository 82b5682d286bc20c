"""Elastic work: a job that is not a gang starts with what fits and its run grows in its cluster as room
appears (``JobReplicasAdded``); a gang still starts whole or waits. Through the scheduler's state, the
pure core and the events it publishes, the way the service runs a cycle (``decide``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from events.catalog.base import Event
from events.catalog.budget_windows import HeldLedger, Window
from events.catalog.decisions import JobPlaced, JobReplicasAdded
from events.catalog.documents import BudgetSpec, BudgetWindow
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuDevice, NodeObserved
from events.catalog.jobs import InferenceSpec, JobKind, JobSubmitted, JobSucceeded, PriorityClass
from events.catalog.types import Resources
from events.wire.envelope import Envelope
from services.scheduler.core.decide import decide
from services.scheduler.core.policy import AddReplicas, Place, PolicyConfig, schedule
from services.scheduler.core.state import SchedulerState
from services.scheduler.core.state.budget_count import Holdings, hard_budgets
from tests.scheduler.builders import a_job, a_node, running, snapshot

pytestmark = pytest.mark.timeout(30)


class Log:
    """The scheduler's state fed one log millisecond apart, with each cycle's events folded back."""

    def __init__(self, *facts: Event) -> None:
        self.state = SchedulerState()
        self.now = 1_000
        self.cycles = 0
        for e in facts:
            self.add(e)

    def add(self, data: Event) -> None:
        self.now += 1
        self.state.fold(Envelope(id=f"e-{self.now}", time_ms=self.now, data=data))

    def cycle(self) -> list[Event]:
        self.now += 1_000
        decided = decide(self.state, self.now, sequence=self.cycles)
        self.cycles += 1
        for envelope in decided.events:
            self.state.fold(envelope)
        return [e.data for e in decided.events]


def cluster(gpus: int) -> tuple[Event, ...]:
    return (
        ClusterRegistered(cluster="c", kind=ClusterKind.SIMULATED, site="c", region="eu", currency="EUR"),
        NodeObserved(
            cluster="c", node="n", generation=1, cpu_milli=64_000, memory_mib=512_000,
            gpus=tuple(GpuDevice(index=i, model="A100", memory_mib=81_920) for i in range(gpus)),
        ),
    )  # fmt: skip


def submitted(job: str, replicas: int, gpus: int = 1, **more: object) -> JobSubmitted:
    return JobSubmitted(
        job_id=job,
        name=job,
        tenant="t",
        replicas=replicas,
        resources=Resources(gpus=gpus),
        **more,  # type: ignore[arg-type]
    )


def of(events: list[Event], kind: type[Event], job: str) -> list[Event]:
    return [e for e in events if isinstance(e, kind) and getattr(e, "job_id", None) == job]


def test_a_batch_array_starts_with_what_fits_and_grows_to_all_its_replicas_when_another_job_ends():
    log = Log(*cluster(gpus=4), submitted("first", 2, gpus=1, gang=True), submitted("array", 4))
    events = log.cycle()
    assert len(of(events, JobPlaced, "first")) == 1
    (array,) = of(events, JobPlaced, "array")
    assert [r.replica for r in array.replicas] == [0, 1]  # type: ignore[attr-defined]
    assert "running 2 of 4 replicas; 2 wait for room" in array.explanation  # type: ignore[attr-defined]
    # Nothing frees up: the run does not grow, and says nothing more.
    assert log.cycle() == []
    (run,) = [r for r in log.state.snapshot(log.now).running if r.job.job_id == "array"]
    assert (run.job.replicas, run.replicas_asked, run.missing()) == (2, 4, 2)
    assert log.state.growing_count() == 1  # the service runs a cycle for it though nothing is pending
    log.add(JobSucceeded(job_id="first", cluster="c", run=1))
    (added,) = of(log.cycle(), JobReplicasAdded, "array")
    assert isinstance(added, JobReplicasAdded)
    assert [r.replica for r in added.replicas] == [2, 3] and added.running_replicas == 4 and added.run == 1
    held = {i for r in (*array.replicas, *added.replicas) for i in r.gpu_indices}  # type: ignore[attr-defined]
    assert held == {0, 1, 2, 3}
    assert "added 2 replica(s)" in added.explanation and "all 4 replicas run now" in added.explanation
    (run,) = log.state.snapshot(log.now).running
    assert (run.job.replicas, run.replicas_asked, len(run.placements), run.job.total_gpu_milli()) == (4, 0, 4, 4000)
    assert log.state.growing_count() == 0
    assert log.cycle() == []  # it holds all of them: nothing more to add


def test_a_gang_still_starts_with_all_its_replicas_or_waits():
    log = Log(*cluster(gpus=2), submitted("gang", 4, gang=True))
    events = log.cycle()
    assert not of(events, JobPlaced, "gang")
    assert of(events, JobReplicasAdded, "gang") == []


def test_distributed_training_that_does_not_say_waits_for_all_its_workers_unless_it_says_gang_false():
    log = Log(*cluster(gpus=2), submitted("ddp", 4, kind=JobKind.TRAINING))
    log.add(submitted("tolerant", 4, kind=JobKind.TRAINING, gang=False))
    events = log.cycle()
    assert not of(events, JobPlaced, "ddp")  # a gang by its kind: all four or none
    (tolerant,) = of(events, JobPlaced, "tolerant")
    assert [r.replica for r in tolerant.replicas] == [0, 1]  # type: ignore[attr-defined]


def test_a_run_grows_by_what_fits_and_says_what_still_waits():
    log = Log(*cluster(gpus=4), submitted("a", 2, gang=True), submitted("b", 1, gpus=1, gang=True))
    log.add(submitted("array", 6))
    events = log.cycle()
    (array,) = of(events, JobPlaced, "array")
    assert len(array.replicas) == 1  # type: ignore[attr-defined]
    log.add(JobSucceeded(job_id="a", cluster="c", run=1))
    (added,) = of(log.cycle(), JobReplicasAdded, "array")
    assert isinstance(added, JobReplicasAdded)
    assert [r.replica for r in added.replicas] == [1, 2] and added.running_replicas == 3
    assert "running 3 of 6 replicas; 3 wait for room" in added.explanation


def test_an_inference_service_started_below_its_replica_count_scales_up_when_room_appears():
    service = submitted("svc", 4, kind=JobKind.INFERENCE, inference=InferenceSpec(min_replicas=2))
    log = Log(*cluster(gpus=4), submitted("batch", 1, gpus=2, gang=True), service)
    (placed,) = of(log.cycle(), JobPlaced, "svc")
    assert len(placed.replicas) == 2  # type: ignore[attr-defined]
    log.add(JobSucceeded(job_id="batch", cluster="c", run=1))
    (added,) = of(log.cycle(), JobReplicasAdded, "svc")
    assert isinstance(added, JobReplicasAdded) and added.running_replicas == 4


def test_a_top_up_never_preempts():
    array = a_job("array").gpus(1).replicas(2, gang=False).build()
    grown = replace(running(array, "cluster-a", ("a1", (0,), 1000), ("a1", (1,), 1000)), replicas_asked=4)
    nodes = [a_node("a1").gpus(4, free=(0, 0, 1000, 1000)).build()]
    (add,) = [d for d in schedule(snapshot(nodes, [], [grown])).decisions if isinstance(d, AddReplicas)]
    assert len(add.replicas) == 2 and (add.held, add.asked) == (2, 4)
    # No room: nothing is added, and the best-effort job that holds the rest is left alone.
    busy = a_job("busy").gpus(2).priority(PriorityClass.BEST_EFFORT).build()
    full = [a_node("a1").gpus(4, free=(0, 0, 0, 0)).build()]
    r = schedule(snapshot(full, [], [grown, running(busy, "cluster-a", ("a1", (2, 3), 1000))]))
    assert r.decisions == ()


def test_a_top_up_stays_in_its_runs_cluster():
    array = a_job("array").gpus(1).replicas(1, gang=False).build()
    run = running(array, "cluster-a", ("a1", (0,), 1000))
    grown = replace(run, replicas_asked=3)
    nodes = [
        a_node("a1").cluster("cluster-a").gpus(2, free=(0, 1000)).build(),
        a_node("b1").cluster("cluster-b").gpus(8).build(),
    ]
    (add,) = [d for d in schedule(snapshot(nodes, [], [grown])).decisions if isinstance(d, AddReplicas)]
    assert add.cluster == "cluster-a" and [p.node_id for p in add.replicas] == ["a1"]


def test_a_placement_that_starts_smaller_is_a_place_decision_with_every_replica_it_holds():
    job = a_job("array").gpus(1).replicas(4, gang=False).build()
    r = schedule(snapshot([a_node("a1").gpus(2).build()], [replace(job, min_replicas=1)]))
    (p,) = [d for d in r.decisions if isinstance(d, Place)]
    assert len(p.replicas) == 2 and "running 2 of 4 replicas" in p.message


def test_a_repeated_top_up_changes_nothing():
    log = Log(*cluster(gpus=4), submitted("first", 2, gang=True), submitted("array", 4))
    log.cycle()
    log.add(JobSucceeded(job_id="first", cluster="c", run=1))
    (added,) = of(log.cycle(), JobReplicasAdded, "array")
    log.add(added)  # the same event appended again
    (run,) = log.state.snapshot(log.now).running
    assert len(run.placements) == 4 and run.job.replicas == 4


def test_a_hard_budget_counts_an_added_replica_from_when_it_was_added() -> None:
    job = a_job("array").gpus(1).replicas(2, gang=False).build()
    run = running(job, "cluster-a", ("a1", (0,), 1000), ("a1", (1,), 1000))
    spec = BudgetSpec(tenant=job.tenant, window=BudgetWindow.MONTH, gpu_hours=100)
    hour = 3_600_000
    window = Window(0, 100 * hour, "w")

    def spent(grown: tuple[tuple[int, int], ...] | None) -> int:
        holdings = Holdings(HeldLedger(), (run,), lambda _: 0, None if grown is None else (lambda _: grown))
        (budget,) = hard_budgets({"b": spec}, lambda *_: window, {}, holdings, 10 * hour, PolicyConfig())
        return budget.spent_milli_ms

    # Two replicas held for the 10 hours so far (no expected runtime: the policy's default is shorter).
    assert spent(None) == 2000 * 10 * hour
    # One of them was added at hour 4: it counts from then.
    assert spent(((4 * hour, 1000),)) == 1000 * 10 * hour + 1000 * 6 * hour


def test_a_simulation_counts_an_added_replica_from_when_it_was_added() -> None:
    from events.catalog.budget_windows import utc
    from services.scheduler.core.simulated_budgets import SimulatedBudgets

    job = a_job("array").gpus(1).replicas(2, gang=False).build()
    first = running(job, "cluster-a", ("a1", (0,), 1000))
    spec = BudgetSpec(tenant=job.tenant, window=BudgetWindow.MONTH, gpu_hours=100)
    hour = 3_600_000
    budgets = SimulatedBudgets.of({"b": spec}, {}, lambda _: utc, PolicyConfig())
    budgets.advance(0)
    budgets.started(first)
    budgets.advance(4 * hour)
    added = running(job, "cluster-a", ("a1", (1,), 1000)).placements
    budgets.grew(first, added, 4 * hour)
    grown = replace(first, placements=first.placements + added)
    budgets.advance(6 * hour)
    # While it runs: the first replica from its start, the added one from hour 4 (to the run's expected end).
    (live,) = budgets.in_force(6 * hour, (grown,))
    assert live.spent_milli_ms == 1000 * 6 * hour + 1000 * 2 * hour
    budgets.advance(10 * hour)
    budgets.ended(grown, 10 * hour)
    (ended,) = budgets.in_force(10 * hour, ())
    assert ended.spent_milli_ms == 1000 * 10 * hour + 1000 * 6 * hour
    (window,) = budgets.report(10 * hour)
    assert window["used_gpu_hours"] == 16.0
