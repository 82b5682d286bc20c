"""Superseded schema versions, kept as classes, and the upcasters that bring them forward.

Called by the registry (each class here registers as an older version of its type, never the current
one), by the codec (which validates an old record against its own version's class, so an error names the
field as that version spells it, then upcasts it), by ``fedsched events schema`` (a JSON Schema for every
version) and by the golden tests. A class here never changes: it describes records already in the log.

History:

- ``io.fedsched.GpuHealthReported`` v1 -> v2: v1 had one ``errors`` count per GPU. Connectors of that
  era counted XID events only (ECC counters were not collected), so the upcaster moves ``errors`` to
  ``xid_errors`` and leaves the ECC counters ``None`` (not reported) rather than claiming zero.
- ``io.fedsched.SchedulingCycleCompleted`` v1 -> v2: v2 names the decision ``engine`` that made the
  cycle; a v1 record's engine is unknown (``None``), never guessed.
- ``io.fedsched.JobPlaced`` v1 -> v2: v2 lists the ``victims``, the jobs asked to stop to make room for
  the run. A v1 placement did not say (explanations read it from the wait before), so: none listed.
- ``io.fedsched.PolicyConfigured``, ``io.fedsched.TenantRegistered``, ``io.fedsched.QuotaSet`` v1 -> v2:
  v2 records the configuration document a change came from (``change``), and a tenant's
  ``hot_model_cap_milli`` and ``default_priority_class``. A v1 record came from no document and set
  neither (``None``: the policy's cap, the standard class).
- ``io.fedsched.JobQueued`` v1 -> v2: v1's one ``queue_position`` was the job's place in the whole
  federation's order; v2 calls it ``federation_position`` and adds the place in the job's own queue
  (``tenant_queue_position``: ``None`` for a v1 record, which did not say) and the wait's category
  (``pending_reason``), which the upcaster derives from the record's binding reason (else its first
  reason) by the catalogue's one mapping (``events.catalog.pending_reasons``), as the scheduler does.
- ``io.fedsched.JobSubmitted`` v1 -> v2: v2 can make the interconnect a hard constraint
  (``interconnect_required``; a v1 request's interconnect was a preference, so: not required) and says
  how often a run the workload failed is retried (``retry.on_application_failure``; a v1 request could
  not ask: none, ``0``, as it ran then); its resources name NPU models and memory apart
  (``npu_models``, ``min_npu_memory_mib``): a v1 replica asking NPUs and no GPU could name them only in
  ``gpu_models`` and ``min_gpu_memory_mib``, which the upcaster moves; ``gang`` may be unset (``None``: by
  the job's kind): a v1 ``False`` was the default, every multi-replica job starting whole, so it reads
  as unset.
- ``io.fedsched.NodeUsageReported`` v1 -> v2: v2 names the ``run`` each job usage measured. A v1 report
  did not say, so its runs are ``None`` (the projections attribute it by time, as they did).
- ``io.fedsched.GpuHealthReported`` v2 -> v3: v3 samples a node's NPUs too (``npus``) and a report may
  sample NPUs only. A v2 report read GPUs only: no NPU samples.
- ``io.fedsched.NodeUsageReported`` v2 -> v3: v3 measures NPUs (``npus``, and each job's
  ``npu_indices``, ``npu_utilisation_pct``, ``npu_memory_used_mib``). A v2 report measured GPUs only: no
  NPU samples, and each job's NPU figures zero (it was given none to measure).
- ``io.fedsched.JobReplicasAdded`` v1 -> v2: the same fields; v2 may name a cluster other than the run's
  placement (a spread inference service's part there), which a v1 event never did, so it reads as it is.
- ``io.fedsched.TenantRegistered`` v2 -> v3: v3 carries the tenant's image policy (``images``: allowed
  registries, pull secrets). A v2 tenant set none: ``None``, no limit of its own (a cluster's connector
  may still set one), as it ran then.
- ``io.fedsched.ResourceProfileUpdated`` v1 -> v2: v2 counts the GPU failures of the last day
  (``recent_failures``), which explanations name. A v1 profile did not say: ``None``.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, JsonValue, model_validator

from events.catalog.base import Event
from events.catalog.decisions import (
    BindingConstraint,
    CandidateScore,
    ClusterWhyNot,
    DecisionEvent,
    ReplicaPlacement,
    SuggestedChange,
    TopicOffset,
)
from events.catalog.documents import DocumentChange
from events.catalog.jobs import InferenceSpec, Interconnect, JobEvent, JobKind, PriorityClass, Toleration
from events.catalog.pending_reasons import pending_reason_of
from events.catalog.profiles import GpuModelProfile, Quantities, QuotaUsage
from events.catalog.reasons import ReasonCode
from events.catalog.topics import DECISIONS, GOVERNANCE, INVENTORY, PROFILES, QUOTA_USAGE
from events.catalog.types import (
    MAX_REPLICAS,
    ClusterIdField,
    CycleIdField,
    DeviceIndex,
    DeviceIndices,
    DurationSeconds,
    EpochMillis,
    Frozen,
    GpuModel,
    GpuModels,
    Health,
    Id,
    JobIdField,
    Labels,
    Name,
    NodeIdField,
    NonNegInt,
    Percent,
    Permille,
    PolicyDocument,
    PolicyVersion,
    PosInt,
    Principal,
    QueueId,
    QueueIdField,
    QuotaLine,
    QuotaRequestIdField,
    RequestId,
    Sha256Hex,
    TemperatureC,
    Template,
    TenantIdField,
    Text,
    Unique,
)
from events.catalog.upcasters import Payload, upcaster


class GpuHealthSampleV1(Frozen):
    index: DeviceIndex
    health: Health
    errors: NonNegInt
    temperature_c: TemperatureC | None = None


class GpuHealthReportedV1(Event):
    """A connector read the health counters of a node's GPUs (v1: one error count per GPU)."""

    # Every field is spelled out here, not inherited, so a later change elsewhere cannot alter v1.
    event_type: ClassVar[str] = "io.fedsched.GpuHealthReported"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "cluster/node"
    topic: ClassVar[str] = INVENTORY.name

    cluster: ClusterIdField
    node: NodeIdField

    gpus: Annotated[tuple[GpuHealthSampleV1, ...], Field(min_length=1, max_length=64), Unique(("index",), ordered=True)]


