"""The mutable state of a simulated cluster: each node's allocations and health, each live run.

Called by the model (``connectors.sim.cluster``), the refusal check and the report builders. Pure: no
I/O. Runs and nodes are kept in dicts filled in a fixed order (node names sorted, runs in the order the
log gave them), and are iterated only in that order or sorted, so the same inputs give the same events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from connectors.sim.jobs import JobSpec
from connectors.sim.nodes import NodeSpec
from events.catalog.decisions import ReplicaPlacement
from events.catalog.inventory import NodeObserved
from events.catalog.types import Health, JobId, NodeId

RunKey = tuple[JobId, int]
"""A job and the attempt (``run``) of it."""


class Phase(Enum):
    ACCEPTED = "accepted"
    """Placement checked and resources taken; the workload is starting."""
    RUNNING = "running"
    STOPPING = "stopping"
    """Asked to stop (cancel, preemption, reclaim); resources held until it has."""


class StopKind(Enum):
    CANCEL = "cancel"
    PREEMPT = "preempt"
    RECLAIM = "reclaim"


@dataclass(slots=True)
class NodeState:
    spec: NodeSpec
    generation: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: list[int] = field(default_factory=list)
    """Allocated milli-GPU per GPU index."""
    npu_used: list[bool] = field(default_factory=list)
    gpu_faults: list[int] = field(default_factory=list)
    """Active failures per GPU index (faults may overlap); the GPU is failed while this is above 0."""
    xid_errors: list[int] = field(default_factory=list)
    ecc_uncorrected: list[int] = field(default_factory=list)
    last_xid: list[int | None] = field(default_factory=list)
    npu_faults: list[int] = field(default_factory=list)
    """Active failures per NPU index, as ``gpu_faults``."""
    npu_errors: list[int] = field(default_factory=list)
    npu_hbm_ecc: list[int] = field(default_factory=list)
    npu_last_error: list[int | None] = field(default_factory=list)
    lost: int = 0
    """Active node-loss faults; the node is gone from the cluster while this is above 0."""
    cordons: int = 0
    runs: dict[RunKey, None] = field(default_factory=dict)
    """Runs holding resources here, in the order they took them (an ordered set)."""
    published: NodeObserved | None = None
    """The last snapshot published, to publish only real changes."""
    published_removed: bool = False

    def __post_init__(self) -> None:
        count = self.spec.gpus
        self.gpu_milli = [0] * count
        self.gpu_faults = [0] * count
        self.xid_errors = [0] * count
        self.ecc_uncorrected = [0] * count
        self.last_xid = [None] * count
        npus = self.spec.npus
        self.npu_used = [False] * npus
        self.npu_faults = [0] * npus
        self.npu_errors = [0] * npus
        self.npu_hbm_ecc = [0] * npus
        self.npu_last_error = [None] * npus

    @property
    def name(self) -> NodeId:
        return self.spec.name

    @property
    def removed(self) -> bool:
        return self.lost > 0

    @property
    def schedulable(self) -> bool:
        return self.spec.schedulable and self.cordons == 0

    def gpu_health(self, index: int) -> Health:
        return Health.FAILED if self.gpu_faults[index] else Health.OK

    def npu_health(self, index: int) -> Health:
        return Health.FAILED if self.npu_faults[index] else Health.OK


@dataclass(slots=True)
class Run:
    """A run of a job in this cluster; for a job that spreads over clusters, the run's part here."""

    job: JobSpec
    run: int
    placement: tuple[ReplicaPlacement, ...]
    """Every replica it holds here: its ``JobPlaced``'s (or, for a part of a run spread over clusters, the
    ``JobReplicasAdded`` that opened the part here), then those each later ``JobReplicasAdded`` added."""
    phase: Phase
    accepted_ms: int
    placed_id: str | None = None
    """Envelope id of the ``JobPlaced``, or of the ``JobReplicasAdded`` that opened the part (causation of
    what follows)."""
    started_ms: int | None = None
    stop: StopKind | None = None
    stop_id: str | None = None
    requester: str | None = None
    checkpoint: bool = False
    """A stopping run writes a checkpoint before it stops."""

    @property
    def key(self) -> RunKey:
        return (self.job.job_id, self.run)

    def nodes(self) -> list[NodeId]:
        """The nodes of the placement, each once, in replica order."""
        return list(dict.fromkeys(r.node for r in self.placement))


def allocate(
    nodes: dict[NodeId, NodeState], run: Run, sign: int, replicas: tuple[ReplicaPlacement, ...] | None = None
) -> None:
    """Take (``sign=1``) or give back (``sign=-1``) the run's resources on its nodes: of all its replicas,
    or of ``replicas`` only (those a ``JobReplicasAdded`` adds to it, already in its placement)."""
    res = run.job.resources
    for replica in run.placement if replicas is None else replicas:
        node = nodes[replica.node]
        node.cpu_milli += sign * res.cpu_milli
        node.memory_mib += sign * res.memory_mib
        for index in replica.gpu_indices:
            node.gpu_milli[index] += sign * replica.gpu_milli_each
        for index in replica.npu_indices:
            node.npu_used[index] = sign > 0
    for name in run.nodes():
        if sign > 0:
            nodes[name].runs[run.key] = None
        else:
            nodes[name].runs.pop(run.key, None)


__all__ = ["NodeState", "Phase", "Run", "RunKey", "StopKind", "allocate"]
