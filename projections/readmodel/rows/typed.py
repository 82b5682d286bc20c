"""What the reader answers with: typed rows of the read models, and the filter of a job list. Pure.

Built by ``projections.readmodel.reader`` (through ``from_records``); read by the API, governance's
report, the demo and the CLI. Quantities are integers;
JSON columns come back parsed (a timeline entry, a replica's slot, a quota line, a project's share).
A NULL reads as the entity's own default (``""``, 0), as the writer writes it: only a column added
after a row was written is NULL, until the replay a new state format starts. Values the job view
leaves unset (a cluster, the times of what has not happened yet) stay ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from events.catalog.types import ClusterId, JobId, TenantId

Positions = dict[tuple[str, int], int]
"""(topic, partition) -> the next offset the projections will fold: what the rows reflect."""


class Slot(NamedTuple):
    """Where one replica runs."""

    node: str
    gpu_indices: tuple[int, ...]
    gpu_milli_each: int
    npu_indices: tuple[int, ...] = ()
    cluster: str = ""
    """Its node's cluster ("" in rows written before replicas said it: the job's ``cluster``)."""
    replica: int | None = None
    """Its number in the run (``None`` in rows written before: its place in the placement)."""


class RunPart(NamedTuple):
    """A spread inference service's run in one cluster (``projections.stages.jobs.RunPart``)."""

    cluster: str
    replicas: int
    """The replicas it was given (opened with, then grown by)."""
    opened_ms: int
    ended: str
    """How it ended (``RunEnd``'s word: failed, preempted, ...); "" while it holds its replicas."""
    reason: str
    """A failed part's reason code."""
    ended_ms: int | None


class TimelineEntry(NamedTuple):
    time_ms: int
    status: str
    event: str
    reason: str
    message: str


class ProjectShare(NamedTuple):
    """A project's part of a usage hour."""

    project: str
    allocated_milli_ms: int
    cost_micro: int


@dataclass(frozen=True, slots=True)
class JobFilter:
    """A job list's filters; each one given narrows it (``statuses``: any of them)."""

    tenant: str | None = None
    project: str | None = None
    queue: str | None = None
    statuses: tuple[str, ...] = ()
    priority_class: str | None = None
    cluster: str | None = None
    """Jobs whose run is (or was last) in it: its first cluster, or any its run holds replicas in now."""
    pending_reasons: tuple[str, ...] = ()
    """Waiting jobs whose wait is of any of these categories (``events.catalog.pending_reasons``)."""


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A job as a list shows it: everything but its timeline and the scheduler's latest decision."""

    job_id: JobId
    tenant: TenantId
    project: str
    queue: str
    name: str
    kind: str
    priority_class: str
    status: str
    cluster: ClusterId | None
    replicas: int
    gpu_milli: int
    npus: int
    """Per replica, as gpu_milli is."""
    npu_models: str
    """The NPU models it accepts, comma-separated, as the column holds them ("": any)."""
    submitted_ms: int | None
    placed_ms: int | None
    started_ms: int | None
    ended_ms: int | None
    waiting_ms: int
    queued_since_ms: int | None
    run: int
    runs: int
    preemptions: int
    last_reason: str
    last_message: str
    placement: tuple[Slot, ...]
    last_decision_type: str
    pending_reason: str | None
    """While it waits: the category of its wait (``None`` otherwise, or before the scheduler said)."""
    federation_position: int | None
    """While it waits: its place in the whole federation's order (1 is next)."""
    tenant_queue_position: int | None
    """While it waits: its place among the waiting jobs of its tenant's queue (1 is next)."""
    estimated_start_ms: int | None
    """While it waits: when the scheduler expects it to start, if it can tell."""
    expected_runtime_s: int | None
    max_runtime_s: int | None
    """The runtime it was submitted with, expected and at most (``None``: none given)."""
    retries: int
    """Runs that failed and were retried (the scheduler's ``JobRetryScheduled``)."""
    clusters: tuple[str, ...] = field(default=(), kw_only=True)
    """The clusters its current run holds replicas in, in the order they were opened (a spread inference
    service's may be several; ``cluster`` stays the run's first)."""
    parts: tuple[RunPart, ...] = field(default=(), kw_only=True)
    """A spread service's current (or last) run, part by part; empty for a job that does not spread."""
    spread_clusters: int = field(default=1, kw_only=True)
    """The clusters its service may spread over, as submitted (1: it does not spread)."""


@dataclass(frozen=True, slots=True)
class JobRow(JobSummary):
    """A job's whole row. ``orphan``: only events about it were seen, not its submission."""

    orphan: bool
    timeline: tuple[TimelineEntry, ...]
    last_decision: dict[str, Any] | None
    """The scheduler's latest decision about the job, its JSON body as published."""


@dataclass(frozen=True, slots=True)
class JobHistory:
    """What a report needs of a job: who it is for, when it waited and ran, its timeline."""

    job_id: JobId
    tenant: TenantId
    project: str
    kind: str
    priority_class: str
    status: str
    submitted_ms: int | None
    placed_ms: int | None
    waiting_ms: int
    timeline: tuple[TimelineEntry, ...]