@upcaster("io.fedsched.GpuHealthReported", 1)
def gpu_health_v1_to_v2(payload: Payload) -> Payload:
    gpus = payload.get("gpus")
    if not isinstance(gpus, list):
        return payload
    payload["gpus"] = [_gpu_v1_to_v2(gpu) for gpu in gpus]
    return payload


def _gpu_v1_to_v2(gpu: JsonValue) -> JsonValue:
    if not isinstance(gpu, dict) or "errors" not in gpu:
        return gpu
    out: Payload = {name: value for name, value in gpu.items() if name not in ("errors", "temperature_c")}
    out["xid_errors"] = gpu["errors"]
    out["ecc_corrected"] = None
    out["ecc_uncorrected"] = None
    if "temperature_c" in gpu:
        out["temperature_c"] = gpu["temperature_c"]
    return out


class GpuHealthSampleV2(Frozen):
    index: DeviceIndex
    health: Health
    xid_errors: NonNegInt
    last_xid: Annotated[int, Field(ge=0, le=65_535)] | None = None
    ecc_corrected: NonNegInt | None = None
    ecc_uncorrected: NonNegInt | None = None
    temperature_c: TemperatureC | None = None


class GpuHealthReportedV2(Event):
    """A connector read the health counters of a node's GPUs (v2: GPUs only, at least one)."""

    event_type: ClassVar[str] = "io.fedsched.GpuHealthReported"
    schema_version: ClassVar[int] = 2
    key_field: ClassVar[str | None] = "cluster/node"
    topic: ClassVar[str] = INVENTORY.name
    retired_fields: ClassVar[tuple[str, ...]] = ("gpus.errors",)

    cluster: ClusterIdField
    node: NodeIdField

    gpus: Annotated[tuple[GpuHealthSampleV2, ...], Field(min_length=1, max_length=64), Unique(("index",), ordered=True)]


