"""Job requests and the job lifecycle.

The job state machine (every transition is one event, keyed by job id on ``fedsched.jobs``, except the
scheduler's decisions, which go to ``fedsched.decisions``):

    submitted --(JobQueued)--> queued --(JobPlaced)--> placed --(JobStarted)--> running
    running --(JobSucceeded | JobFailed)--> done
    queued | placed | running --(JobCancelRequested .. JobCancelled)--> cancelled
    placed | running --(JobPreemptionRequested .. JobPreempted)--> queued again (if it can retry)
    running --(JobReclaimRequested .. JobReclaimed)--> reclaimed
    a request refused at intake gets JobRejected and never enters the queue.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import Field, JsonValue

from events.catalog.base import Event
from events.catalog.types import (
    ClusterIdField,
    DurationSeconds,
    Frozen,
    Id,
    JobIdField,
    Labels,
    Name,
    PosInt,
    Resources,
    TenantIdField,
    Text,
)
from events.topics import JOBS


class JobKind(StrEnum):
    TRAINING = "training"
    FINE_TUNE = "fine_tune"
    BATCH = "batch"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"


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
    min_replicas: Annotated[int, Field(ge=0, le=10_000)] = 1
    spread_clusters: Annotated[int, Field(ge=1, le=64)] = 1


class JobSubmitted(Event):
    event_type: ClassVar[str] = "io.fedsched.JobSubmitted"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "job_id"
    topic: ClassVar[str] = JOBS.name

    job_id: JobIdField
    name: Name
    tenant: TenantIdField
    project: Id = "default"
    queue: Id = "default"
    kind: JobKind = JobKind.BATCH
    priority_class: PriorityClass = PriorityClass.STANDARD
    replicas: Annotated[int, Field(ge=1, le=10_000)] = 1
    gang: bool = False
    resources: Resources
    interconnect: Interconnect = Interconnect.NONE
    datasets: Annotated[tuple[Id, ...], Field(max_length=64)] = ()
    preemptible: bool = True
    expected_runtime_s: DurationSeconds | None = None
    max_runtime_s: DurationSeconds | None = None
    inference: InferenceSpec | None = None
    # Opaque to the scheduler: the connector renders it into the cluster's own workload object.
    template: Annotated[dict[Annotated[str, Field(max_length=128)], JsonValue], Field(max_length=64)] = Field(
        default_factory=dict
    )
    labels: Labels = Field(default_factory=dict)
    client_request_id: Annotated[str, Field(min_length=1, max_length=128)] | None = None


class JobStarted(Event):
    event_type: ClassVar[str] = "io.fedsched.JobStarted"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "job_id"
    topic: ClassVar[str] = JOBS.name

    job_id: JobIdField
    cluster: ClusterIdField
    run: PosInt = 1
    message: Text = ""
