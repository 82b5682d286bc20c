"""An event appended again at a later offset, after any number of other records, changes nothing governance
knows or does: its state and what its rules decide are those of the history without the repeat."""

from __future__ import annotations

from typing import Any

import pytest

from events.catalog.decisions import JobQueued
from events.catalog.inventory import ClusterStatus, ClusterStatusChanged, NodeObserved
from events.catalog.reasons import ReasonCode
from events.catalog.types import CycleId, JobId, NodeId
from events.wire.envelope import Envelope
from services.governance.core.config import GovConfig, IdleRule
from services.governance.core.rules import evaluate
from services.governance.core.state import GovState
from tests.governance.builders import CLUSTER, MIN, History, a_history, types

pytestmark = pytest.mark.timeout(60)

LATER = 100
IDLE = GovConfig(idle=(IdleRule(idle_after_ms=20 * MIN, grace_ms=10 * MIN),))


def state_of(envelopes: list[Envelope]) -> GovState:
    state = GovState()
    for envelope in envelopes:
        state.fold(envelope)
    return state


def known(state: GovState, config: GovConfig) -> dict[str, Any]:
    return {
        "now": state.now_ms,
        "jobs": dict(sorted(state.jobs.items())),
        "lost": state.lost_nodes,
        "unreachable": state.unreachable,
        "quota": (state.base_quota, state.base_versions, state.granted_ms),
        "requests": state.requests,
        "settled": state.settled,
        "outputs": [(o.id, o.time_ms, o.event.model_dump_json()) for o in evaluate(state, config)],
    }


def assert_repeat_changes_nothing(history: History, repeated: int, config: GovConfig = IDLE) -> None:
    """``history`` with its record ``repeated`` appended again at the end (after ``LATER`` records at least)."""
    envelopes = history.envelopes
    assert len(envelopes) - repeated > LATER
    without = known(state_of(envelopes), config)
    assert known(state_of([*envelopes, envelopes[repeated]]), config) == without


def idle_notebook() -> History:
    """Busy in its first minutes, then idle for long: warned by the idle rule."""
    history = a_history().submit("nb", kind="notebook").place("nb", at=0).start("nb", at=1).usage("nb", 80, at=5)
    for step in range(LATER):
        history.usage("nb", 1, at=10 + step * 0.25)
    return history


def test_a_busy_usage_report_that_comes_again_does_not_make_an_idle_notebook_look_busy() -> None:
    history = idle_notebook()
    assert types(evaluate(state_of(history.envelopes), IDLE)) == ["JobIdleWarning"]
    for repeated in range(4):  # the submission, placement, start and the busy sample
        assert_repeat_changes_nothing(history, repeated)


def test_a_node_loss_that_comes_again_after_the_node_came_back_does_not_lose_it_again() -> None:
    history = a_history().node_removed("n1", at=1)  # generation 9
    back = NodeObserved(cluster=CLUSTER, node=NodeId("n1"), generation=10, cpu_milli=1000, memory_mib=1024)
    history.add(back, 2)
    for step in range(LATER):
        history.tick(3 + step)
    assert state_of(history.envelopes).lost_nodes == {}
    assert_repeat_changes_nothing(history, 0)


def test_an_old_unreachable_status_that_comes_again_does_not_make_the_cluster_unreachable() -> None:
    history = a_history()
    history.add(ClusterStatusChanged(cluster=CLUSTER, status=ClusterStatus.UNREACHABLE, reason=ReasonCode.NODE_LOST), 1)
    history.add(ClusterStatusChanged(cluster=CLUSTER, status=ClusterStatus.REACHABLE, reason=ReasonCode.PLACED), 2)
    for step in range(LATER):
        history.tick(3 + step)
    assert state_of(history.envelopes).unreachable == {}
    assert_repeat_changes_nothing(history, 0)


def test_an_operators_quota_set_again_after_a_grant_publishes_nothing_new() -> None:
    history = a_history().quota("team-a", 1000, at=0).request("r1", 2000, at=1)
    config = GovConfig()
    history.then_publish(evaluate(state_of(history.envelopes), config))  # approved by rule, granted
    history.then_publish(evaluate(state_of(history.envelopes), config))
    assert state_of(history.envelopes).granted_ms
    for step in range(LATER):
        history.tick(2 + step)
    assert evaluate(state_of(history.envelopes), config) == []
    assert_repeat_changes_nothing(history, 0, config)


def wait(cycle: int, reason: ReasonCode) -> JobQueued:
    return JobQueued(job_id=JobId("j"), cycle_id=CycleId(f"cycle-{cycle:09d}"), reasons=(reason,), message="m")


def test_a_wait_a_start_or_an_end_that_comes_again_changes_nothing() -> None:
    history = a_history().submit("j", max_runtime_s=36_000).add(wait(1, ReasonCode.INSUFFICIENT_GPU), 1)
    history.start("j", at=2, run=1)  # read before its placement: held for it
    history.place("j", at=3).add(wait(7, ReasonCode.QUOTA_EXCEEDED), 4)
    history.place("j", at=5, run=2).fail("j", at=6, run=2)  # the first run never reported its end: facts kept
    for step in range(LATER):
        history.tick(7 + step)
    facts = state_of(history.envelopes).jobs["j"]
    assert facts.queued_reasons == ("QuotaExceeded",) and facts.runs[1].started_ms is not None
    for repeated in range(7):
        assert_repeat_changes_nothing(history, repeated, GovConfig())


def test_a_decision_read_before_its_request_decides_it_as_in_the_other_order() -> None:
    """Requests and decisions are keyed by tenant, but a reader may meet them in any order (a rebuild, the
    fuzzed streams): the decision read first waits for its request instead of being dropped."""
    from events.catalog.governance import QuotaRequestRejected

    history = a_history().request("more", 8000, at=1)
    submitted = history.envelopes[-1]
    rejected = Envelope(
        id="rejected",
        time_ms=submitted.time_ms + 1,
        data=QuotaRequestRejected(request_id="more", tenant="team-a", decided_by="bob"),
    )
    in_order = state_of([submitted, rejected])
    reversed_ = state_of([rejected, submitted])
    assert in_order.requests["more"].decision == reversed_.requests["more"].decision == rejected.data
    assert evaluate(reversed_, IDLE) == evaluate(in_order, IDLE)