@upcaster("io.fedsched.GpuHealthReported", 2)
def gpu_health_v2_to_v3(payload: Payload) -> Payload:
    payload["npus"] = []
    return payload


class SchedulingCycleCompletedV1(Event):
    """The scheduler finished a cycle (v1: without the decision engine's name)."""

    event_type: ClassVar[str] = "io.fedsched.SchedulingCycleCompleted"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "cycle_id"
    topic: ClassVar[str] = DECISIONS.name

    cycle_id: CycleIdField
    sequence: NonNegInt
    input_offsets: Annotated[
        tuple[TopicOffset, ...], Field(max_length=1024), Unique(("topic", "partition"), ordered=True)
    ]
    logical_time_ms: EpochMillis
    policy_version: PolicyVersion
    decision_count: NonNegInt
    decisions_digest: Sha256Hex | None = None


@upcaster("io.fedsched.SchedulingCycleCompleted", 1)
def cycle_v1_to_v2(payload: Payload) -> Payload:
    payload["engine"] = None
    return payload


class JobPlacedV1(DecisionEvent):
    """The scheduler placed the job (v1: without the jobs stopped to make room for it)."""

    event_type: ClassVar[str] = "io.fedsched.JobPlaced"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField
    run: PosInt = 1
    reason: ReasonCode = ReasonCode.PLACED
    replicas: Annotated[
        tuple[ReplicaPlacement, ...],
        Field(min_length=1, max_length=MAX_REPLICAS),
        Unique(("replica",), ordered=True),
    ]
    chosen: CandidateScore
    runner_up: Annotated[tuple[CandidateScore, ...], Field(max_length=8)] = ()
    explanation: Text

    @model_validator(mode="after")
    def _chosen_is_cluster(self) -> JobPlacedV1:
        if self.chosen.cluster != self.cluster:
            raise ValueError("chosen.cluster must be the cluster the job is placed on")
        return self


@upcaster("io.fedsched.JobPlaced", 1)
def placed_v1_to_v2(payload: Payload) -> Payload:
    payload["victims"] = []
    return payload


class JobQueuedV1(DecisionEvent):
    """The job waits (v1: one ``queue_position``, its place in the federation's order)."""

    event_type: ClassVar[str] = "io.fedsched.JobQueued"
    schema_version: ClassVar[int] = 1

    reasons: Annotated[tuple[ReasonCode, ...], Field(min_length=1, max_length=16), Unique()]
    message: Text
    why_not: Annotated[tuple[ClusterWhyNot, ...], Field(max_length=256), Unique(("cluster",), ordered=True)] = ()
    binding: BindingConstraint | None = None
    smallest_change: SuggestedChange | None = None
    queue_position: PosInt | None = None
    estimated_start_ms: EpochMillis | None = None


@upcaster("io.fedsched.JobQueued", 1)
def queued_v1_to_v2(payload: Payload) -> Payload:
    if "queue_position" in payload:
        payload["federation_position"] = payload.pop("queue_position")
    payload["tenant_queue_position"] = None
    binding, reasons = payload.get("binding"), payload.get("reasons")
    code = binding.get("reason") if isinstance(binding, dict) else None
    if code is None and isinstance(reasons, list) and reasons:
        code = reasons[0]
    category = pending_reason_of(code if isinstance(code, str) else None)
    payload["pending_reason"] = None if category is None else category.value
    return payload


class GpuUsageV1(Frozen):
    index: DeviceIndex
    utilisation_pct: Percent
    memory_used_mib: NonNegInt


class JobUsageV1(Frozen):
    job_id: JobIdField
    gpu_indices: DeviceIndices = ()
    utilisation_pct: Percent = 0
    gpu_memory_used_mib: NonNegInt = 0
    cpu_milli_used: NonNegInt = 0
    memory_used_mib: NonNegInt = 0


