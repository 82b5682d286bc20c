"""What projections compute for the scheduler: resource profiles and quota usage (compacted topics).

Called by the projections, which publish a new version of an entity's state whenever it changes, and by
the scheduler, which reads the latest version of each. The topics are compacted, so each event carries
the whole state of its key, never a delta: ``fedsched.profiles`` is keyed ``cluster/node`` (or just
``cluster`` for a cluster's roll-up), ``fedsched.quota-usage`` is keyed ``tenant/queue``. ``version`` grows
with every update of a key; a reader ignores an update older than the one it holds.

Retired fields stay reserved (never reused with another meaning): none yet.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from events.catalog.base import Event
from events.catalog.topics import PROFILES, QUOTA_USAGE
from events.catalog.types import (
    ClusterIdField,
    EpochMillis,
    Frozen,
    GpuModel,
    NodeIdField,
    NonNegInt,
    Permille,
    PosInt,
    QueueIdField,
    ResourceKind,
    TenantIdField,
    Unique,
)


class Quantities(Frozen):
    """An amount of every resource: milli-CPU, MiB, milli-GPU, NPUs."""

    cpu_milli: NonNegInt = 0
    memory_mib: NonNegInt = 0
    gpu_milli: NonNegInt = 0
    npus: NonNegInt = 0


class GpuModelProfile(Frozen):
    """Capacity of one GPU model in the profile's scope, in milli-GPU."""

    model: GpuModel
    gpus: NonNegInt
    memory_mib: NonNegInt
    capacity_milli: NonNegInt
    allocated_milli: NonNegInt
    free_milli: NonNegInt
    largest_free_block_milli: NonNegInt = 0
    """The most milli-GPU free together on one node (what the largest replica could get)."""


HOT_PRESSURE_MILLI = 900
"""A GPU or NPU model is hot where this share (thousandths) of its working capacity is allocated: the policy's
default ``hot_pressure_milli``, and what ``fedsched resources`` and a profile's ``hot_models`` say."""


def pressure_milli(capacity_milli: int, free_milli: int) -> int:
    """The allocated share of a GPU or NPU model's working capacity (failed devices left out), in
    thousandths: what makes it hot (``is_hot``); 0 for no capacity."""
    return (capacity_milli - free_milli) * 1000 // capacity_milli if capacity_milli > 0 else 0


def is_hot(pressure: int, threshold: int = HOT_PRESSURE_MILLI) -> bool:
    """The one definition of a hot model, GPU or NPU alike, for the scheduler (with the policy's threshold)
    and the read side (with the default): its ``pressure_milli`` reaches the threshold."""
    return pressure >= threshold


class ResourceProfileUpdated(Event):
    """A projection recomputed the profile of a node (or of a whole cluster, when ``node`` is None)."""

    event_type: ClassVar[str] = "io.fedsched.ResourceProfileUpdated"
    schema_version: ClassVar[int] = 2
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
    """1000 is fully healthy; lowered by degraded and failed devices."""
    failures_per_kgpu_hour_milli: NonNegInt
    """Device failures (GPUs and NPUs) per 1000 device-hours, in thousandths (2500 is 2.5 failures): a
    node's over the device-hours it was observed; a cluster's (no node) in the last day over its devices'
    hours of that day. (The name is older than NPU health: it counts both.)"""
    congestion_milli: Permille
    """0 idle .. 1000 saturated: how contended the scope is (network, storage, queueing)."""
    hot_models: Annotated[tuple[GpuModel, ...], Field(max_length=16), Unique()] = ()
    """GPU models hot here (``is_hot`` of their ``pressure_milli``), by name."""
    fit_training: bool
    fit_inference: bool
    last_seen_ms: EpochMillis
    """Time of the last inventory report folded in."""
    stale: bool = False
    """No report arrived within the projection's staleness limit: the scheduler should not trust it."""
    recent_failures: NonNegInt | None = None
    """GPU and NPU failures in the day before ``last_seen_ms`` (a cluster's: all its nodes'); ``None``: not
    said (a v1 record)."""


class QuotaUsage(Frozen):
    """Usage against the quota of one resource (or one GPU model of it), in the resource's unit."""

    resource: ResourceKind
    gpu_model: GpuModel | None = None
    used: NonNegInt
    guaranteed: NonNegInt
    limit: NonNegInt | None = None
    """``None``: unbounded."""
    borrowed: NonNegInt = 0
    """Used beyond ``guaranteed``, lent by the cohort and reclaimable."""


class QuotaUsageUpdated(Event):
    """A projection recomputed a tenant queue's quota usage."""

    event_type: ClassVar[str] = "io.fedsched.QuotaUsageUpdated"
    schema_version: ClassVar[int] = 2
    key_field: ClassVar[str | None] = "tenant/queue"
    topic: ClassVar[str] = QUOTA_USAGE.name

    tenant: TenantIdField
    queue: QueueIdField
    version: PosInt
    usage: Annotated[tuple[QuotaUsage, ...], Field(max_length=64), Unique(("resource", "gpu_model"))] = ()
    gpu_hours_milli: NonNegInt = 0
    """GPU time consumed since ``period_start_ms``, in milli-GPU-hours."""
    period_start_ms: EpochMillis
    npu_hours_milli: NonNegInt = 0
    """NPU time consumed since ``period_start_ms``, in milli-NPU-hours (v1 said none: NPU time was not
    counted). Never part of ``gpu_hours_milli``."""


__all__ = [
    "HOT_PRESSURE_MILLI",
    "GpuModelProfile",
    "Quantities",
    "QuotaUsage",
    "QuotaUsageUpdated",
    "ResourceProfileUpdated",
    "is_hot",
    "pressure_milli",
]
