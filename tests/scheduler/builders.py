"""Test builders: ``a_job().gpus(4).tenant("t")``, ``a_node("n1").model("A100")``, ``a_fleet(...)``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from events.catalog.jobs import Interconnect, JobKind, PriorityClass
from events.catalog.types import ClusterId, JobId, NodeId, TenantId
from services.scheduler.core.policy import (
    Cluster,
    FleetSnapshot,
    Gpu,
    Health,
    Job,
    Node,
    Npu,
    PolicyConfig,
    Quota,
    ReplicaPlacement,
    RunningJob,
    Tenant,
)

_counter = iter(range(1, 10**9))


class JobBuilder:
    def __init__(self, job_id: str | None = None) -> None:
        self._j = Job(job_id=JobId(job_id or f"job-{next(_counter):04d}"), tenant=TenantId("team-a"), cpu_milli=1000)

    def _set(self, **kw: Any) -> JobBuilder:
        self._j = replace(self._j, **kw)
        return self

    def id(self, job_id: str) -> JobBuilder:
        return self._set(job_id=JobId(job_id))

    def tenant(self, t: str) -> JobBuilder:
        return self._set(tenant=TenantId(t))

    def queue(self, q: str) -> JobBuilder:
        return self._set(queue=q)

    def gpus(self, n: int) -> JobBuilder:
        return self._set(gpus=n, gpu_milli=0)

    def share(self, milli: int) -> JobBuilder:
        return self._set(gpus=0, gpu_milli=milli)

    def cpu(self, milli: int) -> JobBuilder:
        return self._set(cpu_milli=milli)

    def memory(self, mib: int) -> JobBuilder:
        return self._set(memory_mib=mib)

    def models(self, *m: str) -> JobBuilder:
        return self._set(gpu_models=tuple(m))

    def min_gpu_memory(self, mib: int) -> JobBuilder:
        return self._set(min_gpu_memory_mib=mib)

    def replicas(self, n: int, gang: bool = True) -> JobBuilder:
        return self._set(replicas=n, gang=gang)

    def priority(self, p: PriorityClass) -> JobBuilder:
        return self._set(priority_class=p)

    def kind(self, k: JobKind) -> JobBuilder:
        return self._set(kind=k)

    def nvlink(self, required: bool = False) -> JobBuilder:
        return self._set(interconnect=Interconnect.NVLINK, interconnect_required=required)

    def rdma(self, required: bool = False) -> JobBuilder:
        return self._set(interconnect=Interconnect.RDMA, interconnect_required=required)

    def datasets(self, *ds: str) -> JobBuilder:
        return self._set(datasets=tuple(ds))

    def submitted(self, ms: int) -> JobBuilder:
        return self._set(submitted_at_ms=ms)

    def runtime(self, expected_s: int | None = None, max_s: int | None = None) -> JobBuilder:
        return self._set(expected_runtime_s=expected_s, max_runtime_s=max_s)

    def tolerates(self, key: str, value: str | None = None, effect: str | None = None) -> JobBuilder:
        return self._set(tolerations=tuple(sorted((*self._j.tolerations, (key, value, effect)), key=str)))

    def min_replicas(self, n: int) -> JobBuilder:
        return self._set(min_replicas=n)

    def not_preemptible(self) -> JobBuilder:
        return self._set(preemptible=False)

    def preempted(self, times: int) -> JobBuilder:
        return self._set(times_preempted=times)

    def npus(self, n: int, *models: str, min_memory_mib: int = 0) -> JobBuilder:
        return self._set(npus=n, npu_models=tuple(models), min_npu_memory_mib=min_memory_mib)

    def build(self) -> Job:
        return self._j


def a_job(job_id: str | None = None) -> JobBuilder:
    return JobBuilder(job_id)


class NodeBuilder:
    def __init__(self, node_id: str) -> None:
        self._n = Node(
            node_id=NodeId(node_id),
            cluster=ClusterId("cluster-a"),
            cpu_milli=64000,
            memory_mib=256_000,
            cpu_free_milli=64000,
            memory_free_mib=256_000,
            gpu_model="A100",
            gpu_memory_mib=81920,
            gpus=tuple(Gpu(i) for i in range(8)),
        )

    def _set(self, **kw: Any) -> NodeBuilder:
        self._n = replace(self._n, **kw)
        return self

    def cluster(self, c: str) -> NodeBuilder:
        return self._set(cluster=ClusterId(c))

    def model(self, m: str, memory_mib: int = 81920) -> NodeBuilder:
        return self._set(gpu_model=m, gpu_memory_mib=memory_mib)

    def gpus(self, n: int, free: tuple[int, ...] | None = None) -> NodeBuilder:
        free = free or tuple(1000 for _ in range(n))
        return self._set(gpus=tuple(Gpu(i, free[i]) for i in range(n)))

    def gpu_health(self, index: int, health: Health) -> NodeBuilder:
        gs = tuple(replace(g, health=health) if g.index == index else g for g in self._n.gpus)
        return self._set(gpus=gs)

    def cpu(self, cap: int, free: int | None = None) -> NodeBuilder:
        return self._set(cpu_milli=cap, cpu_free_milli=cap if free is None else free)

    def memory(self, cap: int, free: int | None = None) -> NodeBuilder:
        return self._set(memory_mib=cap, memory_free_mib=cap if free is None else free)

    def cordoned(self) -> NodeBuilder:
        return self._set(schedulable=False)

    def tainted(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        return self._set(taints=tuple(sorted((*self._n.taints, (key, value, effect)))))

    def domain(self, d: str) -> NodeBuilder:
        """Its NVLink domain."""
        return self._set(nvlink_domain=d)

    def fabric(self, f: str) -> NodeBuilder:
        """Its RDMA fabric."""
        return self._set(rdma_fabric=f)

    def npus(
        self, n: int, model: str = "Ascend910B", memory_mib: int = 65536, taken: tuple[int, ...] = ()
    ) -> NodeBuilder:
        """``n`` NPUs of one model (``taken``: indices already held by running jobs)."""
        return self._set(npus=tuple(Npu(i, model, memory_mib, free=i not in taken) for i in range(n)))

    def npu_health(self, index: int, health: Health) -> NodeBuilder:
        return self._set(npus=tuple(replace(u, health=health) if u.index == index else u for u in self._n.npus))

    def no_gpus(self) -> NodeBuilder:
        return self._set(gpus=(), gpu_model="", gpu_memory_mib=0)

    def cards(self, *cards: tuple[str, int]) -> NodeBuilder:
        """GPUs of their own models and memory (a mixed node): (model, memory MiB) per card, by index."""
        first = cards[0] if cards else ("", 0)
        gpus = tuple(Gpu(i, model=m, memory_mib=mem) for i, (m, mem) in enumerate(cards))
        return self._set(gpus=gpus, gpu_model=first[0], gpu_memory_mib=first[1])

    def build(self) -> Node:
        return self._n


def a_node(node_id: str) -> NodeBuilder:
    return NodeBuilder(node_id)


def running(job: Job, cluster: str, *placements: tuple[str, tuple[int, ...], int], started_ms: int = 0) -> RunningJob:
    return RunningJob(
        job=job,
        cluster=ClusterId(cluster),
        placements=tuple(ReplicaPlacement(NodeId(n), g, m) for n, g, m in placements),
        started_at_ms=started_ms,
    )


def running_on_npus(
    job: Job, cluster: str, *placements: tuple[str, tuple[int, ...]], started_ms: int = 0
) -> RunningJob:
    """A running job holding whole NPUs: (node, NPU indices) per replica (its nodes list them as taken)."""
    return RunningJob(
        job=job,
        cluster=ClusterId(cluster),
        placements=tuple(ReplicaPlacement(NodeId(n), npu_indices=u) for n, u in placements),
        started_at_ms=started_ms,
    )


def tenant(t: str, *quotas: Quota, cohort: str = "", weight: int = 1, hot_cap: int | None = None) -> Tenant:
    return Tenant(TenantId(t), weight=weight, cohort=cohort, quotas=quotas, hot_model_cap_milli=hot_cap)


def snapshot(
    nodes: list[Node],
    pending: list[Job] = (),  # type: ignore[assignment]
    running_jobs: list[RunningJob] = (),  # type: ignore[assignment]
    tenants: list[Tenant] = (),  # type: ignore[assignment]
    clusters: list[Cluster] | None = None,
    now_ms: int = 1_000_000,
) -> FleetSnapshot:
    cids = sorted({n.cluster for n in nodes})
    return FleetSnapshot(
        now_ms=now_ms,
        clusters=tuple(clusters) if clusters is not None else tuple(Cluster(c) for c in cids),
        nodes=tuple(nodes),
        tenants=tuple(tenants),
        running=tuple(running_jobs),
        pending=tuple(pending),
    )


def config(**kw: Any) -> PolicyConfig:
    return PolicyConfig(**kw)