class NodeUsageReportedV1(Event):
    """A connector sampled how busy a node and the jobs on it were (v1: without the run measured)."""

    event_type: ClassVar[str] = "io.fedsched.NodeUsageReported"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "cluster/node"
    topic: ClassVar[str] = INVENTORY.name

    cluster: ClusterIdField
    node: NodeIdField
    window_ms: Annotated[int, Field(ge=1, le=24 * 3600 * 1000)]
    cpu_milli_used: NonNegInt = 0
    memory_used_mib: NonNegInt = 0
    gpus: Annotated[tuple[GpuUsageV1, ...], Field(max_length=64), Unique(("index",), ordered=True)] = ()
    jobs: Annotated[tuple[JobUsageV1, ...], Field(max_length=256), Unique(("job_id",))] = ()


@upcaster("io.fedsched.NodeUsageReported", 1)
def usage_v1_to_v2(payload: Payload) -> Payload:
    jobs = payload.get("jobs")
    if isinstance(jobs, list):
        payload["jobs"] = [{**job, "run": None} if isinstance(job, dict) else job for job in jobs]
    return payload


class JobUsageV2(Frozen):
    job_id: JobIdField
    gpu_indices: DeviceIndices = ()
    utilisation_pct: Percent = 0
    gpu_memory_used_mib: NonNegInt = 0
    cpu_milli_used: NonNegInt = 0
    memory_used_mib: NonNegInt = 0
    run: PosInt | None = None


class NodeUsageReportedV2(Event):
    """A connector sampled how busy a node and the jobs on it were (v2: GPUs only, no NPU figures)."""

    event_type: ClassVar[str] = "io.fedsched.NodeUsageReported"
    schema_version: ClassVar[int] = 2
    key_field: ClassVar[str | None] = "cluster/node"
    topic: ClassVar[str] = INVENTORY.name

    cluster: ClusterIdField
    node: NodeIdField
    window_ms: Annotated[int, Field(ge=1, le=24 * 3600 * 1000)]
    cpu_milli_used: NonNegInt = 0
    memory_used_mib: NonNegInt = 0
    gpus: Annotated[tuple[GpuUsageV1, ...], Field(max_length=64), Unique(("index",), ordered=True)] = ()
    jobs: Annotated[tuple[JobUsageV2, ...], Field(max_length=256), Unique(("job_id",))] = ()


@upcaster("io.fedsched.NodeUsageReported", 2)
def usage_v2_to_v3(payload: Payload) -> Payload:
    payload["npus"] = []
    jobs = payload.get("jobs")
    if isinstance(jobs, list):
        payload["jobs"] = [
            {**job, "npu_indices": [], "npu_utilisation_pct": 0, "npu_memory_used_mib": 0}
            if isinstance(job, dict)
            else job
            for job in jobs
        ]
    return payload


class PolicyConfiguredV1(Event):
    """An operator put a scheduling policy version in force (v1: from no document)."""

    event_type: ClassVar[str] = "io.fedsched.PolicyConfigured"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "policy"
    topic: ClassVar[str] = GOVERNANCE.name

    policy: Id
    policy_version: PolicyVersion
    description: Text = ""
    document: PolicyDocument
    configured_by: Principal


class ResourceProfileUpdatedV1(Event):
    """A projection recomputed the profile of a node or a cluster (v1: without its recent failures)."""

    event_type: ClassVar[str] = "io.fedsched.ResourceProfileUpdated"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "cluster/node"
    topic: ClassVar[str] = PROFILES.name

    cluster: ClusterIdField
    node: NodeIdField | None = None
    version: PosInt
    capacity: Quantities
    allocated: Quantities
    free: Quantities
    gpu_models: Annotated[tuple[GpuModelProfile, ...], Field(max_length=32), Unique(("model",), ordered=True)] = ()
    health_milli: Permille
    failures_per_kgpu_hour_milli: NonNegInt
    congestion_milli: Permille
    hot_models: Annotated[tuple[GpuModel, ...], Field(max_length=16), Unique()] = ()
    fit_training: bool
    fit_inference: bool
    last_seen_ms: EpochMillis
    stale: bool = False


