"""Governance and retries (issue 21, item 5): a run the infrastructure failed leaves the job open, so its
next runs are still watched (idle GPUs, runtime limits, crash loops); the scheduler's
``JobRetriesExhausted`` ends it. The failure still counts as one of the node's failed runs."""

from __future__ import annotations

import pytest

from events.catalog.decisions import FailureKind, JobRetriesExhausted
from events.catalog.jobs import JobFailed
from events.catalog.reasons import ReasonCode
from events.catalog.types import CycleId, JobId, NodeId
from tests.governance.builders import CLUSTER, a_history

pytestmark = pytest.mark.timeout(30)


def node_lost(run: int = 1) -> JobFailed:
    return JobFailed(job_id=JobId("j"), cluster=CLUSTER, run=run, reason=ReasonCode.NODE_FAILURE, node=NodeId("n1"))


def test_a_run_the_node_loss_failed_leaves_the_job_open_for_its_retry_and_the_verdict_ends_it() -> None:
    history = a_history().submit("j").place("j", at=1).start("j", at=2).add(node_lost(), at=30)
    state = history.state()
    assert state.jobs["j"].terminal is None and "j" in state.active
    history.place("j", at=31, run=2, nodes=("n2",)).start("j", at=32, run=2)
    assert history.state().jobs["j"].live_run() is not None  # the retry is watched like any run
    exhausted = JobRetriesExhausted(
        job_id=JobId("j"),
        cycle_id=CycleId("c9"),
        run=2,
        cluster=CLUSTER,
        failure=ReasonCode.NODE_FAILURE,
        kind=FailureKind.INFRASTRUCTURE,
        allowed=1,
        used=1,
        message="not retried",
    )
    failed_again = history.add(node_lost(run=2), at=40).state()
    assert "j" in failed_again.jobs and "j" not in failed_again.settled  # the verdict is still to come
    ended = history.add(exhausted, at=41).state()
    assert "j" in ended.settled and "j" not in ended.active  # ended for good: its facts are let go


def test_a_failure_of_the_workload_still_ends_the_job_at_once() -> None:
    state = a_history().submit("j").place("j", at=1).start("j", at=2).fail("j", at=30).state()
    assert "j" in state.settled and "j" not in state.active
