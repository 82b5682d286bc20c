"""Builders of the inventory events a simulated cluster publishes, and of its event ids.

Called by the model. Pure: no I/O.

Event ids are derived from what the event is about, never drawn: the same fact always gets the same id
(``sim:<cluster>:<job>:<run>:started``, ``sim:<cluster>:<node>:g<generation>``, ...), so a consumer can
drop a duplicate by id, and a test can compare two runs of the same seed id by id. Ids longer than the
CloudEvents attribute limit are replaced by a SHA-256 digest of the same parts.

``NodeObserved`` carries what the catalogue has no field for as labels: what is allocated on the node
(``sim.fedsched.io/allocated-cpu-milli``, ``-memory-mib``, ``-gpu-milli``, the per-GPU split in
``sim.fedsched.io/gpu-allocation`` as comma-separated milli-GPU) and the number of runs on it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from connectors.sim.config import SimConfig
from connectors.sim.faults import usage_draw
from connectors.sim.state import NodeState, Phase, Run, RunKey
from events.catalog.base import Event
from events.catalog.inventory import (
    GpuDevice,
    GpuHealthReported,
    GpuHealthSample,
    GpuUsage,
    JobUsage,
    NodeObserved,
    NodeUsageReported,
    NpuDevice,
    NpuHealthSample,
    NpuUsage,
)
from events.catalog.jobs import JobKind
from events.catalog.types import ClusterId

_MAX_ID = 200


@dataclass(frozen=True, slots=True)
class Emit:
    """One event to publish: its simulated time, derived id, and what caused it."""

    time_ms: int
    id: str
    event: Event
    tenant: str | None = None
    causation_id: str | None = None


def event_id(cluster: str, *parts: object) -> str:
    text = ":".join(("sim", cluster, *(str(p) for p in parts)))
    if len(text) <= _MAX_ID:
        return text
    return "sim:" + hashlib.sha256(text.encode()).hexdigest()


def gpu_uuid(cluster: str, node: str, index: int) -> str:
    digest = hashlib.sha256(f"{cluster}/{node}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def node_snapshot(cluster: ClusterId, node: NodeState, generation: int) -> NodeObserved:
    spec = node.spec
    labels = dict(spec.labels)
    labels["sim.fedsched.io/allocated-cpu-milli"] = str(node.cpu_milli)
    labels["sim.fedsched.io/allocated-memory-mib"] = str(node.memory_mib)
    labels["sim.fedsched.io/allocated-gpu-milli"] = str(sum(node.gpu_milli))
    split = ",".join(str(m) for m in node.gpu_milli)
    if split and len(split) <= 256:
        labels["sim.fedsched.io/gpu-allocation"] = split
    labels["sim.fedsched.io/runs"] = str(len(node.runs))
    return NodeObserved(
        cluster=cluster,
        node=spec.name,
        generation=generation,
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        gpus=tuple(
            GpuDevice(
                index=i,
                model=spec.gpu_model,
                memory_mib=spec.gpu_memory_mib,
                health=node.gpu_health(i),
                uuid=gpu_uuid(cluster, spec.name, i),
            )
            for i in range(spec.gpus)
        ),
        npus=tuple(
            NpuDevice(index=i, model=spec.npu_model, memory_mib=spec.npu_memory_mib, health=node.npu_health(i))
            for i in range(spec.npus)
        ),
        nvlink_domain=spec.nvlink_domain,
        rdma_fabric=spec.rdma_fabric,
        labels=labels,
        taints=spec.taints,
        schedulable=node.schedulable,
    )


def gpu_health(cluster: ClusterId, node: NodeState) -> GpuHealthReported:
    """The health of every GPU and NPU of the node (a node with both reports both, as a node exporter
    reads every card of a node at once)."""
    return GpuHealthReported(
        cluster=cluster,
        node=node.name,
        gpus=tuple(
            GpuHealthSample(
                index=i,
                health=node.gpu_health(i),
                xid_errors=node.xid_errors[i],
                last_xid=node.last_xid[i],
                ecc_corrected=0,
                ecc_uncorrected=node.ecc_uncorrected[i],
            )
            for i in range(node.spec.gpus)
        ),
        npus=tuple(
            NpuHealthSample(
                index=i,
                health=node.npu_health(i),
                errors=node.npu_errors[i],
                last_error_code=node.npu_last_error[i],
                hbm_ecc_uncorrected=node.npu_hbm_ecc[i],
            )
            for i in range(node.spec.npus)
        ),
    )


def node_usage(
    cluster: ClusterId, node: NodeState, runs: dict[RunKey, Run], window: int, now_ms: int, config: SimConfig
) -> NodeUsageReported:
    """What the node and each running job on it used over the window ending at ``now_ms``: its GPUs and
    NPUs, each device's utilisation and memory, and each job's. A job's NPUs are measured as its GPUs are,
    from the same draw of its run and window (so adding NPU figures changed no GPU job's)."""
    spec = node.spec
    gpu_pct = [0] * spec.gpus
    gpu_mem = [0] * spec.gpus
    npu_pct = [0] * spec.npus
    npu_mem = [0] * spec.npus
    jobs: list[JobUsage] = []
    cpu_total = mem_total = 0
    for key in node.runs:
        run = runs[key]
        if run.phase is Phase.ACCEPTED or run.started_ms is None:
            continue
        job = run.job
        idle = job.kind is JobKind.NOTEBOOK and now_ms - run.started_ms >= config.notebook_active_s * 1000
        draw = usage_draw(config, cluster, job.job_id, run.run, window, job.kind, idle)
        busy = job.utilisation_pct if job.utilisation_pct is not None else draw.utilisation_pct
        # The average over the window, as an exporter averages it: a run that started within the window
        # used its devices for part of it only (reported whole, a short job used more than it held).
        ran = min(config.usage_interval_ms, max(0, now_ms - run.started_ms))
        pct = busy * ran // config.usage_interval_ms if config.usage_interval_ms > 0 else busy
        replicas = [r for r in run.placement if r.node == spec.name]
        indices = sorted({i for r in replicas for i in r.gpu_indices})
        npu_indices = sorted({i for r in replicas for i in r.npu_indices})
        job_gpu_mem = 0
        for r in replicas:
            for i in r.gpu_indices:
                gpu_pct[i] += pct * r.gpu_milli_each // 1000
                held = spec.gpu_memory_mib * r.gpu_milli_each // 1000 * draw.memory_share_permille // 1000
                gpu_mem[i] += held
                job_gpu_mem += held
        # NPUs are taken whole: each of the job's runs at the job's utilisation and holds its share of
        # the device's memory.
        npu_held = spec.npu_memory_mib * draw.memory_share_permille // 1000
        for i in npu_indices:
            npu_pct[i] += pct
            npu_mem[i] += npu_held
        cpu = len(replicas) * job.resources.cpu_milli * max(pct, 5) // 100
        mem = len(replicas) * job.resources.memory_mib * draw.memory_share_permille // 1000
        cpu_total += cpu
        mem_total += mem
        jobs.append(
            JobUsage(
                job_id=job.job_id,
                gpu_indices=tuple(indices),
                # A job of NPUs alone has no GPU to be busy on.
                utilisation_pct=0 if npu_indices and not indices else pct,
                gpu_memory_used_mib=job_gpu_mem,
                npu_indices=tuple(npu_indices),
                npu_utilisation_pct=pct if npu_indices else 0,
                npu_memory_used_mib=npu_held * len(npu_indices),
                cpu_milli_used=cpu,
                memory_used_mib=mem,
                run=run.run,
            )
        )
    jobs.sort(key=lambda u: u.job_id)
    return NodeUsageReported(
        cluster=cluster,
        node=spec.name,
        window_ms=config.usage_interval_ms,
        cpu_milli_used=min(cpu_total, spec.cpu_milli),
        memory_used_mib=min(mem_total, spec.memory_mib),
        gpus=tuple(
            GpuUsage(
                index=i, utilisation_pct=min(100, gpu_pct[i]), memory_used_mib=min(gpu_mem[i], spec.gpu_memory_mib)
            )
            for i in range(spec.gpus)
        ),
        npus=tuple(
            NpuUsage(
                index=i, utilisation_pct=min(100, npu_pct[i]), memory_used_mib=min(npu_mem[i], spec.npu_memory_mib)
            )
            for i in range(spec.npus)
        ),
        jobs=tuple(jobs[:256]),
    )


__all__ = ["Emit", "event_id", "gpu_health", "gpu_uuid", "node_snapshot", "node_usage"]
