"""Clusters, nodes and their devices as connectors observe them (topic ``fedsched.inventory``).

Called by connectors, which publish these, and by the projections that build resource profiles from
them. Cluster events are keyed by cluster id; node events by ``cluster/node``, so the history of one node
stays in order on one partition.

Reports are snapshots, not deltas: ``NodeObserved`` carries the node's whole state with a monotone
``generation``, and ``GpuHealthReported`` carries cumulative counters. A record delivered twice, or one
that is lost, leaves a consumer wrong for no longer than the next report.

Retired fields stay reserved (never reused with another meaning):

- ``GpuHealthReported.gpus.errors`` (v1: one count mixing XID and ECC errors), split in v2 into
  ``xid_errors``, ``ecc_corrected`` and ``ecc_uncorrected``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import Field, StringConstraints, model_validator

from events.catalog.base import Event
from events.catalog.reasons import ReasonCode
from events.catalog.topics import INVENTORY
from events.catalog.types import (
    ClusterIdField,
    CurrencyCode,
    DeviceIndex,
    DeviceIndices,
    EpochMillis,
    Frozen,
    GpuModel,
    Health,
    Id,
    Ids,
    JobIdField,
    LabelKey,
    Labels,
    LabelValue,
    NodeIdField,
    NonNegInt,
    Percent,
    PosInt,
    ShortText,
    TaintEffect,
    TemperatureC,
    Text,
    Unique,
)


class ClusterKind(StrEnum):
    KUBERNETES = "kubernetes"
    SLURM = "slurm"
    SIMULATED = "simulated"


class ClusterStatus(StrEnum):
    REACHABLE = "reachable"
    UNREACHABLE = "unreachable"
    DRAINING = "draining"


class GpuRate(Frozen):
    """The price of one device-hour of a model, in millionths of the cluster's currency unit: a GPU
    model's, or an NPU model's (NPU-hours are priced from the same rates, by the NPU's model)."""

    model: GpuModel
    micro_per_gpu_hour: NonNegInt


class ClusterRegistered(Event):
    """A cluster joined the federation, or its connector restarted and restated what the cluster is."""

    event_type: ClassVar[str] = "io.fedsched.ClusterRegistered"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "cluster"
    topic: ClassVar[str] = INVENTORY.name

    cluster: ClusterIdField
    kind: ClusterKind
    display_name: ShortText = ""
    site: Id
    region: Id
    labels: Labels = Field(default_factory=dict)
    currency: CurrencyCode
    gpu_rates: Annotated[tuple[GpuRate, ...], Field(max_length=64), Unique(("model",))] = ()
    datasets: Ids = ()
    """Datasets readable from this cluster without a cross-site copy."""


class ClusterStatusChanged(Event):
    """A cluster became reachable, unreachable or draining."""

    event_type: ClassVar[str] = "io.fedsched.ClusterStatusChanged"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "cluster"
    topic: ClassVar[str] = INVENTORY.name

    cluster: ClusterIdField
    status: ClusterStatus
    reason: ReasonCode
    message: Text = ""


ROSTER_PART_NODES = 2000
"""Nodes one ``ClusterNodesListed`` names at most: a larger cluster's roster comes in several parts."""


class ClusterNodesListed(Event):
    """A connector's roster of its cluster: every node it knows of as of ``as_of``, in ``parts`` parts.

    Published by the Kubernetes connector after each full list of the cluster's nodes, after a node came or
    went, and again now and then; read back by that connector when it starts (the latest complete roster
    before its own first list), so a node deleted while no connector was running is reported removed by
    the next list. No other consumer folds it: ``NodeObserved`` and ``NodeRemoved`` say what a node is."""

    event_type: ClassVar[str] = "io.fedsched.ClusterNodesListed"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "cluster"
    topic: ClassVar[str] = INVENTORY.name

    cluster: ClusterIdField
    as_of: NonNegInt
    """The newest node generation the roster accounts for (the API server's resource version)."""
    taken_ms: EpochMillis
    """When the connector took the roster: with ``as_of``, what the parts of one roster share."""
    part: Annotated[int, Field(ge=1, le=1000)]
    parts: Annotated[int, Field(ge=1, le=1000)]
    nodes: Annotated[tuple[NodeIdField, ...], Field(max_length=ROSTER_PART_NODES)]
    """Sorted, each once; this part's share of the roster."""

    @model_validator(mode="after")
    def _consistent(self) -> ClusterNodesListed:
        if self.part > self.parts:
            raise ValueError(f"part {self.part} of {self.parts}")
        if any(a >= b for a, b in zip(self.nodes, self.nodes[1:], strict=False)):
            raise ValueError("nodes must be sorted and each named once")
        return self


class NodeEvent(Event):
    """Base of the events about one node: keyed ``cluster/node`` on the inventory topic."""

    key_field: ClassVar[str | None] = "cluster/node"
    topic: ClassVar[str] = INVENTORY.name

    cluster: ClusterIdField
    node: NodeIdField


class GpuDevice(Frozen):
    index: DeviceIndex
    model: GpuModel
    memory_mib: NonNegInt
    health: Health = Health.OK
    uuid: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]{1,64}$")] | None = None
    """The driver's stable id of the card (``GPU-8f3c...``), to follow a card that moves between nodes."""


