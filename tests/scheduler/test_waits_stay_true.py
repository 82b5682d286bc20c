"""Explanations that stay true (issue 20): a waiting job whose reasons do not change gets a new
``JobQueued`` when its place in its own queue or in the federation's order, or its estimated start,
moves materially (at most once a minute), so ``fedsched explain`` does not freeze at the last change of
its reasons; a cycle that changes nothing for it publishes nothing."""

from __future__ import annotations

from typing import Any

from events.catalog.decisions import JobQueued
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobStarted, JobSucceeded
from events.catalog.pending_reasons import PendingReason
from events.catalog.reasons import ReasonCode
from events.catalog.types import JobId, TenantId
from events.wire.envelope import Envelope
from services.scheduler.core.decide import decide
from services.scheduler.core.outputs import moved_materially
from services.scheduler.core.policy.decisions import Queue
from services.scheduler.core.state import SchedulerState
from services.scheduler.core.state.facts import JobFacts
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
    return {e.job_id: e.federation_position for e in events if isinstance(e, JobQueued)}


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
    assert "1st in team-a/default, 1st in the federation" in why.message


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


def a_long_job(name: str, tenant: str) -> Any:
    return a_job(name, tenant=tenant, gpus=8).model_copy(update={"expected_runtime_s": 600})


def where(events: list[Any]) -> dict[str, tuple[int | None, int | None, int | None]]:
    """Each published wait: its place in its own queue, in the federation, and its estimated start (s)."""
    return {
        e.job_id: (
            e.tenant_queue_position,
            e.federation_position,
            None if e.estimated_start_ms is None else (e.estimated_start_ms - T0) // 1000,
        )
        for e in events
        if isinstance(e, JobQueued)
    }


def test_both_places_and_the_estimated_start_move_as_the_jobs_ahead_start_at_most_once_a_minute() -> None:
    log = Log()
    log.add(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"), T0)
    log.add(a_node(gpus=8), T0)
    log.add(a_long_job("a1", "team-a"), T0)
    log.decide(T0 + 1000)  # a1 placed
    log.add(JobStarted(job_id="a1", cluster="c1", run=1), T0 + 2000)  # ... and runs ten minutes from its start
    for i, (name, tenant) in enumerate((("b1", "team-b"), ("a2", "team-a"), ("b2", "team-b"))):
        log.add(a_long_job(name, tenant), T0 + 3000 + i * 1000)
    first = log.decide(T0 + 10_000)
    # team-a holds the node: team-b's first job goes first; each expected when a1 ends (602 s).
    assert where(first) == {"b1": (1, 1, 602), "a2": (1, 2, 602), "b2": (2, 3, 602)}
    assert {e.pending_reason for e in first if isinstance(e, JobQueued)} == {PendingReason.CAPACITY}

    log.add(JobSucceeded(job_id="a1", cluster="c1", run=1), T0 + 10 * MIN)
    moved = log.decide(T0 + 10 * MIN + 1000)  # b1 placed: the others move up, in both orders
    # Placed in this very cycle, b1 is not yet a running job whose end the estimate can count on.
    assert where(moved) == {"a2": (1, 1, None), "b2": (1, 2, None)}
    log.add(JobStarted(job_id="b1", cluster="c1", run=1), T0 + 10 * MIN + 2000)
    assert where(log.decide(T0 + 10 * MIN + 30_000)) == {}  # the estimate is back, but within the minute
    later = log.decide(T0 + 11 * MIN + 5000)
    assert where(later) == {"a2": (1, 1, 1202), "b2": (1, 2, 1202)}  # when b1 ends, from its start
    assert where(log.decide(T0 + 13 * MIN)) == {}  # nothing moved since


def test_a_move_in_its_own_queue_is_material_though_the_federations_order_hardly_moved() -> None:
    facts = JobFacts()
    facts.last_queued_at = (T0, 50, 2, None)  # 50th in the federation, 2nd in its queue

    def wait(federation: int, own: int) -> Queue:
        return Queue(JobId("j"), TenantId("t"), (), ReasonCode.INSUFFICIENT_GPU, "", (), "", federation, own, None)

    assert moved_materially(facts, wait(49, 1), T0 + MIN)  # next in its queue now
    assert not moved_materially(facts, wait(49, 2), T0 + MIN)  # one place of fifty: not material
    assert moved_materially(facts, wait(40, 2), T0 + MIN)  # a fifth of the federation's order
    assert not moved_materially(facts, wait(49, 1), T0 + MIN - 1)  # but not within a minute of the last
