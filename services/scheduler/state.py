"""What the scheduler knows, folded from the log, and the fleet snapshot it decides on.

Called by the scheduler host (live) and by ``fedsched audit verify`` (replay). Pure: no I/O, clock or
randomness; only ``events`` and the policy core's model.

The fold is written so that its result does not depend on how records of *different* partitions
interleave, only on which records were folded: every entity's facts live in one partition (nodes,
tenants, policies) or are kept as sets keyed by run (a job's placements come from the decisions topic,
its lifecycle from the jobs topic). So the live scheduler, folding records as they arrive, and a
replay, folding the same records in (topic, partition, offset) order, reach the same state: that is
what makes every recorded cycle re-executable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from events.catalog.base import Event
from events.catalog.decisions import (
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReclaimRequested,
    SchedulingCycleCompleted,
)
from events.catalog.governance import GovernanceFinding, PolicyConfigured, QuotaSet, TenantRegistered
from events.catalog.inventory import (
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuHealthReported,
    NodeObserved,
    NodeRemoved,
)
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobPreempted,
    JobReclaimed,
    JobRejected,
    JobSubmitted,
    JobSucceeded,
)
from events.catalog.profiles import ResourceProfileUpdated
from events.catalog.types import ClusterId, JobId, NodeId, ResourceKind, TenantId
from events.envelope import Envelope
from services.scheduler.policy import model as m

_MILLI = 1000


@dataclass(slots=True)
class JobFacts:
    """Everything known of one job, as sets of facts keyed by run (order-independent)."""

    spec: JobSubmitted | None = None
    submitted_ms: int = 0
    placements: dict[int, JobPlaced] = field(default_factory=dict)
    placed_at: dict[int, int] = field(default_factory=dict)
    ended: dict[int, str] = field(default_factory=dict)  # run -> succeeded/failed/preempted/reclaimed/cancelled
    ended_at: dict[int, int] = field(default_factory=dict)
    terminal: str = ""
    cancel_requested: bool = False
    stop_requested: set[int] = field(default_factory=set)  # runs asked to stop (preempt / reclaim)
    last_queued: tuple[str, ...] = ()  # reason codes of the latest JobQueued

    def current_run(self) -> int:
        return max(self.placements, default=0)

    def running_placement(self) -> JobPlaced | None:
        run = self.current_run()
        if run and run not in self.ended and not self.terminal:
            return self.placements[run]
        return None

    def pending(self) -> bool:
        if self.spec is None or self.terminal or self.cancel_requested:
            return False
        return self.running_placement() is None

    def times_preempted(self) -> int:
        return sum(1 for how in self.ended.values() if how in ("preempted", "reclaimed"))


SUSPECT_FOR_MS = 24 * 3600 * 1000


@dataclass(slots=True)
class NodeFacts:
    observed: NodeObserved | None = None
    removed_generation: int = -1
    gpu_health: dict[int, str] = field(default_factory=dict)
    suspect_until_ms: int = 0
    """Governance found jobs failing on this node: until then its healthy GPUs count as degraded, so
    placement steers work elsewhere while the node stays usable."""


@dataclass(slots=True)
class SchedulerState:
    nodes: dict[tuple[str, str], NodeFacts] = field(default_factory=dict)
    clusters: dict[str, ClusterRegistered] = field(default_factory=dict)
    unreachable: dict[str, bool] = field(default_factory=dict)
    congestion: dict[str, tuple[int, int]] = field(default_factory=dict)  # cluster -> (version, milli)
    tenants: dict[str, TenantRegistered] = field(default_factory=dict)
    quotas: dict[tuple[str, str], QuotaSet] = field(default_factory=dict)
    policy: PolicyConfigured | None = None
    jobs: dict[str, JobFacts] = field(default_factory=dict)
    cycles: int = 0
    events: int = 0
    _now_ms: int = 0

    # -- fold ------------------------------------------------------------------------------------

    def fold(self, envelope: Envelope) -> None:
        self.events += 1
        data = envelope.data
        handler = _HANDLERS.get(type(data))
        if handler is not None:
            handler(self, data, envelope.time_ms)

    def job(self, job_id: str) -> JobFacts:
        facts = self.jobs.get(job_id)
        if facts is None:
            facts = self.jobs[job_id] = JobFacts()
        return facts

    # -- snapshot --------------------------------------------------------------------------------

    def policy_config(self) -> m.PolicyConfig:
        if self.policy is None:
            return m.PolicyConfig()
        return policy_from_document(self.policy.policy_version, self.policy.document)

    def pending_count(self) -> int:
        return sum(1 for facts in self.jobs.values() if facts.pending())

    def snapshot(self, now_ms: int) -> m.FleetSnapshot:
        self._now_ms = now_ms
        running = []
        used_gpu: dict[tuple[str, str], dict[int, int]] = {}
        used_cpu: dict[tuple[str, str], tuple[int, int]] = {}
        for job_id in sorted(self.jobs):
            facts = self.jobs[job_id]
            placed = facts.running_placement()
            if placed is None or facts.spec is None:
                continue
            job = job_model(job_id, facts)
            replicas = tuple(
                m.ReplicaPlacement(NodeId(r.node), tuple(r.gpu_indices), r.gpu_milli_each) for r in placed.replicas
            )
            running.append(m.RunningJob(job, ClusterId(placed.cluster), replicas, facts.submitted_ms))
            for replica in placed.replicas:
                key = (placed.cluster, replica.node)
                gpus = used_gpu.setdefault(key, {})
                for index in replica.gpu_indices:
                    gpus[index] = gpus.get(index, 0) + replica.gpu_milli_each
                cpu, mem = used_cpu.get(key, (0, 0))
                used_cpu[key] = (cpu + job.cpu_milli, mem + job.memory_mib)
        nodes = [
            self._node(key, facts, used_gpu.get(key, {}), used_cpu.get(key, (0, 0)))
            for key, facts in sorted(self.nodes.items())
        ]
        pending = tuple(job_model(job_id, facts) for job_id, facts in sorted(self.jobs.items()) if facts.pending())
        return m.FleetSnapshot(
            now_ms=now_ms,
            clusters=tuple(self._cluster(c) for c in sorted(self.clusters)),
            nodes=tuple(n for n in nodes if n is not None),
            tenants=self._tenants(now_ms),
            running=tuple(running),
            pending=pending,
        )

    def _node(
        self, key: tuple[str, str], facts: NodeFacts, used: dict[int, int], cpu_mem: tuple[int, int]
    ) -> m.Node | None:
        observed = facts.observed
        if observed is None or facts.removed_generation >= observed.generation:
            return None
        gpus = []
        suspect = self._now_ms < facts.suspect_until_ms
        for device in observed.gpus:
            health = facts.gpu_health.get(device.index, device.health.value)
            if suspect and health == m.Health.OK.value:
                health = m.Health.DEGRADED.value
            gpus.append(m.Gpu(device.index, max(0, _MILLI - used.get(device.index, 0)), m.Health(health)))
        schedulable = observed.schedulable and not self.unreachable.get(key[0], False)
        return m.Node(
            node_id=NodeId(key[1]),
            cluster=ClusterId(key[0]),
            cpu_milli=observed.cpu_milli,
            memory_mib=observed.memory_mib,
            cpu_free_milli=max(0, observed.cpu_milli - cpu_mem[0]),
            memory_free_mib=max(0, observed.memory_mib - cpu_mem[1]),
            gpu_model=observed.gpus[0].model if observed.gpus else "",
            gpu_memory_mib=observed.gpus[0].memory_mib if observed.gpus else 0,
            gpus=tuple(gpus),
            schedulable=schedulable,
            domain=observed.nvlink_domain or observed.rdma_fabric or "",
        )

    def _cluster(self, cluster_id: str) -> m.Cluster:
        registered = self.clusters[cluster_id]
        rates = [rate.micro_per_gpu_hour for rate in registered.gpu_rates]
        return m.Cluster(
            cluster_id=ClusterId(cluster_id),
            datasets=tuple(sorted(registered.datasets)),
            congestion_milli=self.congestion.get(cluster_id, (0, 0))[1],
            cost_milli_per_gpu_hour=(sum(rates) // len(rates) // 1000) if rates else 0,
        )

    def _tenants(self, now_ms: int) -> tuple[m.Tenant, ...]:
        names = sorted(set(self.tenants) | {tenant for tenant, _ in self.quotas})
        usage: dict[str, list[m.UsageRecord]] = {}
        for facts in self.jobs.values():
            if facts.spec is None:
                continue
            for run in sorted(facts.ended):
                placed = facts.placements.get(run)
                if placed is None:
                    continue
                milli = sum(len(r.gpu_indices) * r.gpu_milli_each for r in placed.replicas)
                start, end = facts.placed_at.get(run, 0), facts.ended_at.get(run, 0)
                usage.setdefault(facts.spec.tenant, []).append(m.UsageRecord(end, milli * max(0, end - start)))
        out = []
        for name in names:
            registered = self.tenants.get(name)
            quotas = []
            for (tenant, queue), quota_set in sorted(self.quotas.items()):
                if tenant != name:
                    continue
                for line in quota_set.lines:
                    resource = line.resource.value
                    if line.resource is ResourceKind.GPU and line.gpu_model:
                        resource = f"gpu:{line.gpu_model}"
                    limit = line.limit if line.limit is not None else 2**62
                    quotas.append(m.Quota(resource, line.guaranteed, limit, "" if queue == "default" else queue))
            out.append(
                m.Tenant(
                    tenant_id=TenantId(name),
                    weight=registered.weight if registered else 1,
                    cohort=(registered.cohort or "") if registered else "",
                    quotas=tuple(quotas),
                    usage=tuple(sorted(usage.get(name, []), key=lambda u: (u.at_ms, u.gpu_milli_ms))),
                )
            )
        return tuple(out)


def job_model(job_id: str, facts: JobFacts) -> m.Job:
    spec = facts.spec
    assert spec is not None
    r = spec.resources
    return m.Job(
        job_id=JobId(job_id),
        tenant=spec.tenant,
        queue=spec.queue,
        kind=spec.kind,
        priority_class=spec.priority_class,
        replicas=spec.replicas,
        gang=spec.gang,
        cpu_milli=r.cpu_milli,
        memory_mib=r.memory_mib,
        gpus=r.gpus,
        gpu_milli=r.gpu_milli,
        gpu_models=tuple(sorted(r.gpu_models)),
        min_gpu_memory_mib=r.min_gpu_memory_mib,
        interconnect=spec.interconnect,
        datasets=tuple(sorted(spec.datasets)),
        preemptible=spec.preemptible,
        expected_runtime_s=spec.expected_runtime_s,
        max_runtime_s=spec.max_runtime_s,
        submitted_at_ms=facts.submitted_ms,
        times_preempted=facts.times_preempted(),
    )


def policy_from_document(version: str, document: Any) -> m.PolicyConfig:
    """The policy configuration from a ``PolicyConfigured`` document; unknown keys are refused."""
    doc = json.loads(json.dumps(document))  # a plain, detached copy
    base = m.PolicyConfig()
    known = {name for name in base.__dataclass_fields__ if name not in ("version",)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ValueError(f"policy document has unknown settings: {unknown}")
    if "node_policy" in doc:
        doc["node_policy"] = m.NodePolicy(doc["node_policy"])
    if "cluster_weights" in doc:
        doc["cluster_weights"] = m.ClusterWeights(**doc["cluster_weights"])
    if "typical_shapes" in doc:
        doc["typical_shapes"] = tuple(
            m.Shape(**{**s, "models": tuple(s.get("models", ()))}) for s in doc["typical_shapes"]
        )
    return m.PolicyConfig(version=version, **doc)


# -- handlers: each touches one entity ---------------------------------------------------------------


def _node_observed(state: SchedulerState, e: NodeObserved, _: int) -> None:
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    if facts.observed is None or e.generation > facts.observed.generation:
        facts.observed = e
        facts.gpu_health = {}


def _node_removed(state: SchedulerState, e: NodeRemoved, _: int) -> None:
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    facts.removed_generation = max(facts.removed_generation, e.generation)


def _gpu_health(state: SchedulerState, e: GpuHealthReported, _: int) -> None:
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    for sample in e.gpus:
        facts.gpu_health[sample.index] = sample.health.value


def _cluster_registered(state: SchedulerState, e: ClusterRegistered, _: int) -> None:
    state.clusters[e.cluster] = e


def _cluster_status(state: SchedulerState, e: ClusterStatusChanged, _: int) -> None:
    state.unreachable[e.cluster] = e.status is not ClusterStatus.REACHABLE


def _profile(state: SchedulerState, e: ResourceProfileUpdated, _: int) -> None:
    if e.node is None and e.version > state.congestion.get(e.cluster, (0, 0))[0]:
        state.congestion[e.cluster] = (e.version, e.congestion_milli)


def _tenant(state: SchedulerState, e: TenantRegistered, _: int) -> None:
    state.tenants[e.tenant] = e


def _quota(state: SchedulerState, e: QuotaSet, _: int) -> None:
    state.quotas[(e.tenant, e.queue)] = e


def _policy(state: SchedulerState, e: PolicyConfigured, _: int) -> None:
    try:
        policy_from_document(e.policy_version, e.document)
    except (ValueError, TypeError):
        return  # an invalid policy never takes effect; the intake should have refused it
    state.policy = e


def _submitted(state: SchedulerState, e: JobSubmitted, time_ms: int) -> None:
    facts = state.job(e.job_id)
    if facts.spec is None:
        facts.spec = e
        facts.submitted_ms = time_ms


def _cancel_requested(state: SchedulerState, e: JobCancelRequested, _: int) -> None:
    state.job(e.job_id).cancel_requested = True


def _ended(how: str) -> Any:
    def handle(state: SchedulerState, e: Event, time_ms: int) -> None:
        facts = state.job(e.job_id)  # type: ignore[attr-defined]
        run = getattr(e, "run", 0)
        if how == "cancelled" and run == 0:
            facts.terminal = "cancelled"
            return
        facts.ended[run] = how
        facts.ended_at[run] = time_ms
        if how in ("succeeded", "failed", "cancelled"):
            facts.terminal = how

    return handle


def _rejected(state: SchedulerState, e: JobRejected, _: int) -> None:
    state.job(e.job_id).terminal = "rejected"


def _placed(state: SchedulerState, e: JobPlaced, time_ms: int) -> None:
    facts = state.job(e.job_id)
    facts.placements[e.run] = e
    facts.placed_at[e.run] = time_ms


def _queued(state: SchedulerState, e: JobQueued, _: int) -> None:
    state.job(e.job_id).last_queued = tuple(r.value for r in e.reasons)


def _stop_requested(state: SchedulerState, e: JobPreemptionRequested | JobReclaimRequested, _: int) -> None:
    state.job(e.job_id).stop_requested.add(e.run)


def _finding(state: SchedulerState, e: GovernanceFinding, _: int) -> None:
    if e.node is None or e.cluster is None or e.profile_penalty_milli <= 0:
        return
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    facts.suspect_until_ms = max(facts.suspect_until_ms, e.observed_ms + SUSPECT_FOR_MS)


def _cycle(state: SchedulerState, e: SchedulingCycleCompleted, _: int) -> None:
    state.cycles = max(state.cycles, e.sequence + 1)


_HANDLERS: dict[type, Any] = {
    NodeObserved: _node_observed,
    NodeRemoved: _node_removed,
    GpuHealthReported: _gpu_health,
    ClusterRegistered: _cluster_registered,
    ClusterStatusChanged: _cluster_status,
    ResourceProfileUpdated: _profile,
    TenantRegistered: _tenant,
    QuotaSet: _quota,
    PolicyConfigured: _policy,
    JobSubmitted: _submitted,
    JobCancelRequested: _cancel_requested,
    JobSucceeded: _ended("succeeded"),
    JobFailed: _ended("failed"),
    JobPreempted: _ended("preempted"),
    JobReclaimed: _ended("reclaimed"),
    JobCancelled: _ended("cancelled"),
    JobRejected: _rejected,
    JobPlaced: _placed,
    JobQueued: _queued,
    JobPreemptionRequested: _stop_requested,
    JobReclaimRequested: _stop_requested,
    SchedulingCycleCompleted: _cycle,
    GovernanceFinding: _finding,
}