@upcaster("io.fedsched.ResourceProfileUpdated", 1)
def profile_v1_to_v2(payload: Payload) -> Payload:
    payload["recent_failures"] = None
    return payload


class TenantRegisteredV1(Event):
    """A tenant was registered or its settings changed (v1: no cap, default class nor document)."""

    event_type: ClassVar[str] = "io.fedsched.TenantRegistered"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "tenant"
    topic: ClassVar[str] = GOVERNANCE.name

    tenant: TenantIdField
    display_name: Name
    cohort: Id | None = None
    weight: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    labels: Labels = Field(default_factory=dict)


class QuotaSetV1(Event):
    """The quota of a tenant's queue was set (v1: from no document)."""

    event_type: ClassVar[str] = "io.fedsched.QuotaSet"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "tenant"
    topic: ClassVar[str] = GOVERNANCE.name

    tenant: TenantIdField
    queue: QueueIdField = QueueId("default")
    lines: Annotated[tuple[QuotaLine, ...], Field(max_length=64), Unique(("resource", "gpu_model"))]
    set_by: Principal
    request_id: QuotaRequestIdField | None = None


@upcaster("io.fedsched.PolicyConfigured", 1)
def policy_v1_to_v2(payload: Payload) -> Payload:
    payload["change"] = None
    return payload


@upcaster("io.fedsched.TenantRegistered", 1)
def tenant_v1_to_v2(payload: Payload) -> Payload:
    payload.update(hot_model_cap_milli=None, default_priority_class=None, change=None)
    return payload


class TenantRegisteredV2(Event):
    """A tenant was registered or its settings changed (v2: no image policy)."""

    event_type: ClassVar[str] = "io.fedsched.TenantRegistered"
    schema_version: ClassVar[int] = 2
    key_field: ClassVar[str | None] = "tenant"
    topic: ClassVar[str] = GOVERNANCE.name

    tenant: TenantIdField
    display_name: Name
    cohort: Id | None = None
    weight: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    labels: Labels = Field(default_factory=dict)
    hot_model_cap_milli: NonNegInt | None = None
    default_priority_class: PriorityClass | None = None
    change: DocumentChange | None = None


@upcaster("io.fedsched.TenantRegistered", 2)
def tenant_v2_to_v3(payload: Payload) -> Payload:
    payload["images"] = None
    return payload


@upcaster("io.fedsched.QuotaSet", 1)
def quota_v1_to_v2(payload: Payload) -> Payload:
    payload["change"] = None
    return payload


class ResourcesV1(Frozen):
    """What one replica asked for before ``JobSubmitted`` v2 (no NPU models or memory)."""

    cpu_milli: NonNegInt = 0
    memory_mib: NonNegInt = 0
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_milli: Annotated[int, Field(ge=0, le=999)] = 0
    npus: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_models: GpuModels = ()
    min_gpu_memory_mib: NonNegInt = 0

    @model_validator(mode="after")
    def _whole_or_share(self) -> ResourcesV1:
        if self.gpus and self.gpu_milli:
            raise ValueError("gpu_milli (a share of one GPU) and gpus (whole GPUs) are exclusive")
        return self


class JobSubmittedV1(JobEvent):
    """A client asked to run a job (v1: its interconnect was only ever a preference, and no ``retry``)."""

    event_type: ClassVar[str] = "io.fedsched.JobSubmitted"
    schema_version: ClassVar[int] = 1

    name: Name
    tenant: TenantIdField
    project: Id = "default"
    queue: QueueIdField = QueueId("default")
    kind: JobKind = JobKind.BATCH
    priority_class: PriorityClass = PriorityClass.STANDARD
    replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS)] = 1
    gang: bool = False
    resources: ResourcesV1
    interconnect: Interconnect = Interconnect.NONE
    datasets: Annotated[tuple[Id, ...], Field(max_length=64), Unique()] = ()
    tolerations: Annotated[tuple[Toleration, ...], Field(max_length=32)] = ()
    preemptible: bool = True
    expected_runtime_s: DurationSeconds | None = None
    max_runtime_s: DurationSeconds | None = None
    inference: InferenceSpec | None = None
    template: Template = Field(default_factory=dict)
    labels: Labels = Field(default_factory=dict)
    submitted_by: Principal | None = None
    client_request_id: RequestId | None = None

    @model_validator(mode="after")
    def _consistent(self) -> JobSubmittedV1:
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


