"""Deltas the job stage derives for the other stages. Pure data.

Allocations are stated per (job, run), not as increments, so applying one twice or a release before
its allocation cannot corrupt a total: a node holds a map of job -> allocation, a release removes the
entry only if the run matches.
"""

from __future__ import annotations

from projections.stages.core import Delta, record


@record
class NodeAllocation(Delta):
    """A job's run took (``held``) or gave back (not held) resources on one node."""

    job_id: str
    run: int
    held: bool
    tenant: str = ""
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: tuple[tuple[int, int], ...] = ()  # (GPU index, milli-GPU)
    npus: tuple[int, ...] = ()  # NPU indices


@record
class QueueAllocation(Delta):
    """A job's run started or stopped holding quota of a tenant's queue."""

    job_id: str
    run: int
    held: bool
    queue_key: str
    """``tenant/queue``, the quota stage's key."""
    cluster: str
    cpu_milli: int
    memory_mib: int
    gpu_milli: int
    gpu_model: str | None
    since_ms: int
    """When the run was placed; the quota stage integrates GPU-hours from it to ``at_ms``."""
    at_ms: int = 0
    """When this hold or release happened (a release may be folded later than it happened)."""
    npus: int = 0
    npu_model: str | None = None
    """The model of the NPUs held (the node fills it in, as ``gpu_model``)."""
    part: str = ""
    """The node whose replicas of the run this holds ("" for the whole run): a run holds its queue node by
    node, each part counted under the model of its own node."""


@record
class PendingDemand(Delta):
    """A job started (``pending``) or stopped waiting for GPUs of some models (empty: any model)."""

    job_id: str
    pending: bool
    gpu_milli: int
    gpu_models: tuple[str, ...]


@record
class NodeCapacity(Delta):
    """A node's GPU capacity and free capacity per model, as the node stage last computed it."""

    cluster: str
    node: str
    present: bool
    per_model: tuple[tuple[str, int, int], ...] = ()  # (model, capacity milli, free milli)
    gpus: int = 0
    """Its GPUs and NPUs, failed ones included: the weight of its health in its cluster's stability."""
    health_milli: int = 1000
    """Its health (``nodes.health_milli``: its GPUs' and NPUs' states less recent failures, decayed)."""
    recent_failures: int = 0
    """GPU and NPU failures within the last day (``nodes.HALF_LIFE_MS``) of the time it states."""
    fit_training: bool = False
    fit_inference: bool = False


DEVICE_KINDS = ("gpu", "npu")
"""The device kinds whose time is counted: GPU-hour budgets count "gpu" time only."""


@record
class UsageInterval(Delta):
    """A job's run held ``gpu_milli`` of a device model in a cluster from ``start_ms`` to ``end_ms``: of
    GPUs, or with ``kind`` "npu" of NPUs (``gpu_milli`` then 1000 per NPU held, ``gpu_model`` the NPUs'); and
    the replicas added to it later (``grown``: from when, how much) from then to ``end_ms``."""

    job_id: str
    run: int
    tenant: str
    project: str
    cluster: str
    gpu_model: str
    gpu_milli: int
    start_ms: int
    end_ms: int
    kind: str = "gpu"
    """The device kind held: "gpu" or "npu" (``DEVICE_KINDS``); the two are counted apart."""
    grown: tuple[tuple[int, int], ...] = ()
    """(from ms, milli-GPU) of the replicas added to the run later (``JobReplicasAdded``), counted from
    when they were added."""
    part: str = ""
    """The node whose replicas of the run this interval counts ("" for the whole run): a run's time is
    counted node by node, each priced at the rate of its own node's model (the usage stage counts each
    part of a run once per hour)."""


@record
class UsageSample(Delta):
    """Measured use of a job's GPUs, or of its NPUs, over a window (from a node's usage report), for its
    tenant."""

    job_id: str
    tenant: str
    project: str
    cluster: str
    gpu_model: str
    gpu_milli: int
    """What the job holds of the GPUs it was measured on (a share of one GPU is less than 1000); of NPUs
    (``kind`` "npu"), 1000 per NPU."""
    utilisation_pct: int
    window_ms: int
    end_ms: int
    kind: str = "gpu"
    """The device kind measured: "gpu" (``gpu_model`` a GPU model) or "npu" (an NPU model)."""


@record
class ShapeSeen(Delta):
    """A job's first submission, counted once per job by the shape stage."""

    job_id: str
    cpu_milli: int
    memory_mib: int
    gpu_milli: int
    gpu_models: tuple[str, ...]
    replicas: int