class NpuDevice(Frozen):
    index: DeviceIndex
    model: GpuModel
    memory_mib: NonNegInt
    health: Health = Health.OK


class Taint(Frozen):
    key: LabelKey
    value: LabelValue = ""
    effect: TaintEffect


class NodeObserved(NodeEvent):
    """A connector saw a node: its whole state, which replaces everything known of it before."""

    event_type: ClassVar[str] = "io.fedsched.NodeObserved"
    schema_version: ClassVar[int] = 1

    generation: NonNegInt
    """The connector's counter for this node, increasing with every change; a consumer ignores a
    snapshot older than the one it holds."""
    resource_version: Annotated[str, StringConstraints(max_length=128)] | None = None
    """The source system's own opaque version of the node (Kubernetes ``resourceVersion``), if any."""
    cpu_milli: NonNegInt
    memory_mib: NonNegInt
    gpus: Annotated[tuple[GpuDevice, ...], Field(max_length=64), Unique(("index",), ordered=True)] = ()
    """Every GPU of the node, sorted by index."""
    npus: Annotated[tuple[NpuDevice, ...], Field(max_length=64), Unique(("index",), ordered=True)] = ()
    """Every NPU of the node, sorted by index."""
    nvlink_domain: Id | None = None
    """GPUs that share an NVLink/NVSwitch domain across nodes (for example one NVL72 rack)."""
    rdma_fabric: Id | None = None
    """The RDMA fabric (InfiniBand or RoCE) the node is on; multi-node jobs need one fabric."""
    labels: Labels = Field(default_factory=dict)
    taints: Annotated[tuple[Taint, ...], Field(max_length=64), Unique(("key", "effect"))] = ()
    schedulable: bool = True


class NodeRemoved(NodeEvent):
    """A node left its cluster (deleted, or lost for longer than the connector's grace period)."""

    event_type: ClassVar[str] = "io.fedsched.NodeRemoved"
    schema_version: ClassVar[int] = 1

    generation: NonNegInt
    reason: ReasonCode
    message: Text = ""


class GpuHealthSample(Frozen):
    """One GPU's health. Counters are cumulative since the driver loaded (NVML's volatile counters)."""

    index: DeviceIndex
    health: Health
    xid_errors: NonNegInt
    last_xid: Annotated[int, Field(ge=0, le=65_535)] | None = None
    """The most recent XID code seen, if any (for example 79: the GPU fell off the bus)."""
    ecc_corrected: NonNegInt | None = None
    """``None`` when the card or the producer does not report ECC counters (and in upcast v1 records)."""
    ecc_uncorrected: NonNegInt | None = None
    temperature_c: TemperatureC | None = None


