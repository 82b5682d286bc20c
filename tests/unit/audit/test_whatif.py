"""``audit whatif``'s simulation of recorded history: the same window as what really happened, and a
preemption gives the room at once. No log needed: the history is built here."""

from __future__ import annotations

from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuDevice, NodeObserved
from events.catalog.jobs import JobKind, PriorityClass
from events.envelope import Envelope
from services.audit.whatif import History, Outcome, simulate
from services.scheduler.policy import PolicyConfig
from services.scheduler.state import SchedulerState
from tests.scheduler.builders import a_job

T0 = 1_767_225_600_000
HOUR = 3_600_000


def fleet(gpus: int = 8) -> SchedulerState:
    state = SchedulerState()
    events = [
        ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"),
        NodeObserved(
            cluster="c1",
            node="n1",
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
