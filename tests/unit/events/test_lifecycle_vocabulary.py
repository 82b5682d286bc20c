"""The lifecycle vocabulary (``events.catalog.lifecycle``): every job event type is classified, and the
words are pinned.

Every event type that names a ``job_id`` is listed here with what it does to the job's lifecycle (starts
a run, ends a run, ends the job, or none of these) and the status it leaves the job in; the vocabulary
must say the same. A new job event type fails the first test until it is classified in both places.
"""

from __future__ import annotations

import ast
import inspect
from typing import NamedTuple

import pytest

from events.catalog import REGISTRY, Event, lifecycle
from events.catalog.base import has_field
from events.catalog.decisions import (
    FailureKind,
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReclaimRequested,
    JobReplicasAdded,
    JobRetriesExhausted,
    JobRetryScheduled,
    JobRunClosed,
    RunPartEnd,
)
from events.catalog.governance import GovernanceFinding, JobIdleWarning
from events.catalog.jobs import (
    InferenceSpec,
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobPreempted,
    JobReclaimed,
    JobRejected,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
)
from events.catalog.lifecycle import (
    APPLICATION_FAILURES,
    FINAL_STATUSES,
    INFRASTRUCTURE_FAILURES,
    JOB_END_EVENTS,
    NEVER_RAN,
    OTHER_JOB_EVENTS,
    REQUEUED,
    RUN_CLOSE_EVENTS,
    RUN_END_EVENTS,
    RUN_END_OF,
    RUN_START_EVENTS,
    STATUS_AFTER,
    JobStatus,
    RunEnd,
    awaits_verdict,
    ends_job,
    ends_part,
    ends_run,
    failure_kind,
    final_status,
    run_end,
    spreads,
    status_after,
)
from events.catalog.reasons import ReasonCode

from .catalog_samples import sample

pytestmark = pytest.mark.timeout(30)

STARTS_RUN, ENDS_RUN, ENDS_JOB = "starts a run", "ends a run", "ends the job"
CLOSES_RUN = "closes a spread run"
NEITHER: frozenset[str] = frozenset()

CLASSIFIED: dict[type[Event], tuple[frozenset[str], JobStatus | None]] = {
    JobSubmitted: (NEITHER, JobStatus.SUBMITTED),
    JobQueued: (NEITHER, JobStatus.QUEUED),
    JobPlaced: (NEITHER, JobStatus.PLACED),
    JobReplicasAdded: (NEITHER, None),
    JobStarted: (frozenset({STARTS_RUN}), JobStatus.RUNNING),
    JobSucceeded: (frozenset({ENDS_RUN, ENDS_JOB}), JobStatus.SUCCEEDED),
    JobFailed: (frozenset({ENDS_RUN, ENDS_JOB}), JobStatus.FAILED),
    JobCancelled: (frozenset({ENDS_RUN, ENDS_JOB}), JobStatus.CANCELLED),
    JobPreempted: (frozenset({ENDS_RUN}), JobStatus.QUEUED),
    JobReclaimed: (frozenset({ENDS_RUN}), JobStatus.QUEUED),
    JobRejected: (frozenset({ENDS_JOB}), JobStatus.REJECTED),
    JobCancelRequested: (NEITHER, None),
    JobPreemptionRequested: (NEITHER, None),
    JobReclaimRequested: (NEITHER, None),
    JobIdleWarning: (NEITHER, None),
    GovernanceFinding: (NEITHER, None),
    JobRetryScheduled: (NEITHER, JobStatus.QUEUED),
    JobRetriesExhausted: (frozenset({ENDS_JOB}), JobStatus.FAILED),
    JobRunClosed: (frozenset({CLOSES_RUN}), None),  # the status its outcome leaves: status_after
}
"""Every event type that names a job -> what it does to the lifecycle, and the status it leaves."""


def roles(cls: type[Event]) -> frozenset[str]:
    """What the vocabulary says events of ``cls`` do."""
    listed = {
        STARTS_RUN: RUN_START_EVENTS,
        ENDS_RUN: RUN_END_EVENTS,
        ENDS_JOB: JOB_END_EVENTS,
        CLOSES_RUN: RUN_CLOSE_EVENTS,
    }
    return frozenset(role for role, classes in listed.items() if cls in classes)


def test_every_event_type_that_names_a_job_is_classified_here() -> None:
    # A new event type about a job: say what it does to the lifecycle, here and in events.catalog.lifecycle.
    assert {cls for cls in REGISTRY.classes() if has_field(cls, "job_id")} == set(CLASSIFIED)


