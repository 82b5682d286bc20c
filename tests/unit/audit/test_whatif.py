"""``audit whatif``'s simulation of recorded history: the same window as what really happened, and a
preemption gives the room at once. No log needed: the history is built here."""

from __future__ import annotations

from events.catalog.base import Event
from events.catalog.decisions import CandidateScore, JobPlaced, JobPreemptionRequested, ReplicaPlacement
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuDevice, NodeObserved
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobKind,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    PriorityClass,
)
from events.catalog.types import ClusterId, CycleId, JobId, NodeId, Resources, TenantId
from events.wire.envelope import Envelope
from services.audit.whatif import History, Outcome, history_of, simulate
from services.scheduler.core.policy import PolicyConfig
from services.scheduler.core.state import SchedulerState
from tests.scheduler.builders import a_job

T0 = 1_767_225_600_000
HOUR = 3_600_000


def fleet(gpus: int = 8) -> SchedulerState:
    state = SchedulerState()
    events = [
        ClusterRegistered(cluster=ClusterId("c1"), kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"),
        NodeObserved(
            cluster=ClusterId("c1"),
            node=NodeId("n1"),
            generation=1,
            cpu_milli=64_000,
            memory_mib=512_000,
            gpus=tuple(GpuDevice(index=i, model="A100", memory_mib=81_920) for i in range(gpus)),
        ),
    ]
    for i, data in enumerate(events):
        state.fold(Envelope(id=f"e{i}", time_ms=T0, data=data))
    return state


def test_a_preemption_gives_the_room_at_once_not_at_the_next_arrival_or_end() -> None:
    batch = a_job("batch").gpus(8).priority(PriorityClass.BEST_EFFORT).kind(JobKind.BATCH).build()
    urgent = a_job("urgent").gpus(8).priority(PriorityClass.CRITICAL_TRAINING).kind(JobKind.TRAINING).build()
    history = History(fleet(), [(batch, T0, 10 * HOUR), (urgent, T0 + 60_000, HOUR)], Outcome(), T0, T0 + 2 * HOUR)

    preempting = simulate(history, PolicyConfig(preemption=True))
    waiting = simulate(history, PolicyConfig(preemption=False))

    assert preempting.preemptions == 1
    assert preempting.waits_ms["critical_training"] == [0]  # placed the moment it arrived
    # Without preemption it waits for the batch job's ten hours, past the window: it never starts in it.
    assert waiting.preemptions == 0 and waiting.waits_ms["critical_training"] == []
    assert waiting.never_started == 1


def test_the_simulation_counts_within_the_recorded_window_only() -> None:
    long = a_job("long").gpus(8).build()
    later = a_job("later").gpus(8).build()
    history = History(fleet(), [(long, T0, 10 * HOUR), (later, T0 + HOUR, HOUR)], Outcome(), T0, T0 + 2 * HOUR)

    outcome = simulate(history, PolicyConfig())

    # The fleet was full for the whole window: 100%, not the ten hours the long job runs past it.
    assert outcome.allocation_pct() == 100.0
    assert outcome.gpu_milli_ms == 8 * 1000 * 2 * HOUR
    assert outcome.never_started == 1 and outcome.waits_ms["standard"] == [0]


def test_a_preempted_job_that_runs_again_runs_its_whole_runtime_again() -> None:
    """Its first run's end must not end the second one early."""
    batch = a_job("batch").gpus(8).priority(PriorityClass.BEST_EFFORT).kind(JobKind.BATCH).build()
    urgent = a_job("urgent").gpus(8).priority(PriorityClass.CRITICAL_TRAINING).kind(JobKind.TRAINING).build()
    minute = 60_000
    arrivals = [(batch, T0, 60 * minute), (urgent, T0 + 10 * minute, 20 * minute)]
    history = History(fleet(), arrivals, Outcome(), T0, T0 + 2 * HOUR)

    outcome = simulate(history, PolicyConfig(preemption=True))

    # 10 minutes of batch, 20 of urgent, then batch again from the start: 60 more.
    assert outcome.preemptions == 1
    assert outcome.gpu_milli_ms == 8 * 1000 * 90 * minute


# -- the policy in force, replayed, against what was recorded ----------------------------------------

MINUTE = 60_000
C1 = ClusterId("c1")
CYCLE = CycleId("cycle")


def recorded_fleet() -> list[tuple[int, Event]]:
    """An A100 node of eight GPUs and a T4 node of four, registered at T0."""

    def node(name: str, model: str, gpus: int) -> NodeObserved:
        devices = tuple(GpuDevice(index=i, model=model, memory_mib=16_000) for i in range(gpus))
        return NodeObserved(
            cluster=C1, node=NodeId(name), generation=1, cpu_milli=64_000, memory_mib=512_000, gpus=devices
        )

    registered = ClusterRegistered(cluster=C1, kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR")
    return [(0, registered), (0, node("a100", "A100", 8)), (0, node("t4", "T4", 4))]


def submitted(job: str, priority: PriorityClass, kind: JobKind, model: str, gpus: int, runtime_s: int | None) -> Event:
    resources = Resources(cpu_milli=4000, memory_mib=8192, gpus=gpus, gpu_models=(model,))
    return JobSubmitted(
        job_id=JobId(job),
        name=job,
        tenant=TenantId("team-a"),
        kind=kind,
        priority_class=priority,
        resources=resources,
        expected_runtime_s=runtime_s,
    )


def ran(job: str, node: str, gpus: int, run: int = 1) -> list[Event]:
    """Placed on ``node`` and started at once."""
    on = NodeId(node)
    replica = ReplicaPlacement(replica=0, node=on, gpu_indices=tuple(range(gpus)), gpu_milli_each=1000)
    placed = JobPlaced(
        job_id=JobId(job),
        cycle_id=CYCLE,
        cluster=C1,
        run=run,
        replicas=(replica,),
        chosen=CandidateScore(cluster=C1, node=on, total=0),
        explanation="recorded",
    )
    return [placed, JobStarted(job_id=JobId(job), cluster=C1, run=run)]


def preempted(victim: str, by: str) -> list[Event]:
    job = JobId(victim)
    request = JobPreemptionRequested(job_id=job, cycle_id=CYCLE, cluster=C1, preemptor=JobId(by), rule="priority")
    return [request, JobPreempted(job_id=job, cluster=C1)]


def cancelled(job: str, run: int = 0) -> list[Event]:
    return [
        JobCancelRequested(job_id=JobId(job), requester="alice"),
        JobCancelled(job_id=JobId(job), cluster=C1 if run else None, run=run),
    ]


def test_the_policy_in_force_replayed_agrees_with_what_was_recorded_on_cancellations_and_preemptions() -> None:
    """Within the window: a batch job preempted and waiting again at its end (it has started), two jobs
    cancelled while queued (they never started), a notebook cancelled while running (it ends then, not an
    hour after it started); after the window, a preemption that neither side may count."""
    best, std, crit = PriorityClass.BEST_EFFORT, PriorityClass.STANDARD, PriorityClass.CRITICAL_TRAINING
    timeline: list[tuple[int, Event]] = recorded_fleet()
    timeline += [(0, submitted("notebook", std, JobKind.NOTEBOOK, "T4", 4, None))]
    timeline += [(0, e) for e in ran("notebook", "t4", 4)]
    timeline += [(1, submitted("batch", best, JobKind.BATCH, "A100", 8, 3600))] + [
        (1, e) for e in ran("batch", "a100", 8)
    ]
    timeline += [(10, submitted("urgent", crit, JobKind.TRAINING, "A100", 8, 5 * 3600))]
    timeline += [(10, e) for e in preempted("batch", by="urgent") + ran("urgent", "a100", 8)]
    timeline += [(15, submitted("queued", std, JobKind.BATCH, "A100", 8, 1800))]
    timeline += [(16, submitted("queued-2", std, JobKind.BATCH, "T4", 4, 1800))]
    timeline += [(20, e) for e in cancelled("queued")]
    timeline += [(25, e) for e in cancelled("queued-2")]
    timeline += [(110, e) for e in cancelled("notebook", run=1)]
    # After the window: a preemption on the freed T4 node.
    timeline += [(121, submitted("late", best, JobKind.BATCH, "T4", 4, 3600))] + [
        (121, e) for e in ran("late", "t4", 4)
    ]
    timeline += [(125, submitted("later", crit, JobKind.TRAINING, "T4", 4, 3600))]
    timeline += [(125, e) for e in preempted("late", by="later")]
    envelopes = [Envelope(id=f"e{i}", time_ms=T0 + at * MINUTE, data=data) for i, (at, data) in enumerate(timeline)]

    history = history_of(envelopes, until_ms=T0 + 120 * MINUTE)
    replayed = simulate(history, history.state.policy_config())

    recorded = history.actual
    assert (recorded.preemptions, recorded.never_started) == (1, 2)  # the one at 125 min is after the window
    assert (replayed.preemptions, replayed.never_started) == (1, 2)  # the two cancelled while queued
    assert history.cancels == {"queued": T0 + 20 * MINUTE, "queued-2": T0 + 25 * MINUTE, "notebook": T0 + 110 * MINUTE}
    # The notebook held its T4s until it was cancelled, on both sides: the same GPU time, to the minute.
    assert replayed.gpu_milli_ms == recorded.gpu_milli_ms == 1000 * (4 * 110 + 8 * 9 + 8 * 110) * MINUTE
    assert dict(replayed.waits_ms) == dict(recorded.waits_ms)
