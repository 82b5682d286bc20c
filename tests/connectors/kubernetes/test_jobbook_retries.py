"""The Kubernetes connector's job book keeps a job's submission across a run that failed for a cause that
may be retried (issue 21, item 5): the retry's placement needs it, and the scheduler's verdict, not the
failure, says the job has ended."""

from __future__ import annotations

import pytest

from events.catalog.jobs import JobFailed, RetrySpec
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, JobId
from events.log.memory import MemoryLog
from tests.unit.projections.builders import a_job

pytestmark = pytest.mark.timeout(30)


def book_after(*events: object):  # type: ignore[no-untyped-def]
    from connectors.kubernetes.jobbook import JobBook

    book = JobBook(MemoryLog(), ClusterId("c1"))
    for event in events:
        book.apply(event)  # type: ignore[arg-type]
    return book


def failed(reason: ReasonCode) -> JobFailed:
    return JobFailed(job_id="j1", cluster="c1", run=1, reason=reason, node="n1")


def test_a_node_failure_keeps_the_submission_for_the_retry_until_the_verdict_ends_the_job() -> None:
    book = book_after(a_job(), failed(ReasonCode.NODE_FAILURE))
    entry = book.entry(JobId("j1"))
    assert entry is not None and entry.submitted is not None and book.run_ended(JobId("j1"), 1)
    book.forget(JobId("j1"))  # JobRetriesExhausted
    assert book.entry(JobId("j1")) is None


def test_a_failure_of_the_workload_ends_the_job_unless_it_asked_for_retries() -> None:
    assert book_after(a_job(), failed(ReasonCode.NON_ZERO_EXIT)).entry(JobId("j1")) is None
    asking = a_job().model_copy(update={"retry": RetrySpec(on_application_failure=1)})
    assert book_after(asking, failed(ReasonCode.NON_ZERO_EXIT)).entry(JobId("j1")) is not None