@pytest.mark.parametrize("cls", list(CLASSIFIED), ids=lambda cls: cls.__name__)
def test_the_vocabulary_classifies_each_job_event_type_as_listed(cls: type[Event]) -> None:
    expected_roles, expected_status = CLASSIFIED[cls]
    assert roles(cls) == expected_roles
    assert (cls in OTHER_JOB_EVENTS) == (not expected_roles), "listed as neither starting nor ending, or not"
    assert STATUS_AFTER.get(cls) == expected_status


def test_the_vocabulary_lists_only_current_job_event_types() -> None:
    listed = {
        *RUN_START_EVENTS,
        *RUN_END_EVENTS,
        *RUN_CLOSE_EVENTS,
        *JOB_END_EVENTS,
        *OTHER_JOB_EVENTS,
        *STATUS_AFTER,
    }
    assert listed <= set(CLASSIFIED)
    assert len(OTHER_JOB_EVENTS) == len(set(OTHER_JOB_EVENTS))


def test_each_end_of_a_run_has_one_word_and_each_word_one_event() -> None:
    assert set(RUN_END_OF) == set(RUN_END_EVENTS)
    assert sorted(RUN_END_OF.values()) == sorted(RunEnd)
    assert {cls.__name__: how.value for cls, how in RUN_END_OF.items()} == {
        "JobSucceeded": "succeeded",
        "JobFailed": "failed",
        "JobPreempted": "preempted",
        "JobReclaimed": "reclaimed",
        "JobCancelled": "cancelled",
    }


def test_the_words_are_pinned() -> None:
    # Stored in read-model rows, timelines, pod annotations and the API: renaming one is a migration.
    assert [s.value for s in JobStatus] == [
        "submitted",
        "queued",
        "placed",
        "running",
        "succeeded",
        "failed",
        "cancelled",
        "rejected",
    ]
    assert sorted(s.value for s in FINAL_STATUSES) == ["cancelled", "failed", "rejected", "succeeded"]
    assert [h.value for h in RunEnd] == ["succeeded", "failed", "preempted", "reclaimed", "cancelled"]
    assert NEVER_RAN == 0


@pytest.mark.parametrize(
    ("how", "final"),
    [
        (RunEnd.SUCCEEDED, JobStatus.SUCCEEDED),
        (RunEnd.FAILED, JobStatus.FAILED),
        (RunEnd.CANCELLED, JobStatus.CANCELLED),
        (RunEnd.PREEMPTED, None),
        (RunEnd.RECLAIMED, None),
    ],
)
def test_a_run_that_succeeded_failed_or_was_cancelled_ends_its_job_and_the_others_requeue_it(
    how: RunEnd, final: JobStatus | None
) -> None:
    assert final_status(how) == final
    assert (how in REQUEUED) == (final is None)


def test_the_status_after_an_end_of_a_run_is_final_exactly_when_the_event_ends_the_job() -> None:
    for cls, how in RUN_END_OF.items():
        after = STATUS_AFTER[cls]
        assert (after in FINAL_STATUSES) == (cls in JOB_END_EVENTS)
        assert final_status(how) == (after if after in FINAL_STATUSES else None)
    assert {STATUS_AFTER[cls] for cls in JOB_END_EVENTS} == FINAL_STATUSES


class Case(NamedTuple):
    story: str
    event: Event
    ends_run: bool
    ends_job: bool
    run_end: RunEnd | None
    status: JobStatus | None


def _of(cls: type[Event], **changes: object) -> Event:
    return sample(cls).model_copy(update=changes)


CASES = [
    Case("a job cancelled before it was ever placed", _of(JobCancelled, run=0, cluster=None), False, True, None,
         JobStatus.CANCELLED),
    Case("a running job cancelled", _of(JobCancelled, run=2), True, True, RunEnd.CANCELLED, JobStatus.CANCELLED),
    Case("a run that succeeded", _of(JobSucceeded, run=1), True, True, RunEnd.SUCCEEDED, JobStatus.SUCCEEDED),
    Case("a run the workload failed", _of(JobFailed, run=3, reason=ReasonCode.NON_ZERO_EXIT), True, True,
         RunEnd.FAILED, JobStatus.FAILED),
    Case("a run that exceeded its runtime", _of(JobFailed, run=3, reason=ReasonCode.RUNTIME_EXCEEDED), True, True,
         RunEnd.FAILED, JobStatus.FAILED),
    Case("a run its node's loss failed: the scheduler's verdict ends the job, not the failure",
         _of(JobFailed, run=3, reason=ReasonCode.NODE_FAILURE), True, False, RunEnd.FAILED, JobStatus.QUEUED),
    Case("a retry scheduled", _of(JobRetryScheduled), False, False, None, JobStatus.QUEUED),
    Case("the retries exhausted", _of(JobRetriesExhausted), False, True, None, JobStatus.FAILED),
    Case("a run preempted", _of(JobPreempted, run=1), True, False, RunEnd.PREEMPTED, JobStatus.QUEUED),
    Case("a run reclaimed", _of(JobReclaimed, run=2), True, False, RunEnd.RECLAIMED, JobStatus.QUEUED),
    Case("a request rejected at intake", _of(JobRejected), False, True, None, JobStatus.REJECTED),
    Case("a run started", _of(JobStarted, run=1), False, False, None, JobStatus.RUNNING),
    Case("a job submitted", _of(JobSubmitted), False, False, None, JobStatus.SUBMITTED),
    Case("a job placed", _of(JobPlaced), False, False, None, JobStatus.PLACED),
    Case("a cancellation asked for", _of(JobCancelRequested), False, False, None, None),
    Case("a preemption asked for", _of(JobPreemptionRequested), False, False, None, None),
    Case("an idle warning", _of(JobIdleWarning), False, False, None, None),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.story for case in CASES])