@upcaster("io.fedsched.JobSubmitted", 1)
def submitted_v1_to_v2(payload: Payload) -> Payload:
    payload["interconnect_required"] = False
    payload["retry"] = {"on_application_failure": 0}
    if not payload.get("gang"):  # v1's False was only ever the default (every job was all or nothing)
        payload["gang"] = None
    resources = payload.get("resources")
    if (
        isinstance(resources, dict)
        and resources.get("npus")
        and not (resources.get("gpus") or resources.get("gpu_milli"))
    ):
        # v1 had no NPU models: a replica asking NPUs and no GPU could only name them in gpu_models
        resources["npu_models"] = resources.pop("gpu_models", [])
        resources["min_npu_memory_mib"] = resources.pop("min_gpu_memory_mib", 0)
    return payload


class QuotaUsageUpdatedV1(Event):
    """A projection recomputed a tenant queue's quota usage (v1: GPU-hours only, no NPU time)."""

    event_type: ClassVar[str] = "io.fedsched.QuotaUsageUpdated"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "tenant/queue"
    topic: ClassVar[str] = QUOTA_USAGE.name

    tenant: TenantIdField
    queue: QueueIdField
    version: PosInt
    usage: Annotated[tuple[QuotaUsage, ...], Field(max_length=64), Unique(("resource", "gpu_model"))] = ()
    gpu_hours_milli: NonNegInt = 0
    period_start_ms: EpochMillis


@upcaster("io.fedsched.QuotaUsageUpdated", 1)
def quota_usage_v1_to_v2(payload: Payload) -> Payload:
    payload["npu_hours_milli"] = 0
    return payload


__all__ = [
    "GpuHealthReportedV1",
    "GpuHealthReportedV2",
    "GpuHealthSampleV1",
    "GpuHealthSampleV2",
    "GpuUsageV1",
    "JobPlacedV1",
    "JobQueuedV1",
    "JobSubmittedV1",
    "JobUsageV1",
    "JobUsageV2",
    "NodeUsageReportedV1",
    "NodeUsageReportedV2",
    "PolicyConfiguredV1",
    "QuotaSetV1",
    "QuotaUsageUpdatedV1",
    "ResourceProfileUpdatedV1",
    "ResourcesV1",
    "SchedulingCycleCompletedV1",
    "TenantRegisteredV1",
    "TenantRegisteredV2",
    "cycle_v1_to_v2",
    "gpu_health_v1_to_v2",
    "gpu_health_v2_to_v3",
    "placed_v1_to_v2",
    "policy_v1_to_v2",
    "profile_v1_to_v2",
    "queued_v1_to_v2",
    "quota_usage_v1_to_v2",
    "quota_v1_to_v2",
    "submitted_v1_to_v2",
    "tenant_v1_to_v2",
    "usage_v1_to_v2",
    "usage_v2_to_v3",
]


class JobReplicasAddedV1(DecisionEvent):
    """The scheduler added replicas to a run, always in the cluster of its placement (v1)."""

    event_type: ClassVar[str] = "io.fedsched.JobReplicasAdded"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField
    run: PosInt
    replicas: Annotated[
        tuple[ReplicaPlacement, ...],
        Field(min_length=1, max_length=MAX_REPLICAS),
        Unique(("replica",), ordered=True),
    ]
    running_replicas: PosInt
    chosen: CandidateScore
    explanation: Text


@upcaster("io.fedsched.JobReplicasAdded", 1)
def replicas_added_v1_to_v2(payload: Payload) -> Payload:
    return payload  # same fields; only what a v2 may name (another cluster) is new
