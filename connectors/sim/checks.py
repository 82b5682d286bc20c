"""The second check on the scheduler: does a placement fit what this cluster has right now?

Called by the model for every ``JobPlaced`` addressed to its cluster, before it takes any resource, and
for every ``JobReplicasAdded`` (``check_added``: the same checks of the new replicas, against a run that
holds the others here; for a job that spreads over clusters, against the run's part here, which an
addition may open: it then holds none).
Pure: no I/O. A refusal names the reason code, the node at fault and the numbers, and becomes a
``JobFailed``; the scheduler can then queue the job again.

Checked per replica, in this order (the first failure wins): the node exists (``NoFeasibleNode``), is
not lost (``NodeLost``) or cordoned (``NodeUnschedulable``), its taints are tolerated
(``TaintNotTolerated``); the placement has the shape the job asked for (``LaunchFailed``: for a job
that spreads, no more replicas in this cluster than its per-cluster cap); the GPU
model is allowed (``GpuModelUnavailable``) and has enough memory (``GpuMemoryTooSmall``); the GPU
and NPU indices exist (``LaunchFailed``) and are healthy (``GpuUnhealthy``, for an NPU too); nothing is
over-committed, counting the replicas of this placement that share a node or a GPU (``InsufficientGpu``,
``InsufficientGpuShare``, ``InsufficientNpu``, ``InsufficientCpu``, ``InsufficientMemory``); then, for a
job that requires its interconnect, every replica on a node of one NVLink domain or RDMA fabric
(``InterconnectUnavailable``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from connectors.sim.jobs import JobSpec
from connectors.sim.state import NodeState
from events.catalog.decisions import JobPlaced, JobReplicasAdded, ReplicaPlacement
from events.catalog.jobs import Interconnect, Toleration
from events.catalog.reasons import ReasonCode
from events.catalog.types import NodeId, TaintEffect

R = ReasonCode


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: ReasonCode
    message: str
    node: NodeId | None = None


@dataclass(slots=True)
class _Tentative:
    """What earlier replicas of the same placement take, so two replicas cannot share one free slot."""

    cpu: Counter[NodeId]
    memory: Counter[NodeId]
    gpu: Counter[tuple[NodeId, int]]
    npu: Counter[tuple[NodeId, int]]


def check_placement(placed: JobPlaced, job: JobSpec, nodes: Mapping[NodeId, NodeState]) -> Refusal | None:
    count = len(placed.replicas)
    if count > job.replicas:
        return Refusal(R.LAUNCH_FAILED, f"the placement names {count} replicas; the job has {job.replicas}")
    if job.part_cap is not None and count > job.part_cap:
        return _over_cap(job, count)
    if job.gang and count < job.replicas:
        return Refusal(R.LAUNCH_FAILED, f"gang of {job.replicas} replicas, but the placement names only {count}")
    taken = _Tentative(Counter(), Counter(), Counter(), Counter())
    for replica in placed.replicas:
        refusal = _check_replica(replica, job, nodes, taken)
        if refusal is not None:
            return refusal
    return _one_domain(placed, job, nodes)


def check_added(
    added: JobReplicasAdded, held: tuple[ReplicaPlacement, ...], job: JobSpec, nodes: Mapping[NodeId, NodeState]
) -> Refusal | None:
    """Replicas added to a run that holds ``held`` here (their resources not yet taken): a job that is not a
    gang, no more replicas than it asks, numbers that continue the run's, room on the named devices, and
    one interconnect domain with the run's replicas when the job requires one.

    For a job that spreads, ``held`` is the run's part here (empty when the addition opens it): the part
    holds no more than the per-cluster cap, and the new numbers come after those it holds (the run's other
    parts hold numbers this cluster does not see, so they need not follow on)."""
    count = len(held) + len(added.replicas)
    first = added.replicas[0].replica
    if job.gang:
        return Refusal(R.LAUNCH_FAILED, f"gang of {job.replicas} replicas: replicas cannot be added to its run")
    if count > job.replicas:
        return Refusal(R.LAUNCH_FAILED, f"the run would hold {count} replicas; the job has {job.replicas}")
    if job.part_cap is not None:
        if count > job.part_cap:
            return _over_cap(job, count)
        top = max((r.replica for r in held), default=-1)
        if first <= top:
            return Refusal(R.LAUNCH_FAILED, f"replica {first} added to a part here that holds up to replica {top}")
    elif first != len(held):
        return Refusal(R.LAUNCH_FAILED, f"replica {first} added to a run of {len(held)} (numbered 0..{len(held) - 1})")
    taken = _Tentative(Counter(), Counter(), Counter(), Counter())
    for replica in added.replicas:
        refusal = _check_replica(replica, job, nodes, taken)
        if refusal is not None:
            return refusal
    return _one_domain_of((*held, *added.replicas), job, nodes)


def _over_cap(job: JobSpec, count: int) -> Refusal:
    return Refusal(
        R.LAUNCH_FAILED,
        f"the job spreads over {job.spread_clusters} clusters, at most {job.part_cap} of its replicas in one; "
        f"this cluster would hold {count}",
    )


def _one_domain(placed: JobPlaced, job: JobSpec, nodes: Mapping[NodeId, NodeState]) -> Refusal | None:
    return _one_domain_of(placed.replicas, job, nodes)


def _one_domain_of(
    replicas: tuple[ReplicaPlacement, ...], job: JobSpec, nodes: Mapping[NodeId, NodeState]
) -> Refusal | None:
    """A job that requires an interconnect has every replica on a node of one domain of it (the gang
    could not form otherwise)."""
    if job.interconnect is None or job.interconnect is Interconnect.NONE:
        return None
    nvlink = job.interconnect is Interconnect.NVLINK
    kind = "NVLink domain" if nvlink else "RDMA fabric"
    seen: dict[str, NodeId] = {}
    for replica in replicas:
        spec = nodes[replica.node].spec
        domain = spec.nvlink_domain if nvlink else spec.rdma_fabric
        if not domain:
            return Refusal(
                R.INTERCONNECT_UNAVAILABLE,
                f"replica {replica.replica} on node {replica.node}: the job requires one {kind}; the node is on none",
                replica.node,
            )
        seen.setdefault(domain, replica.node)
    if len(seen) > 1:
        spans = ", ".join(f"{d} ({n})" for d, n in sorted(seen.items()))
        return Refusal(R.INTERCONNECT_UNAVAILABLE, f"the job requires one {kind}; the placement spans {spans}")
    return None


def _check_replica(
    replica: ReplicaPlacement, job: JobSpec, nodes: Mapping[NodeId, NodeState], taken: _Tentative
) -> Refusal | None:
    node = nodes.get(replica.node)
    where = f"replica {replica.replica} on node {replica.node}"
    if node is None:
        return Refusal(R.NO_FEASIBLE_NODE, f"{where}: no such node in this cluster", replica.node)
    for check in (_node_usable, _shape, _gpu_kind, _gpu_devices, _capacity):
        refusal = check(replica, job, node, taken)
        if refusal is not None:
            return Refusal(refusal.reason, f"{where}: {refusal.message}", node.name)
    return None


def _node_usable(replica: ReplicaPlacement, job: JobSpec, node: NodeState, taken: _Tentative) -> Refusal | None:
    if node.removed:
        return Refusal(R.NODE_LOST, "the node is lost (not reporting)")
    if not node.schedulable:
        return Refusal(R.NODE_UNSCHEDULABLE, "the node is cordoned")
    for taint in node.spec.taints:
        if taint.effect is TaintEffect.PREFER_NO_SCHEDULE:
            continue
        if not any(_tolerates(t, taint.key, taint.value, taint.effect) for t in job.tolerations):
            return Refusal(R.TAINT_NOT_TOLERATED, f"taint {taint.key}={taint.value}:{taint.effect} is not tolerated")
    return None


def _tolerates(toleration: Toleration, key: str, value: str, effect: TaintEffect) -> bool:
    return (
        toleration.key == key
        and (toleration.value is None or toleration.value == value)
        and (toleration.effect is None or toleration.effect is effect)
    )


def _shape(replica: ReplicaPlacement, job: JobSpec, node: NodeState, taken: _Tentative) -> Refusal | None:
    res = job.resources
    indices = len(replica.gpu_indices)
    if res.gpus and (indices != res.gpus or replica.gpu_milli_each != 1000):
        return Refusal(
            R.LAUNCH_FAILED,
            f"the job asks {res.gpus} whole GPUs; the placement gives {indices} x {replica.gpu_milli_each} milli-GPU",
        )
    if res.gpu_milli and (indices != 1 or replica.gpu_milli_each < res.gpu_milli):
        return Refusal(
            R.LAUNCH_FAILED,
            f"the job asks {res.gpu_milli} milli-GPU of one GPU; the placement gives "
            f"{indices} x {replica.gpu_milli_each}",
        )
    if not res.total_gpu_milli() and indices:
        return Refusal(R.LAUNCH_FAILED, f"the job asks no GPU; the placement gives {indices}")
    if len(replica.npu_indices) != res.npus:
        return Refusal(R.LAUNCH_FAILED, f"the job asks {res.npus} NPUs; the placement gives {len(replica.npu_indices)}")
    return None


def _gpu_kind(replica: ReplicaPlacement, job: JobSpec, node: NodeState, taken: _Tentative) -> Refusal | None:
    res = job.resources
    if not replica.gpu_indices:
        return None
    model = node.spec.gpu_model
    if res.gpu_models and model not in res.gpu_models:
        allowed = ", ".join(res.gpu_models)
        return Refusal(R.GPU_MODEL_UNAVAILABLE, f"the node has {model or 'no'} GPUs; the job allows only {allowed}")
    if node.spec.gpu_memory_mib < res.min_gpu_memory_mib:
        return Refusal(
            R.GPU_MEMORY_TOO_SMALL,
            f"{model} has {node.spec.gpu_memory_mib} MiB; the job needs at least {res.min_gpu_memory_mib} MiB per GPU",
        )
    return None


def _gpu_devices(replica: ReplicaPlacement, job: JobSpec, node: NodeState, taken: _Tentative) -> Refusal | None:
    for index in replica.gpu_indices:
        if index >= node.spec.gpus:
            return Refusal(R.LAUNCH_FAILED, f"GPU {index} does not exist (the node has {node.spec.gpus})")
        if node.gpu_faults[index]:
            return Refusal(R.GPU_UNHEALTHY, f"GPU {index} has failed")
    for index in replica.npu_indices:
        if index >= node.spec.npus:
            return Refusal(R.LAUNCH_FAILED, f"NPU {index} does not exist (the node has {node.spec.npus})")
        if node.npu_faults[index]:
            return Refusal(R.GPU_UNHEALTHY, f"NPU {index} has failed")
    return None


def _capacity(replica: ReplicaPlacement, job: JobSpec, node: NodeState, taken: _Tentative) -> Refusal | None:
    name, res = node.name, job.resources
    for index in replica.gpu_indices:
        used = node.gpu_milli[index] + taken.gpu[(name, index)]
        if used + replica.gpu_milli_each > 1000:
            code = R.INSUFFICIENT_GPU if replica.gpu_milli_each == 1000 else R.INSUFFICIENT_GPU_SHARE
            return Refusal(
                code, f"GPU {index} has {1000 - used} milli-GPU free; the placement takes {replica.gpu_milli_each}"
            )
        taken.gpu[(name, index)] += replica.gpu_milli_each
    for index in replica.npu_indices:
        if node.npu_used[index] or taken.npu[(name, index)]:
            return Refusal(R.INSUFFICIENT_NPU, f"NPU {index} is already taken")
        taken.npu[(name, index)] += 1
    free_cpu = node.spec.cpu_milli - node.cpu_milli - taken.cpu[name]
    if res.cpu_milli > free_cpu:
        return Refusal(R.INSUFFICIENT_CPU, f"{free_cpu} milli-CPU free; the replica asks {res.cpu_milli}")
    free_memory = node.spec.memory_mib - node.memory_mib - taken.memory[name]
    if res.memory_mib > free_memory:
        return Refusal(R.INSUFFICIENT_MEMORY, f"{free_memory} MiB of memory free; the replica asks {res.memory_mib}")
    taken.cpu[name] += res.cpu_milli
    taken.memory[name] += res.memory_mib
    return None


__all__ = ["Refusal", "check_added", "check_placement"]