def test_what_an_event_ends_and_the_status_it_leaves(case: Case) -> None:
    assert ends_run(case.event) is case.ends_run
    assert ends_job(case.event) is case.ends_job
    assert run_end(case.event) == case.run_end
    assert status_after(case.event) == case.status


@pytest.mark.parametrize(
    ("reason", "asked", "awaits"),
    [
        (ReasonCode.NODE_FAILURE, 0, True),
        (ReasonCode.NODE_LOST, 0, True),
        (ReasonCode.NODE_DELETED, 0, True),
        (ReasonCode.GPU_FAILURE, 0, True),
        (ReasonCode.NPU_FAILURE, 0, True),
        (ReasonCode.NON_ZERO_EXIT, 0, False),
        (ReasonCode.NON_ZERO_EXIT, 2, True),
        (ReasonCode.OUT_OF_MEMORY, 1, True),
        (ReasonCode.RUNTIME_EXCEEDED, 5, False),
        (ReasonCode.LAUNCH_FAILED, 5, False),
        (ReasonCode.ALLOCATION_LEASE_EXPIRED, 5, False),
    ],
)
def test_an_infrastructure_failure_always_awaits_the_verdict_a_workload_failure_only_when_retries_were_asked(
    reason: ReasonCode, asked: int, awaits: bool
) -> None:
    failed = _of(JobFailed, reason=reason)
    assert awaits_verdict(failed, asked) is awaits
    assert ends_job(failed, asked) is not awaits
    assert status_after(failed, asked) is (JobStatus.QUEUED if awaits else JobStatus.FAILED)
    assert ends_run(failed)


def test_failure_kinds_are_pinned() -> None:
    assert {failure_kind(r) for r in INFRASTRUCTURE_FAILURES} == {FailureKind.INFRASTRUCTURE}
    assert {failure_kind(r) for r in APPLICATION_FAILURES} == {FailureKind.APPLICATION}
    assert not INFRASTRUCTURE_FAILURES & APPLICATION_FAILURES
    assert failure_kind(ReasonCode.RUNTIME_EXCEEDED) is None


def test_a_status_read_back_as_a_plain_string_is_found_by_its_word() -> None:
    # Readers hold statuses as plain strings (database rows, timelines, protobuf fields).
    assert "succeeded" in FINAL_STATUSES and "rejected" in FINAL_STATUSES
    assert "running" not in FINAL_STATUSES and "unknown" not in FINAL_STATUSES
    assert JobStatus("running") is JobStatus.RUNNING and RunEnd.PREEMPTED in {"preempted"}
    assert f"{JobStatus.CANCELLED}" == "cancelled" and str(RunEnd.RECLAIMED) == "reclaimed"


def test_the_vocabulary_imports_only_the_catalogue() -> None:
    tree = ast.parse(inspect.getsource(lifecycle))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    outside = {name for name in imported if not name.startswith("events.catalog.")}
    assert outside <= {"__future__", "collections.abc", "enum", "types", "typing"}


def test_the_pod_transitions_that_end_a_run_are_the_vocabulary_s_run_ends() -> None:
    from connectors.kubernetes import lifecycle as pods

    assert {t.value for t in pods.RUN_ENDS} == {h.value for h in RunEnd}
    assert set(pods.Transition) - pods.RUN_ENDS == {pods.Transition.STARTED}


