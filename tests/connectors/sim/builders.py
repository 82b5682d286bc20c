"""Builders for the simulated-cluster tests: nodes, clusters, jobs, placements, and a driver that plays
a story against the pure model in simulated seconds (``sim.at(10).place(...)``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Self

from connectors.sim import ClusterModel, ClusterSpec, Emit, History, NodeSpec, SimConfig
from events.catalog.base import Event
from events.catalog.decisions import (
    CandidateScore,
    JobPlaced,
    JobPreemptionRequested,
    JobReclaimRequested,
    JobReplicasAdded,
    ReclaimFigures,
    ReplicaPlacement,
)
from events.catalog.inventory import Taint
from events.catalog.jobs import InferenceSpec, Interconnect, JobCancelRequested, JobKind, JobSubmitted, Toleration
from events.catalog.types import ClusterId, JobId, NodeId, Resources, TaintEffect, TenantId
from events.wire.envelope import Envelope

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
T0 = 1_767_225_600_000
"""2026-01-01T00:00:00Z: simulated time zero of the stories."""
CLUSTER = "sim-test"
SOURCE = f"urn:fedsched:connector:sim:{CLUSTER}"


@dataclass
class NodeBuilder:
    name: str
    cpu_milli: int = 64_000
    memory_mib: int = 262_144
    gpu_count: int = 8
    model: str = "A100-SXM4-80GB"
    gpu_memory_mib: int = 81_251
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True
    fabric: str | None = None
    npu_count: int = 0
    npu_model: str = "Ascend910B"
    npu_memory_mib: int = 65_536

    def npus(self, count: int, model: str | None = None) -> Self:
        """NPUs beside its GPUs (``gpus(0)`` for a node of NPUs alone)."""
        self.npu_count = count
        self.npu_model = model or self.npu_model
        return self

    def on_fabric(self, name: str) -> Self:
        self.fabric = name
        return self

    def gpus(self, count: int, model: str | None = None, memory_mib: int | None = None) -> Self:
        self.gpu_count = count
        self.model = model or self.model
        self.gpu_memory_mib = memory_mib if memory_mib is not None else self.gpu_memory_mib
        return self

    def cpu(self, milli: int) -> Self:
        self.cpu_milli = milli
        return self

    def memory(self, mib: int) -> Self:
        self.memory_mib = mib
        return self

    def tainted(self, key: str, value: str = "", effect: TaintEffect = TaintEffect.NO_SCHEDULE) -> Self:
        self.taints += (Taint(key=key, value=value, effect=effect),)
        return self

    def cordoned(self) -> Self:
        self.schedulable = False
        return self

    def build(self) -> NodeSpec:
        return NodeSpec(
            name=NodeId(self.name),
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpus=self.gpu_count,
            gpu_model=self.model if self.gpu_count else "",
            gpu_memory_mib=self.gpu_memory_mib if self.gpu_count else 0,
            npus=self.npu_count,
            npu_model=self.npu_model if self.npu_count else "",
            npu_memory_mib=self.npu_memory_mib if self.npu_count else 0,
            taints=self.taints,
            schedulable=self.schedulable,
            rdma_fabric=self.fabric,
        )


def a_node(name: str = "node-0") -> NodeBuilder:
    return NodeBuilder(name)


def a_cluster(*nodes: NodeBuilder | NodeSpec, name: str = CLUSTER) -> ClusterSpec:
    built = [n.build() if isinstance(n, NodeBuilder) else n for n in nodes] or [a_node().build()]
    return ClusterSpec.build(name, built)


@dataclass
class JobBuilder:
    job_id: str
    tenant: str = "team-a"
    job_kind: JobKind = JobKind.TRAINING
    replica_count: int = 1
    is_gang: bool = False
    resources: dict[str, object] = field(default_factory=lambda: {"cpu_milli": 4000, "memory_mib": 16_384})
    runtime_s: int | None = 600
    max_runtime_s: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    rdma_required: bool = False
    inference: InferenceSpec | None = None

    def spread(self, clusters: int) -> Self:
        """An inference service whose run may hold replicas in up to ``clusters`` clusters."""
        self.inference = InferenceSpec(spread_clusters=clusters)
        return self.kind(JobKind.INFERENCE)

    def requires_rdma(self) -> Self:
        self.rdma_required = True
        return self

    def gpus(self, count: int) -> Self:
        self.resources["gpus"] = count
        return self

    def npus(self, count: int) -> Self:
        self.resources["npus"] = count
        return self

    def share(self, milli: int) -> Self:
        self.resources["gpu_milli"] = milli
        return self

    def cpu(self, milli: int) -> Self:
        self.resources["cpu_milli"] = milli
        return self

    def memory(self, mib: int) -> Self:
        self.resources["memory_mib"] = mib
        return self

    def models(self, *models: str) -> Self:
        self.resources["gpu_models"] = models
        return self

    def min_gpu_memory(self, mib: int) -> Self:
        self.resources["min_gpu_memory_mib"] = mib
        return self

    def runtime(self, seconds: int | None) -> Self:
        self.runtime_s = seconds
        return self

    def max_runtime(self, seconds: int) -> Self:
        self.max_runtime_s = seconds
        return self

    def kind(self, kind: JobKind) -> Self:
        self.job_kind = kind
        return self

    def notebook(self) -> Self:
        return self.kind(JobKind.NOTEBOOK).runtime(None)

    def replicas(self, count: int, *, gang: bool = False) -> Self:
        self.replica_count, self.is_gang = count, gang
        return self

    def label(self, key: str, value: str) -> Self:
        self.labels[key] = value
        return self

    def tolerates(self, key: str, value: str | None = None) -> Self:
        self.tolerations += (Toleration(key=key, value=value),)
        return self

    def submitted(self) -> JobSubmitted:
        return JobSubmitted(
            job_id=JobId(self.job_id),
            name=self.job_id,
            tenant=TenantId(self.tenant),
            kind=self.job_kind,
            replicas=self.replica_count,
            gang=self.is_gang,
            resources=Resources(**self.resources),  # type: ignore[arg-type]
            expected_runtime_s=self.runtime_s,
            max_runtime_s=self.max_runtime_s,
            labels=self.labels,
            tolerations=self.tolerations,
            interconnect=Interconnect.RDMA if self.rdma_required else Interconnect.NONE,
            interconnect_required=self.rdma_required,
            inference=self.inference,
        )


def a_job(job_id: str = "job-1") -> JobBuilder:
    return JobBuilder(job_id)


@dataclass
class PlacementBuilder:
    job_id: str
    cluster_id: str = CLUSTER
    run_number: int = 1
    replicas: list[ReplicaPlacement] = field(default_factory=list)

    def on(self, node: str, *gpus: int, milli: int = 1000, npus: Sequence[int] = ()) -> Self:
        self.replicas.append(
            ReplicaPlacement(
                replica=len(self.replicas),
                node=NodeId(node),
                gpu_indices=tuple(gpus),
                gpu_milli_each=milli if gpus else 0,
                npu_indices=tuple(npus),
            )
        )
        return self

    def run(self, number: int) -> Self:
        self.run_number = number
        return self

    def cluster(self, cluster: str) -> Self:
        self.cluster_id = cluster
        return self

    def placed(self) -> JobPlaced:
        return JobPlaced(
            job_id=JobId(self.job_id),
            cycle_id="cycle-1",
            cluster=ClusterId(self.cluster_id),
            run=self.run_number,
            replicas=tuple(self.replicas),
            chosen=CandidateScore(cluster=ClusterId(self.cluster_id), total=0),
            explanation="test placement",
        )


def a_placement(job_id: str = "job-1") -> PlacementBuilder:
    return PlacementBuilder(job_id)


def replicas_added(
    job_id: str, first: int, *on: tuple[str, tuple[int, ...]], run: int = 1, cluster: str = CLUSTER
) -> JobReplicasAdded:
    """A top-up of run ``run`` in ``cluster``: replicas numbered from ``first``, one per (node, GPU
    indices); the run holds every number below the last one added (in this cluster or others)."""
    replicas = tuple(
        ReplicaPlacement(replica=first + i, node=NodeId(node), gpu_indices=gpus, gpu_milli_each=1000 if gpus else 0)
        for i, (node, gpus) in enumerate(on)
    )
    return JobReplicasAdded(
        job_id=JobId(job_id),
        cycle_id="cycle-2",
        cluster=ClusterId(cluster),
        run=run,
        replicas=replicas,
        running_replicas=first + len(replicas),
        chosen=CandidateScore(cluster=ClusterId(cluster), total=0),
        explanation="test top-up",
    )


def cancel_request(job_id: str) -> JobCancelRequested:
    return JobCancelRequested(job_id=JobId(job_id), requester="alice@example.com", reason="no longer needed")


def preemption_request(job_id: str, run: int = 1, grace_s: int = 30, cluster: str = CLUSTER) -> JobPreemptionRequested:
    return JobPreemptionRequested(
        job_id=JobId(job_id), cycle_id="cycle-2", cluster=ClusterId(cluster), run=run, rule="priority",
        grace_period_s=grace_s,
    )  # fmt: skip


def reclaim_request(job_id: str, run: int = 1, grace_s: int = 30, cluster: str = CLUSTER) -> JobReclaimRequested:
    figures = ReclaimFigures(
        borrower_guaranteed_milli=0, borrower_used_milli=1000, lender=TenantId("team-b"), lender_guaranteed_milli=8000,
        lender_used_milli=0, lender_pending_milli=1000, reclaimed_milli=1000,
    )  # fmt: skip
    return JobReclaimRequested(
        job_id=JobId(job_id), cycle_id="cycle-3", cluster=ClusterId(cluster), run=run, tenant=TenantId("team-a"),
        rule="reclaim-idle", figures=figures, grace_period_s=grace_s,
    )  # fmt: skip


_counter = iter(range(1, 10**9))


def envelope(event: Event, *, source: str = "urn:test", time_ms: int = T0) -> Envelope:
    return Envelope(id=f"in-{next(_counter)}", time_ms=time_ms, data=event, source=source)


class Story:
    """Plays inputs against a ``ClusterModel`` at given simulated seconds and keeps every event."""

    def __init__(self, spec: ClusterSpec | None = None, config: SimConfig | None = None, *, begin: bool = True) -> None:
        self.spec = spec or a_cluster()
        self.config = config or SimConfig(start_delay_s=5, stop_delay_s=2)
        self.model = ClusterModel(self.spec, self.config, source=SOURCE)
        self.inputs: list[Envelope] = []
        self.emitted: list[Emit] = []
        self.now_ms = T0
        if begin:
            self.model.restore(History(self.spec.cluster, SOURCE))
            self.emitted += self.model.begin(T0)

    def at(self, seconds: float) -> Self:
        """Advance to ``seconds`` after the start, firing everything due on the way."""
        self.now_ms = T0 + round(seconds * 1000)
        self.emitted += self.model.advance(self.now_ms)
        return self

    def send(self, *events: Event) -> Self:
        for event in events:
            env = envelope(event, time_ms=self.now_ms)
            self.inputs.append(env)
            self.emitted += self.model.advance(self.now_ms)
            self.emitted += self.model.handle(env, self.now_ms)
            self.emitted += self.model.advance(self.now_ms)
        return self

    def submit(self, *jobs: JobBuilder) -> Self:
        return self.send(*(j.submitted() for j in jobs))

    def place(self, *placements: PlacementBuilder) -> Self:
        return self.send(*(p.placed() for p in placements))

    def start(self, job: JobBuilder, placement: PlacementBuilder) -> Self:
        return self.submit(job).place(placement)

    def events(self, kind: type[Event], job: str | None = None) -> list[Emit]:
        return [e for e in self.emitted if isinstance(e.event, kind) and (job is None or _job(e.event) == job)]

    def seconds(self, emit: Emit) -> float:
        return (emit.time_ms - T0) / 1000

    def envelopes(self) -> list[Envelope]:
        """What the model published, as the log would give it back (for restore tests)."""
        return [Envelope(id=e.id, time_ms=e.time_ms, data=e.event, source=SOURCE) for e in self.emitted]


def _job(event: Event) -> str | None:
    return getattr(event, "job_id", None)


def with_config(story_config: SimConfig, **changes: object) -> SimConfig:
    return replace(story_config, **changes)  # type: ignore[arg-type]
