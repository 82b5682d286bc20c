"""The job lifecycle's vocabulary: which statuses are final, which events end a run or the job, and the
word for how a run ended. Defined once, beside the events it reads (``events.catalog.jobs``).

Called by every reader that asks whether a job or a run has ended: the job view
(``projections.stages.jobs``), the scheduler's fold and facts, governance's state and report figures, the
API's watch and explain, the simulated cluster and its benchmark, and the Kubernetes connector (job book,
executor, pod lifecycle). Pure: imports only the catalogue; the functions are a dict lookup or an
``isinstance`` against a tuple, cheap enough for the scheduler's fold.

The words, in the terms of the state machine at the top of ``events.catalog.jobs``:

- A job's status (``JobStatus``) is where the job stands: submitted, queued, placed, running, or one of
  the ``FINAL_STATUSES`` it never leaves (succeeded, failed, cancelled, rejected). ``status_after``
  names the status an event leaves a job in.
- A run (one attempt: the events' ``run``) is opened by its ``JobPlaced``; its workload starts with
  ``JobStarted`` (``RUN_START_EVENTS``) and it ends with one of ``RUN_END_EVENTS``. How it ended is a
  ``RunEnd`` word (``run_end``). A preempted or reclaimed run sends the job back to the queue
  (``REQUEUED``); the other ends of a run end the job too (``final_status``).
- A job ends for good with one of ``JOB_END_EVENTS``: its run succeeded, failed or was cancelled, or the
  intake rejected the request. A ``JobCancelled`` whose ``run`` is ``NEVER_RAN`` (0) cancels a job that
  was never placed: it ends the job and no run (``ends_job`` is true, ``ends_run`` false).
- A run that failed for a cause that may be retried does not end the job by itself (``awaits_verdict``):
  the infrastructure's failures (``INFRASTRUCTURE_FAILURES``: the node failed, was lost or deleted, a
  GPU failed; an eviction is reported as a node failure) always, the workload's own
  (``APPLICATION_FAILURES``) when the job asked for retries (``JobSubmitted.retry``). The scheduler then
  gives the one verdict every reader follows: ``JobRetryScheduled`` (the job is queued again) or
  ``JobRetriesExhausted`` (one of ``JOB_END_EVENTS``: it failed for good). Other failures (a runtime
  exceeded, a launch refused, an expired lease) end the job as before.
- A run that holds fewer replicas than its job asks (a job that is not a gang may start with what fits)
  grows by ``JobReplicasAdded``: the job stays in the status it was in (placed or running); the new
  replicas end with their run.
- A spread run (``spreads``: an inference service with ``inference.spread_clusters`` above 1) has a
  part in each cluster it holds replicas in. There a run-end event ends only its cluster's part
  (``ends_part``) and changes no status; the run ends with the scheduler's ``JobRunClosed``
  (``RUN_CLOSE_EVENTS``), as its last part did (``run_end``, ``status_after``, ``ends_job`` and
  ``awaits_verdict`` read it so when told the job ``spread``s).
- Every other event about a job (``OTHER_JOB_EVENTS``: the submission, the scheduler's decisions, the
  requests to stop, governance's notes) starts and ends nothing. A test holds every event type that
  names a ``job_id`` to these lists, so a new one cannot go unclassified.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import TypeAlias

from events.catalog.base import Event
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
)
from events.catalog.governance import GovernanceFinding, JobIdleWarning
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobPreempted,
    JobReclaimed,
    JobRejected,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
    RunEnd,
)
from events.catalog.reasons import ReasonCode


class JobStatus(StrEnum):
    """Where a job stands, after the latest step of its lifecycle (``status_after``)."""

    SUBMITTED = "submitted"
    QUEUED = "queued"
    PLACED = "placed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"


FINAL_STATUSES: frozenset[JobStatus] = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.REJECTED}
)
"""The statuses a job never leaves: it has ended for good. (A plain ``str`` is found in it by its value.)"""


REQUEUED: frozenset[RunEnd] = frozenset({RunEnd.PREEMPTED, RunEnd.RECLAIMED})
"""Ends of a run after which the job waits in the queue again (the scheduler had it stopped)."""

RunEndEvent: TypeAlias = JobSucceeded | JobFailed | JobCancelled | JobPreempted | JobReclaimed
JobEndEvent: TypeAlias = JobSucceeded | JobFailed | JobCancelled | JobRejected | JobRetriesExhausted

RUN_START_EVENTS: tuple[type[JobStarted], ...] = (JobStarted,)
"""The cluster started the run's workload."""
RUN_END_EVENTS: tuple[type[RunEndEvent], ...] = (JobSucceeded, JobFailed, JobCancelled, JobPreempted, JobReclaimed)
"""The run is over and its resources are free (except a cancellation of a job that never ran, see
``ends_run``); for a spread run, only its part in the event's cluster is (``ends_part``)."""
RUN_CLOSE_EVENTS: tuple[type[JobRunClosed], ...] = (JobRunClosed,)
"""The scheduler closes a spread run once every part it opened has ended: the run ends here, as its last
part did (``JobRunClosed.outcome``), and the job with it when that outcome is final."""
JOB_END_EVENTS: tuple[type[JobEndEvent], ...] = (
    JobSucceeded,
    JobFailed,
    JobCancelled,
    JobRejected,
    JobRetriesExhausted,
)
"""The job has ended for good: its status is final (but a ``JobFailed`` that ``awaits_verdict``)."""
OTHER_JOB_EVENTS: tuple[type[Event], ...] = (
    JobSubmitted,
    JobQueued,
    JobPlaced,
    JobReplicasAdded,
    JobCancelRequested,
    JobPreemptionRequested,
    JobReclaimRequested,
    JobIdleWarning,
    GovernanceFinding,
    JobRetryScheduled,
)
"""The events about a job that start and end nothing."""