class NpuHealthSample(Frozen):
    """One NPU's health. Counters are cumulative since the driver loaded (as ``npu-smi`` reports them)."""

    index: DeviceIndex
    health: Health
    errors: NonNegInt
    """Device errors the driver raised (alarms of any severity)."""
    last_error_code: Annotated[int, Field(ge=0, le=0xFFFF_FFFF)] | None = None
    """The most recent error code the driver reported, if any (Ascend's are 32-bit, such as 0x80E18402)."""
    hbm_ecc_uncorrected: NonNegInt | None = None
    """``None`` when the card or the producer does not report its memory's ECC counters."""
    temperature_c: TemperatureC | None = None


class GpuHealthReported(NodeEvent):
    """A connector read the health counters of a node's accelerators: its GPUs, its NPUs, or both."""

    event_type: ClassVar[str] = "io.fedsched.GpuHealthReported"
    schema_version: ClassVar[int] = 3
    retired_fields: ClassVar[tuple[str, ...]] = ("gpus.errors",)

    gpus: Annotated[tuple[GpuHealthSample, ...], Field(max_length=64), Unique(("index",), ordered=True)] = ()
    """One sample per GPU read, sorted by index."""
    npus: Annotated[tuple[NpuHealthSample, ...], Field(max_length=64), Unique(("index",), ordered=True)] = ()
    """One sample per NPU read, sorted by index."""

    @model_validator(mode="after")
    def _samples_something(self) -> GpuHealthReported:
        if not self.gpus and not self.npus:
            raise ValueError("gpus, npus: a health report samples at least one GPU or NPU")
        return self


class GpuUsage(Frozen):
    index: DeviceIndex
    utilisation_pct: Percent
    memory_used_mib: NonNegInt


class NpuUsage(Frozen):
    index: DeviceIndex
    utilisation_pct: Percent
    """The AI cores' busy share over the window."""
    memory_used_mib: NonNegInt


class JobUsage(Frozen):
    """What one job used on this node over the window."""

    job_id: JobIdField
    gpu_indices: DeviceIndices = ()
    utilisation_pct: Percent = 0
    """Mean utilisation of the job's GPUs on this node."""
    gpu_memory_used_mib: NonNegInt = 0
    npu_indices: DeviceIndices = ()
    npu_utilisation_pct: Percent = 0
    """Mean utilisation of the job's NPUs on this node."""
    npu_memory_used_mib: NonNegInt = 0
    cpu_milli_used: NonNegInt = 0
    memory_used_mib: NonNegInt = 0
    run: PosInt | None = None
    """The job's run that was measured (its ``JobPlaced.run``), so the measurement is that run's however
    late the placement is read; ``None``: the connector cannot tell (work fedsched did not place)."""


class NodeUsageReported(NodeEvent):
    """A connector sampled how busy a node and the jobs on it were over a window ending now."""

    event_type: ClassVar[str] = "io.fedsched.NodeUsageReported"
    schema_version: ClassVar[int] = 3

    window_ms: Annotated[int, Field(ge=1, le=24 * 3600 * 1000)]
    cpu_milli_used: NonNegInt = 0
    memory_used_mib: NonNegInt = 0
    gpus: Annotated[tuple[GpuUsage, ...], Field(max_length=64), Unique(("index",), ordered=True)] = ()
    """Sorted by index."""
    npus: Annotated[tuple[NpuUsage, ...], Field(max_length=64), Unique(("index",), ordered=True)] = ()
    """Sorted by index."""
    jobs: Annotated[tuple[JobUsage, ...], Field(max_length=256), Unique(("job_id",))] = ()


__all__ = [
    "ClusterKind",
    "ClusterNodesListed",
    "ClusterRegistered",
    "ClusterStatus",
    "ClusterStatusChanged",
    "GpuDevice",
    "GpuHealthReported",
    "GpuHealthSample",
    "GpuRate",
    "GpuUsage",
    "JobUsage",
    "NodeEvent",
    "NodeObserved",
    "NodeRemoved",
    "NodeUsageReported",
    "NpuDevice",
    "NpuHealthSample",
    "NpuUsage",
    "Taint",
]
