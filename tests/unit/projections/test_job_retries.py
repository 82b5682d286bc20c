"""The job view of a run that failed and its retry (issue 21, item 5): the failure leaves the job waiting
for the scheduler's verdict, not failed; the verdict queues it again (a retry in its timeline, the
attempts counted) or ends it failed with the scheduler's words; in any order the two topics are read."""

from __future__ import annotations

import pytest

from events.catalog.decisions import FailureKind, JobRetriesExhausted, JobRetryScheduled
from events.catalog.jobs import JobFailed, JobStarted, JobSucceeded, RetrySpec
from events.catalog.reasons import ReasonCode
from tests.unit.projections.builders import Fold, a_job, a_node, placed

pytestmark = pytest.mark.timeout(30)

T = 1_000_000  # the fold's time origin (at_s=0)


def node_lost(run: int = 1) -> JobFailed:
    return JobFailed(job_id="j1", cluster="c1", run=run, reason=ReasonCode.NODE_FAILURE, node="n1", message="lost")


def retry(run: int = 1, attempt: int = 1) -> JobRetryScheduled:
    return JobRetryScheduled(
        job_id="j1",
        cycle_id=f"cycle-{run}",
        run=run,
        cluster="c1",
        node="n1",
        failure=ReasonCode.NODE_FAILURE,
        kind=FailureKind.INFRASTRUCTURE,
        allowed=3,
        attempt=attempt,
        not_before_ms=T + 90_000,
        message=f"retry {attempt} of 3 after node n1 failed (run {run} on c1)",
    )


def exhausted(run: int = 1) -> JobRetriesExhausted:
    return JobRetriesExhausted(
        job_id="j1",
        cycle_id=f"cycle-{run}",
        run=run,
        cluster="c1",
        node="n1",
        failure=ReasonCode.NODE_FAILURE,
        kind=FailureKind.INFRASTRUCTURE,
        allowed=0,
        used=0,
        message="not retried after node n1 failed (run 1 on c1): best_effort jobs get no retry",
    )


def test_a_run_the_node_loss_failed_is_retried_and_the_view_shows_the_retry_and_the_attempts() -> None:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(a_job(gpus=2))
    fold.feed(placed(gpus=(0, 1)), at_s=1)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=5)
    fold.feed(node_lost(), at_s=60)
    job = fold.get("jobs", "j1")
    assert (job.status, job.last_reason, job.cluster) == ("queued", "NodeFailure", None)  # not failed: awaits
    assert fold.get("nodes", "c1/n1").allocations == ()
    fold.feed(retry(), at_s=61)
    job = fold.get("jobs", "j1")
    assert (job.status, job.retries, job.preemptions, job.ended_ms) == ("queued", 1, 0, None)
    assert job.timeline[-1].event == "JobRetryScheduled" and job.timeline[-1].reason == "RetryScheduled"
    assert job.last_message.startswith("retry 1 of 3 after node n1 failed")
    assert job.last_decision_type == "JobRetryScheduled"
    fold.feed(placed(node="n1", gpus=(2, 3), run=2), at_s=90)
    fold.feed(JobStarted(job_id="j1", cluster="c1", run=2), at_s=91)
    fold.feed(JobSucceeded(job_id="j1", cluster="c1", run=2), at_s=200)
    job = fold.get("jobs", "j1")
    assert (job.status, job.runs, job.retries) == ("succeeded", 2, 1)
    assert [e.status for e in job.timeline] == [
        "submitted", "placed", "running", "queued", "queued", "placed", "running", "succeeded",
    ]  # fmt: skip


def test_retries_exhausted_end_the_job_failed_with_the_scheduler_s_words() -> None:
    fold = Fold()
    fold.feed(a_job())
    fold.feed(placed(), at_s=1)
    fold.feed(node_lost(), at_s=60)
    fold.feed(exhausted(), at_s=61)
    job = fold.get("jobs", "j1")
    assert (job.status, job.last_reason, job.ended_ms) == ("failed", "RetriesExhausted", T + 61_000)
    assert "best_effort jobs get no retry" in job.last_message


@pytest.mark.parametrize("verdict", ["retry", "exhausted"])
def test_the_verdict_read_before_the_failure_it_answers_gives_the_same_view(verdict: str) -> None:
    answer = retry() if verdict == "retry" else exhausted()
    views = []
    for answer_first in (False, True):
        fold = Fold()
        fold.feed(a_job())
        fold.feed(placed(), at_s=1)
        events = [(node_lost(), 60), (answer, 61)]
        for event, at in reversed(events) if answer_first else events:
            fold.feed(event, at_s=at)
        job = fold.get("jobs", "j1")
        views.append((job.status, job.retries, job.ended_ms, [e.event for e in job.timeline]))
    assert views[0] == views[1]
    assert views[0][0] == ("queued" if verdict == "retry" else "failed")


def test_a_failure_of_the_workload_fails_the_job_unless_it_asked_for_retries() -> None:
    crashed = JobFailed(job_id="j1", cluster="c1", run=1, reason=ReasonCode.NON_ZERO_EXIT, exit_code=1)
    for asked, status in ((0, "failed"), (2, "queued")):
        fold = Fold()
        fold.feed(a_job().model_copy(update={"retry": RetrySpec(on_application_failure=asked)}))
        fold.feed(placed(), at_s=1)
        fold.feed(crashed, at_s=30)
        assert fold.get("jobs", "j1").status == status