def test_the_public_names_are_pinned() -> None:
    assert sorted(lifecycle.__all__) == sorted(
        [
            "APPLICATION_FAILURES",
            "INFRASTRUCTURE_FAILURES",
            "awaits_verdict",
            "failure_kind",
            "FINAL_STATUSES",
            "JOB_END_EVENTS",
            "NEVER_RAN",
            "OTHER_JOB_EVENTS",
            "REQUEUED",
            "RUN_CLOSE_EVENTS",
            "RUN_END_EVENTS",
            "RUN_END_OF",
            "RUN_START_EVENTS",
            "STATUS_AFTER",
            "JobEndEvent",
            "JobStatus",
            "RunEnd",
            "RunEndEvent",
            "ends_job",
            "ends_part",
            "ends_run",
            "final_status",
            "run_end",
            "spreads",
            "status_after",
        ]
    )
    for name in lifecycle.__all__:
        assert getattr(lifecycle, name) is not None


def _closed(outcome: RunEnd, reason: ReasonCode | None = None) -> JobRunClosed:
    return JobRunClosed(
        job_id="j-1",
        cycle_id="c-1",
        run=1,
        cluster="b",
        outcome=outcome,
        reason=reason,
        parts=(
            RunPartEnd(cluster="a", outcome=RunEnd.FAILED, reason=ReasonCode.NODE_FAILURE),
            RunPartEnd(cluster="b", outcome=outcome, reason=reason),
        ),
        message="the run ended",
    )


def test_a_spread_jobs_run_end_events_end_only_a_part_and_change_no_status() -> None:
    failed = JobFailed(job_id="j-1", cluster="a", run=1, reason=ReasonCode.NODE_FAILURE)
    succeeded = JobSucceeded(job_id="j-1", cluster="a", run=1)
    for event in (failed, succeeded):
        assert ends_part(event, spread=True) and not ends_part(event, spread=False)
        assert not ends_run(event, spread=True) and ends_run(event, spread=False)
        assert status_after(event, spread=True) is None
        assert not ends_job(event, spread=True)
        assert run_end(event, spread=True) is None
    never_ran = JobCancelled(job_id="j-1", run=NEVER_RAN)
    assert not ends_part(never_ran, spread=True)  # a cancellation before any run ends the job, spread or not
    assert ends_job(never_ran, spread=True) and status_after(never_ran, spread=True) is JobStatus.CANCELLED


@pytest.mark.parametrize(
    ("outcome", "reason", "retries", "status", "ends_the_job", "awaits"),
    [
        (RunEnd.SUCCEEDED, None, 0, JobStatus.SUCCEEDED, True, False),
        (RunEnd.CANCELLED, None, 0, JobStatus.CANCELLED, True, False),
        (RunEnd.PREEMPTED, None, 0, JobStatus.QUEUED, False, False),
        (RunEnd.FAILED, ReasonCode.NODE_FAILURE, 0, JobStatus.QUEUED, False, True),
        (RunEnd.FAILED, ReasonCode.NON_ZERO_EXIT, 0, JobStatus.FAILED, True, False),
        (RunEnd.FAILED, ReasonCode.NON_ZERO_EXIT, 2, JobStatus.QUEUED, False, True),
    ],
)
def test_a_closed_run_ends_as_its_last_part_did(
    outcome: RunEnd, reason: ReasonCode | None, retries: int, status: JobStatus, ends_the_job: bool, awaits: bool
) -> None:
    closed = _closed(outcome, reason)
    assert ends_run(closed, spread=True) and run_end(closed, spread=True) is outcome
    assert status_after(closed, retries, spread=True) is status
    assert ends_job(closed, retries, spread=True) is ends_the_job
    assert awaits_verdict(closed, retries) is awaits


def test_a_closed_run_names_its_last_part() -> None:
    with pytest.raises(ValueError, match="last part"):
        JobRunClosed(
            job_id="j-1",
            cycle_id="c-1",
            run=1,
            cluster="a",
            outcome=RunEnd.PREEMPTED,
            parts=(RunPartEnd(cluster="b", outcome=RunEnd.PREEMPTED),),
            message="x",
        )
    with pytest.raises(ValueError, match="reason is given exactly when"):
        _closed(RunEnd.FAILED)


def test_only_an_inference_service_spread_over_clusters_spreads() -> None:
    base = sample(JobSubmitted)
    assert isinstance(base, JobSubmitted)
    assert not spreads(None) and not spreads(base.model_copy(update={"inference": None}))
    one = base.model_copy(update={"inference": InferenceSpec(min_replicas=1, spread_clusters=1)})
    two = base.model_copy(update={"inference": InferenceSpec(min_replicas=1, spread_clusters=2)})
    assert not spreads(one) and spreads(two)
    assert InferenceSpec(spread_clusters=2).per_cluster_cap(5) == 3
    assert InferenceSpec(spread_clusters=3).per_cluster_cap(6) == 2