INFRASTRUCTURE_FAILURES: frozenset[ReasonCode] = frozenset(
    {
        ReasonCode.NODE_FAILURE,
        ReasonCode.NODE_LOST,
        ReasonCode.NODE_DELETED,
        ReasonCode.GPU_FAILURE,
        ReasonCode.NPU_FAILURE,
    }
)
"""Reasons of a ``JobFailed`` that blame the infrastructure, not the workload: always retried under the
policy's budget of the job's priority class."""
APPLICATION_FAILURES: frozenset[ReasonCode] = frozenset({ReasonCode.NON_ZERO_EXIT, ReasonCode.OUT_OF_MEMORY})
"""Reasons of a ``JobFailed`` that blame the workload: retried only as often as the job asked."""


def failure_kind(reason: ReasonCode | str) -> FailureKind | None:
    """Whose failure a ``JobFailed`` reason names; ``None`` for a failure never retried."""
    if reason in INFRASTRUCTURE_FAILURES:
        return FailureKind.INFRASTRUCTURE
    if reason in APPLICATION_FAILURES:
        return FailureKind.APPLICATION
    return None


NEVER_RAN = 0
"""The ``run`` of a ``JobCancelled`` that cancels a job never placed: it ends the job and no run."""

RUN_END_OF: Mapping[type[Event], RunEnd] = MappingProxyType(
    {
        JobSucceeded: RunEnd.SUCCEEDED,
        JobFailed: RunEnd.FAILED,
        JobCancelled: RunEnd.CANCELLED,
        JobPreempted: RunEnd.PREEMPTED,
        JobReclaimed: RunEnd.RECLAIMED,
    }
)
"""Each event of ``RUN_END_EVENTS`` -> how the run ended."""

_STATUS_AFTER_END: Mapping[RunEnd, JobStatus] = {
    RunEnd.SUCCEEDED: JobStatus.SUCCEEDED,
    RunEnd.FAILED: JobStatus.FAILED,
    RunEnd.CANCELLED: JobStatus.CANCELLED,
    RunEnd.PREEMPTED: JobStatus.QUEUED,
    RunEnd.RECLAIMED: JobStatus.QUEUED,
}

STATUS_AFTER: Mapping[type[Event], JobStatus] = MappingProxyType(
    {
        JobSubmitted: JobStatus.SUBMITTED,
        JobQueued: JobStatus.QUEUED,
        JobPlaced: JobStatus.PLACED,
        JobStarted: JobStatus.RUNNING,
        JobRejected: JobStatus.REJECTED,
        JobRetryScheduled: JobStatus.QUEUED,
        JobRetriesExhausted: JobStatus.FAILED,
        **{cls: _STATUS_AFTER_END[how] for cls, how in RUN_END_OF.items()},
    }
)
"""Each event that moves a job along -> the status it leaves the job in. The others (requests, governance's
notes) leave the status as it was."""


