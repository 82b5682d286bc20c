"""Explanations that stay true (issue 20): a waiting job whose reasons do not change gets a new
``JobQueued`` when its place in the queue or its estimated start moves materially (at most once a
minute), so ``fedsched explain`` does not freeze at the last change of its reasons; a cycle that changes
nothing for it publishes nothing."""

from __future__ import annotations

from typing import Any

from events.catalog.decisions import JobQueued
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobSucceeded
from events.wire.envelope import Envelope
from services.scheduler.core.decide import decide
from services.scheduler.core.state import SchedulerState
from tests.unit.projections.builders import a_job, a_node

T0 = 1_900_000_000_000
MIN = 60_000


class Log:
    def __init__(self) -> None:
        self.state = SchedulerState()
        self.count = 0

    def add(self, event: Any, at_ms: int) -> None:
        self.count += 1
        self.state.fold(Envelope(id=f"e{self.count}", time_ms=at_ms, data=event))

    def decide(self, now_ms: int) -> list[Any]:
        decided = decide(self.state, now_ms)
        for envelope in decided.events:
            self.add(envelope.data, now_ms)
        return [e.data for e in decided.events]


def waits(events: list[Any]) -> dict[str, int | None]:
    return {e.job_id: e.queue_position for e in events if isinstance(e, JobQueued)}


def test_a_waiting_jobs_position_is_published_again_as_the_jobs_ahead_of_it_start() -> None:
    log = Log()
    log.add(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"), T0)
    log.add(a_node(gpus=8), T0)
    for i, name in enumerate(("j1", "j2", "j3", "j4")):
        log.add(a_job(name, gpus=8).model_copy(update={"expected_runtime_s": 600}), T0 + i)
    first = log.decide(T0 + 1000)
    assert waits(first) == {"j2": 1, "j3": 2, "j4": 3}  # j1 placed
    assert waits(log.decide(T0 + 2000)) == {}  # nothing moved: nothing published
    log.add(JobSucceeded(job_id="j1", cluster="c1", run=1), T0 + 10 * MIN)
    moved = log.decide(T0 + 10 * MIN + 1000)  # j2 placed: j3 and j4 each move up one place
    assert waits(moved) == {"j3": 1, "j4": 2}
    why = next(e for e in moved if isinstance(e, JobQueued) and e.job_id == "j3")
    assert "position 1 in the queue" in why.message


def test_a_moved_wait_is_not_published_again_within_a_minute() -> None:
    log = Log()
    log.add(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"), T0)
    log.add(a_node(gpus=8), T0)
    for i, name in enumerate(("j1", "j2", "j3")):
        log.add(a_job(name, gpus=8).model_copy(update={"expected_runtime_s": 10}), T0 + i)
    log.decide(T0 + 1000)
    log.add(JobSucceeded(job_id="j1", cluster="c1", run=1), T0 + 20_000)
    assert waits(log.decide(T0 + 21_000)) == {}  # j3 moved up, but its last wait is 20 s old
    log.add(JobSucceeded(job_id="j2", cluster="c1", run=1), T0 + 2 * MIN)
    assert "j3" not in waits(log.decide(T0 + 2 * MIN + 1000))  # placed now, not waiting
