"""Job requests and the job lifecycle (topic ``fedsched.jobs``, keyed by job id).

Called by the API and the intake (requests), by connectors (lifecycle facts) and by every projection
that follows jobs. The scheduler's decisions about a job live in ``events.catalog.decisions``.

The job state machine (every transition is one event keyed by job id; decisions go to
``fedsched.decisions`` and every other transition to ``fedsched.jobs``):

    submitted --(JobQueued)--> queued --(JobPlaced)--> placed --(JobStarted)--> running
    running --(JobSucceeded | JobFailed)--> done
    placed | running --(JobFailed that may be retried)--> awaiting the verdict --(JobRetryScheduled)-->
        queued again | --(JobRetriesExhausted)--> failed
    queued | placed | running --(JobCancelRequested .. JobCancelled)--> cancelled
    placed | running --(JobPreemptionRequested .. JobPreempted)--> queued again (if it can retry)
    running --(JobReclaimRequested .. JobReclaimed)--> queued again (if it can retry)
    a request refused at intake gets JobRejected and never enters the queue.

Its words (the statuses, which are final, which events end a run or the job, how a run ended) are
defined once, in ``events.catalog.lifecycle``.

``run`` counts the attempts of a job: 1 for the first placement, one more after each preemption, reclaim
or retry, so facts about an earlier attempt that arrive late are recognised as such.

A run that fails for a cause that may be retried (the infrastructure's: ``INFRASTRUCTURE_FAILURES``; or
the workload's, when the job asked for retries: ``retry.on_application_failure``) does not end the job
by itself: the scheduler's verdict does, ``JobRetryScheduled`` (queued again) or ``JobRetriesExhausted``
(failed for good); see ``events.catalog.lifecycle``.

Retired fields stay reserved (never reused with another meaning): none yet.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import Field, ValidationInfo, field_validator, model_validator

from events.catalog.base import Event
from events.catalog.reasons import ReasonCode
from events.catalog.topics import JOBS
from events.catalog.types import (
    MAX_REPLICAS,
    ClusterIdField,
    DurationSeconds,
    ExitCode,
    FieldPath,
    Frozen,
    Id,
    JobIdField,
    LabelKey,
    Labels,
    LabelValue,
    Name,
    NodeIdField,
    NonNegInt,
    PosInt,
    Principal,
    QueueId,
    QueueIdField,
    RequestId,
    Resources,
    TaintEffect,
    Template,
    TenantIdField,
    Text,
    Unique,
)


class JobKind(StrEnum):
    TRAINING = "training"
    FINE_TUNE = "fine_tune"
    BATCH = "batch"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"


GANG_KINDS = frozenset({JobKind.TRAINING, JobKind.FINE_TUNE})
"""Kinds whose replicas start together unless the job says ``gang: false`` (a distributed training job
started with some of its workers waits for the others, holding what it got)."""


class PriorityClass(StrEnum):
    """Ordered from most to least important; the scheduler's order and preemption rules use it."""

    PRODUCTION_INFERENCE = "production_inference"
    CRITICAL_TRAINING = "critical_training"
    STANDARD = "standard"
    BEST_EFFORT = "best_effort"


class Interconnect(StrEnum):
    NONE = "none"
    NVLINK = "nvlink"
    RDMA = "rdma"