def spreads(submitted: JobSubmitted | None) -> bool:
    """Whether the job's runs live in parts, one per cluster (an inference service with
    ``inference.spread_clusters`` above 1); ``False`` while its submission is not known."""
    return submitted is not None and submitted.inference is not None and submitted.inference.spread_clusters > 1


def status_after(event: Event, application_retries: int = 0, spread: bool = False) -> JobStatus | None:
    """The status ``event`` leaves its job in; ``None`` if it leaves the status as it was. A failure that
    ``awaits_verdict`` leaves it queued (for the scheduler's verdict), not failed. For a ``spread`` job a
    run-end event ends only a part (``None``); its ``JobRunClosed`` leaves the status its outcome does."""
    if spread and ends_part(event, spread):
        return None
    if awaits_verdict(event, application_retries):
        return JobStatus.QUEUED
    if isinstance(event, JobRunClosed):
        return _STATUS_AFTER_END[event.outcome]
    return STATUS_AFTER.get(type(event))


def final_status(how: RunEnd) -> JobStatus | None:
    """The final status a run that ended so gives its job; ``None`` if the job goes back to the queue."""
    status = _STATUS_AFTER_END[how]
    return status if status in FINAL_STATUSES else None


def ends_part(event: Event, spread: bool) -> bool:
    """Whether ``event`` ends a part of a ``spread`` job's run (its cluster's), not the run: a run-end
    event about a run (not a cancellation of a job that never ran) of a job that spreads."""
    return spread and isinstance(event, RUN_END_EVENTS) and event.run != NEVER_RAN


def ends_run(event: Event, spread: bool = False) -> bool:
    """Whether ``event`` ends a run: one of ``RUN_END_EVENTS``, but not a cancellation of a job that never
    ran (``NEVER_RAN``); for a ``spread`` job, only its ``JobRunClosed``."""
    if isinstance(event, JobRunClosed):
        return True
    return not spread and isinstance(event, RUN_END_EVENTS) and event.run != NEVER_RAN


def ends_job(event: Event, application_retries: int = 0, spread: bool = False) -> bool:
    """Whether ``event`` ends its job for good: one of ``JOB_END_EVENTS`` (for a ``spread`` job, not one
    that ends only a part), or a ``JobRunClosed`` whose outcome is final, but not a failure that
    ``awaits_verdict`` (``application_retries``: what the job's submission asked, 0 when not known)."""
    if awaits_verdict(event, application_retries) or ends_part(event, spread):
        return False
    if isinstance(event, JobRunClosed):
        return final_status(event.outcome) is not None
    return isinstance(event, JOB_END_EVENTS)


def awaits_verdict(event: Event, application_retries: int) -> bool:
    """Whether ``event`` is a failure the scheduler gives a retry verdict on (so it does not end the job by
    itself): a ``JobFailed`` or a failed ``JobRunClosed`` of the infrastructure, or of the workload of a
    job that asked for ``application_retries`` (its ``JobSubmitted.retry.on_application_failure``) more
    than 0."""
    if isinstance(event, JobFailed):
        reason: ReasonCode | None = event.reason
    elif isinstance(event, JobRunClosed):
        reason = event.reason
    else:
        return False
    kind = failure_kind(reason) if reason is not None else None
    return kind is FailureKind.INFRASTRUCTURE or (kind is FailureKind.APPLICATION and application_retries > 0)


def run_end(event: Event, spread: bool = False) -> RunEnd | None:
    """How the run ``event`` is about ended; ``None`` if it ends no run (see ``ends_run``)."""
    if isinstance(event, JobRunClosed):
        return event.outcome
    return RUN_END_OF[type(event)] if ends_run(event, spread) else None


__all__ = [
    "APPLICATION_FAILURES",
    "FINAL_STATUSES",
    "INFRASTRUCTURE_FAILURES",
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
    "awaits_verdict",
    "ends_job",
    "ends_part",
    "ends_run",
    "failure_kind",
    "final_status",
    "run_end",
    "spreads",
    "status_after",
]