@dataclass(frozen=True, slots=True)
class HeldRun:
    """A run holding GPUs now (placed or running), with the GPU model of its first replica's node."""

    tenant: TenantId
    project: str
    cluster: ClusterId
    gpu_model: str | None
    """``None`` when the node is not known (any more)."""
    placed_ms: int
    placement: tuple[Slot, ...]
    expected_runtime_s: int | None = None
    max_runtime_s: int | None = None
    """The runtime it was submitted with (``None``: none given)."""
    npu_model: str | None = None
    """The NPU model of its first replica's node (``None``: no NPUs there, or the node is not known)."""
    slot_models: tuple[tuple[str | None, str | None], ...] = ()
    """Per replica of ``placement``, the GPU and NPU models of its node (``None``: none, or not known)."""
    parts: tuple[RunPart, ...] = ()
    """A spread service's run part by part (when each opened); empty for any other run."""


@dataclass(frozen=True, slots=True)
class JobOutcome:
    status: str
    runs: int
    preemptions: int
    last_reason: str
    last_message: str


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    """A cluster as registered and as its present nodes add up (either may be missing)."""

    cluster: ClusterId
    registered: bool
    kind: str
    site: str
    region: str
    status: str
    status_reason: str
    nodes: int
    gpus: int
    gpu_capacity_milli: int
    gpu_free_milli: int
    """Free on schedulable nodes."""


@dataclass(frozen=True, slots=True)
class NodeRow:
    cluster: ClusterId
    node: str
    present: bool
    schedulable: bool
    gpu_model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    gpu_capacity_milli: int
    gpu_allocated_milli: int
    gpu_free_milli: int
    health_milli: int
    failures: int
    gpu_utilisation_pct: int
    jobs: int
    last_seen_ms: int
    npus: int = 0
    npu_model: str = ""
    npus_free: int = 0
    npus_healthy: int = 0
    """Its NPUs that are not failed, degraded ones included."""
    npus_degraded: int = 0
    npu_utilisation_pct: int | None = None
    """The mean of its NPUs' utilisation in its latest usage report; ``None``: no report measured them."""


@dataclass(frozen=True, slots=True)
class ModelCapacity:
    """One GPU model's capacity in one cluster, over its present nodes with GPUs."""

    cluster: ClusterId
    gpu_model: str
    nodes: int
    total_milli: int
    healthy_milli: int
    free_milli: int
    """Free on schedulable nodes."""
    allocated_milli: int


@dataclass(frozen=True, slots=True)
class NpuCapacity:
    """One NPU model's NPUs in one cluster, over its present nodes with NPUs."""

    cluster: ClusterId
    npu_model: str
    nodes: int
    total: int
    """Every NPU of those nodes, failed or not."""
    healthy: int
    """Those not failed, degraded ones included."""
    degraded: int
    """Those that work but are degraded."""
    failed: int
    free: int
    """Healthy and held by no run, on schedulable nodes."""
    unheld: int = 0
    """Healthy and held by no run, cordoned nodes' too: what is not allocated (a model's pressure)."""


@dataclass(frozen=True, slots=True)
class ClusterAllocation:
    """A cluster's GPU capacity and what is allocated of it, over every node it has reported."""

    cluster: ClusterId
    capacity_milli: int
    allocated_milli: int


@dataclass(frozen=True, slots=True)
class PendingNpus:
    """Waiting jobs that accept the same NPU models and ask the same number of NPUs (every replica's)."""

    npu_models: tuple[str, ...]
    """Empty: any NPU model."""
    each: int
    jobs: int


@dataclass(frozen=True, slots=True)
class FleetModel:
    """One GPU model across the federation: capacity, free, pending demand, congestion."""

    gpu_model: str
    capacity_milli: int
    free_milli: int
    pending_milli: int
    congestion_milli: int
    hot: bool


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """One line of a queue's quota, with what is used and borrowed of it."""

    resource: str
    gpu_model: str | None
    used: int
    guaranteed: int
    limit: int | None
    borrowed: int


@dataclass(frozen=True, slots=True)
class QueueQuota:
    tenant: TenantId
    queue: str
    usage: tuple[QuotaUsage, ...]
    gpu_hours_milli: int
    running_jobs: int
    npu_hours_milli: int = 0
    """NPU time of the queue's runs since its period began, in milli-NPU-hours (apart from GPU time)."""


@dataclass(frozen=True, slots=True)
class UsageHour:
    """A tenant's GPU (or NPU: ``kind``) time on one model of one cluster in one hour, and its cost."""

    tenant: TenantId
    cluster: ClusterId
    gpu_model: str
    hour_ms: int
    allocated_milli_ms: int
    used_milli_ms: int
    idle_milli_ms: int
    cost_micro: int
    currency: str
    projects: tuple[ProjectShare, ...]
    kind: str = "gpu"
    """"gpu" or "npu": the device ``gpu_model`` names and the time counts (milli-device x ms)."""
    samples: int = 0
    """Usage samples that measured it: 0 when nothing measured its devices in the hour (no used share
    to tell, not an idle one)."""


@dataclass(frozen=True, slots=True)
class DocumentRow:
    """A configuration document as last applied (``body`` its JSON values; ``None`` once deleted)."""

    kind: str
    name: str
    tenant: str
    generation: int
    body: dict[str, Any] | None
    author: str
    changed_ms: int
    deleted: bool