class InferenceSpec(Frozen):
    """An online service's replicas: the fewest it may start with, and how many clusters they may live in.

    ``spread_clusters`` k > 1 spreads the service for availability: its one run has a part in each cluster
    it holds replicas in, no cluster holding more than ``per_cluster_cap`` of them. A part ends on its own
    (its cluster lost a node, was asked to stop it) and the service lives on in the others; the scheduler
    closes the run (``JobRunClosed``) once every part it opened has ended (``events.catalog.lifecycle``).
    """

    min_replicas: Annotated[int, Field(ge=0, le=MAX_REPLICAS)] = 1
    spread_clusters: Annotated[int, Field(ge=1, le=64)] = 1

    def per_cluster_cap(self, replicas: int) -> int:
        """The most of ``replicas`` one cluster may hold: ceil(replicas / spread_clusters)."""
        return -(-replicas // self.spread_clusters)


class RunEnd(StrEnum):
    """How a run ended, as a word: one per run-end event (``events.catalog.lifecycle.RUN_END_OF``), and
    the outcome of a ``JobRunClosed``."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    RECLAIMED = "reclaimed"
    CANCELLED = "cancelled"


class Toleration(Frozen):
    """Lets a job run on nodes with a matching taint. ``None`` value or effect matches any."""

    key: LabelKey
    value: LabelValue | None = None
    effect: TaintEffect | None = None


MAX_APPLICATION_RETRIES = 100


class RetrySpec(Frozen):
    """What the job asks of retries. A run ended by the infrastructure (node lost, GPU failed, evicted) is
    retried under the policy's budget of the job's priority class whatever this says; a run its own
    workload failed (a non-zero exit, out of memory) only as many times as asked here."""

    on_application_failure: Annotated[int, Field(ge=0, le=MAX_APPLICATION_RETRIES)] = 0


class JobEvent(Event):
    """Base of the events on the jobs topic: keyed by job id."""

    key_field: ClassVar[str | None] = "job_id"
    topic: ClassVar[str] = JOBS.name

    job_id: JobIdField


class JobSubmitted(JobEvent):
    """A client asked to run a job: the full request, as the intake accepted it (v2: ``retry``)."""

    event_type: ClassVar[str] = "io.fedsched.JobSubmitted"
    schema_version: ClassVar[int] = 2

    name: Name
    tenant: TenantIdField
    project: Id = "default"
    queue: QueueIdField = QueueId("default")
    kind: JobKind = JobKind.BATCH
    priority_class: PriorityClass = PriorityClass.STANDARD
    replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS)] = 1
    gang: bool | None = None
    """All replicas start together or none does (``True``), or the job starts with the replicas that fit
    and is topped up as room appears (``False``); ``None`` (v2; a v1 request's unset ``False``): by its
    kind, a gang for training and fine-tuning (``GANG_KINDS``), as distributed training expects; see
    ``is_gang``."""
    resources: Resources
    """Per replica."""
    interconnect: Interconnect = Interconnect.NONE
    """What the replicas talk over: ``nvlink`` keeps them inside one NVLink domain, ``rdma`` inside one RDMA
    fabric; a preference (placement costs more outside the first replica's domain) unless
    ``interconnect_required``."""
    interconnect_required: bool = False
    """The interconnect is a hard constraint: every replica on a node of one and the same domain of it, or
    the job waits (v2; a v1 request's interconnect was a preference)."""
    datasets: Annotated[tuple[Id, ...], Field(max_length=64), Unique()] = ()
    tolerations: Annotated[tuple[Toleration, ...], Field(max_length=32)] = ()
    preemptible: bool = True
    expected_runtime_s: DurationSeconds | None = None
    max_runtime_s: DurationSeconds | None = None
    inference: InferenceSpec | None = None
    """Only for ``kind=inference``."""
    template: Template = Field(default_factory=dict)
    """Opaque to the scheduler: the connector renders it into the cluster's own workload object."""
    labels: Labels = Field(default_factory=dict)
    submitted_by: Principal | None = None
    client_request_id: RequestId | None = None
    """The client's idempotency key: a second submission with the same key is a duplicate."""
    retry: RetrySpec = RetrySpec()
    """How often a run its own workload failed is retried (a v1 record asked for none)."""

    @field_validator("interconnect_required")
    @classmethod
    def _required_names_one(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("interconnect", Interconnect.NONE) is Interconnect.NONE:
            raise ValueError("needs interconnect 'nvlink' or 'rdma' to require")
        return value

    def is_gang(self) -> bool:
        """Whether all of its replicas start together or none does."""
        return self.gang if self.gang is not None else self.kind in GANG_KINDS

    @model_validator(mode="after")
    def _consistent(self) -> JobSubmitted:
        if self.inference is not None:
            if self.kind is not JobKind.INFERENCE:
                raise ValueError("inference settings are only for kind 'inference'")
            if self.inference.min_replicas > self.replicas:
                raise ValueError("inference.min_replicas is more than replicas")
        if (
            self.expected_runtime_s is not None
            and self.max_runtime_s is not None
            and self.expected_runtime_s > self.max_runtime_s
        ):
            raise ValueError("expected_runtime_s is more than max_runtime_s")
        return self


class JobCancelRequested(JobEvent):
    """Someone asked to cancel a job."""

    event_type: ClassVar[str] = "io.fedsched.JobCancelRequested"
    schema_version: ClassVar[int] = 1

    requester: Principal
    reason: Text = ""
    client_request_id: RequestId | None = None


class JobRejected(JobEvent):
    """The intake refused a request; the job never enters the queue."""

    event_type: ClassVar[str] = "io.fedsched.JobRejected"
    schema_version: ClassVar[int] = 1

    tenant: TenantIdField
    reason: ReasonCode
    message: Text
    field: FieldPath | None = None
    """The request field at fault, when one is (``resources.gpus``)."""
    client_request_id: RequestId | None = None


class JobStarted(JobEvent):
    """A cluster started the job's workload (every replica, for a gang)."""

    event_type: ClassVar[str] = "io.fedsched.JobStarted"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField
    run: PosInt = 1
    message: Text = ""


class JobSucceeded(JobEvent):
    """The job's workload finished successfully."""

    event_type: ClassVar[str] = "io.fedsched.JobSucceeded"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField
    run: PosInt = 1
    message: Text = ""


class JobFailed(JobEvent):
    """The job's workload failed."""

    event_type: ClassVar[str] = "io.fedsched.JobFailed"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField
    run: PosInt = 1
    exit_code: ExitCode | None = None
    """The process exit code, when the workload exited (negative: killed by that signal)."""
    reason: ReasonCode
    message: Text = ""
    node: NodeIdField | None = None
    """The node where the failure happened, when it is known."""


class JobPreempted(JobEvent):
    """The cluster stopped the job as the scheduler asked, to make room for another."""

    event_type: ClassVar[str] = "io.fedsched.JobPreempted"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField
    run: PosInt = 1
    checkpointed: bool = False
    """The workload wrote a checkpoint before it stopped."""
    message: Text = ""


class JobReclaimed(JobEvent):
    """The cluster stopped the job to give borrowed quota back, as the scheduler asked."""

    event_type: ClassVar[str] = "io.fedsched.JobReclaimed"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField
    run: PosInt = 1
    checkpointed: bool = False
    message: Text = ""


class JobCancelled(JobEvent):
    """The job was cancelled; if it was running, its workload has stopped."""

    event_type: ClassVar[str] = "io.fedsched.JobCancelled"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField | None = None
    """Where it was running; ``None`` if it was cancelled before it was placed."""
    run: NonNegInt = 0
    """The attempt that was stopped; 0 if it never ran."""
    requester: Principal | None = None
    message: Text = ""


__all__ = [
    "GANG_KINDS",
    "MAX_APPLICATION_RETRIES",
    "InferenceSpec",
    "Interconnect",
    "JobCancelRequested",
    "JobCancelled",
    "JobEvent",
    "JobFailed",
    "JobKind",
    "JobPreempted",
    "JobReclaimed",
    "JobRejected",
    "JobStarted",
    "JobSubmitted",
    "JobSucceeded",
    "PriorityClass",
    "RetrySpec",
    "RunEnd",
    "Toleration",
]
