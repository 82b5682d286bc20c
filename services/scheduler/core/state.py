"""What the scheduler knows, folded from the log, and the fleet snapshot it decides on.

Called by the scheduler host (live) and by ``fedsched audit verify`` (replay). Pure: no I/O, clock or
randomness; only ``events`` and the policy core's model.

The fold is written so that its result does not depend on how records of *different* partitions
interleave, only on which records were folded: every entity's facts live in one partition (nodes,
tenants, policies) or are kept as sets keyed by run (a job's placements come from the decisions topic,
its lifecycle from the jobs topic). So the live scheduler, folding records as they arrive, and a
replay, folding the same records in (topic, partition, offset) order, reach the same state: that is
what makes every recorded cycle re-executable.

A job that has ended for good, with every run's placement and end folded, is *settled*: no later
record can change what it contributes to a decision. A run's first placement and first end are final
(each comes from one partition, so "first" is the same in every replay), and a job ended for good is
never placed again. So a settled job's facts are dropped at the next snapshot and only its id is kept,
to ignore what still comes for it: a service that runs for months keeps what is open, not every job
it ever saw. Its usage stays in the tenants' ledgers (and its records, packed, for a change of the
usage half-life). ``keep_settled`` keeps every job's facts, for readers of the whole history.
"""

from __future__ import annotations

import bisect
import json
from array import array
from dataclasses import dataclass, field, replace
from typing import Any

from events.catalog.base import Event, has_field
from events.catalog.decisions import (
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReclaimRequested,
    SchedulingCycleCompleted,
)
from events.catalog.decisions import (
    ReplicaPlacement as EventReplicaPlacement,
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
    JobKind,
    JobPreempted,
    JobReclaimed,
    JobRejected,
    JobSubmitted,
    JobSucceeded,
)
from events.catalog.profiles import ResourceProfileUpdated
from events.catalog.types import ClusterId, JobId, NodeId, ResourceKind, TenantId
from events.wire.envelope import Envelope
from services.scheduler.core.policy import model as m
from services.scheduler.core.policy.usage import UsageLedger, history_of

_MILLI = 1000


@dataclass(frozen=True, slots=True)
class Placement:
    """What the state keeps of a ``JobPlaced``: where the run went. The scores and the explanation are
    for readers of the log; kept whole, they were most of what every job ever placed cost in memory."""

    cluster: str
    replicas: tuple[EventReplicaPlacement, ...]


@dataclass(slots=True)
class JobFacts:
    """Everything known of one job, as sets of facts keyed by run (order-independent)."""

    spec: m.Job | None = None
    """The request as the core reads it, made once when it is folded (the event itself, kept for every job
    ever submitted, cost several times as much memory)."""
    submitted_ms: int = 0
    placements: dict[int, Placement] = field(default_factory=dict)
    placed_at: dict[int, int] = field(default_factory=dict)
    ended: dict[int, str] = field(default_factory=dict)  # run -> succeeded/failed/preempted/reclaimed/cancelled
    ended_at: dict[int, int] = field(default_factory=dict)
    terminal: str = ""
    cancel_requested: bool = False
    stop_requested: set[int] = field(default_factory=set)  # runs asked to stop (preempt / reclaim)
    last_queued: tuple[str, ...] = ()  # reason codes of the latest JobQueued
    victims: tuple[str, ...] = ()
    """Jobs asked to stop to make room for it since its latest placement (both on the decisions topic, so
    in one order everywhere): its next ``JobPlaced`` names them."""

    def current_run(self) -> int:
        return max(self.placements, default=0)

    def running_placement(self) -> Placement | None:
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

    def settled(self) -> bool:
        """Ended for good, and every run placed has ended and every run ended was placed: nothing that
        may still come for it can change a decision (see the module's docstring)."""
        return bool(self.terminal) and self.placements.keys() == self.ended.keys()


SUSPECT_FOR_MS = 24 * 3600 * 1000
MIN_USAGE_HALF_LIFE_MS = 60_000


@dataclass(slots=True)
class NodeFacts:
    observed: NodeObserved | None = None
    removed_generation: int = -1
    gpu_health: dict[int, str] = field(default_factory=dict)
    suspect_until_ms: int = 0
    """Governance found jobs failing on this node: until then its healthy GPUs count as degraded, so
    placement steers work elsewhere while the node stays usable."""


@dataclass(slots=True)
class SettledUsage:
    """One tenant's settled usage records, packed two machine ints each (16 bytes a record, where the
    objects took about 120)."""

    packed: array[int] = field(default_factory=lambda: array("q"))
    wide: list[m.UsageRecord] = field(default_factory=list)  # beyond 64 bits (absurd times): kept as they are

    def extend(self, records: list[m.UsageRecord]) -> None:
        for record in records:
            try:
                pair = array("q", (record.at_ms, record.gpu_milli_ms))  # made first: a failure adds nothing
            except OverflowError:
                self.wide.append(record)
            else:
                self.packed.extend(pair)

    def records(self) -> list[m.UsageRecord]:
        it = iter(self.packed)
        return [*(m.UsageRecord(at, amount) for at, amount in zip(it, it, strict=True)), *self.wide]


@dataclass(slots=True)
class _Derived:
    """What snapshots are made of, kept up to date from the entities each fold touched, so a cycle costs
    in proportion to what changed since the last one, not to the history. Derived only: it is a cache
    of what ``SchedulerState`` holds, rebuilt per touched entity exactly as a full rebuild would."""

    pending: dict[str, m.Job] = field(default_factory=dict)
    running: dict[str, m.RunningJob] = field(default_factory=dict)
    running_order: list[str] = field(default_factory=list)  # the keys of ``running``, sorted
    running_sorted: list[m.RunningJob] = field(default_factory=list)  # its values, in that order
    # The running jobs the last snapshot handed out, and what each job that changed since was then:
    # the snapshot's ``RunningDelta`` (the cycle memo counts what changed, not every running job).
    snapshot_running: tuple[m.RunningJob, ...] | None = None
    running_was: dict[str, m.RunningJob | None] = field(default_factory=dict)
    cancel_open: set[str] = field(default_factory=set)  # cancel requested, not terminal
    # What each running job holds, per node: (node key, [(gpu index, milli)], cpu, memory).
    holds: dict[str, list[tuple[tuple[str, str], list[tuple[int, int]], int, int]]] = field(default_factory=dict)
    used_gpu: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    used_cpu: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    node_models: dict[tuple[str, str], m.Node | None] = field(default_factory=dict)
    node_order: list[tuple[str, str]] = field(default_factory=list)
    node_list: list[m.Node | None] = field(default_factory=list)  # ``node_models`` in ``node_order``
    node_pos: dict[tuple[str, str], int] = field(default_factory=dict)  # key -> its place in both
    suspects: set[tuple[str, str]] = field(default_factory=set)
    usage: dict[str, UsageLedger] = field(default_factory=dict)  # tenant -> its usage history, by epoch
    usage_of: dict[str, tuple[str, list[m.UsageRecord]]] = field(default_factory=dict)  # job -> its records
    settled_usage: dict[str, SettledUsage] = field(default_factory=dict)  # tenant -> its settled jobs' records
    usage_half_life_ms: int = m.PolicyConfig().usage_half_life_ms  # what ``usage`` was grown with
    tenants: tuple[m.Tenant, ...] | None = None
    jobs: set[str] = field(default_factory=set)  # touched since the last refresh
    nodes: set[tuple[str, str]] = field(default_factory=set)


@dataclass(slots=True)
class SchedulerState:
    nodes: dict[tuple[str, str], NodeFacts] = field(default_factory=dict)
    clusters: dict[str, ClusterRegistered] = field(default_factory=dict)
    cluster_status: dict[str, str] = field(default_factory=dict)
    """Cluster -> its last reported status; its nodes take no work unless it is reachable."""
    congestion: dict[str, tuple[int, int]] = field(default_factory=dict)  # cluster -> (version, milli)
    tenants: dict[str, TenantRegistered] = field(default_factory=dict)
    quotas: dict[tuple[str, str], QuotaSet] = field(default_factory=dict)
    policy: PolicyConfigured | None = None
    jobs: dict[str, JobFacts] = field(default_factory=dict)
    settled: set[str] = field(default_factory=set)
    """Jobs whose facts were dropped once settled; what still comes for them is ignored."""
    keep_settled: bool = False
    cycles: int = 0
    events: int = 0
    _now_ms: int = 0
    _derived: _Derived = field(default_factory=_Derived)
    _policy_config: tuple[PolicyConfigured, m.PolicyConfig] | None = field(default=None, compare=False, repr=False)

    # -- fold ------------------------------------------------------------------------------------

    def fold(self, envelope: Envelope) -> None:
        self.events += 1
        data = envelope.data
        handler = _HANDLERS.get(type(data))
        if handler is None:
            return
        handler(self, data, envelope.time_ms)
        derived = self._derived
        kind = type(data)
        has_job, has_node = has_field(kind, "job_id"), has_field(kind, "node") and has_field(kind, "cluster")
        if has_job:
            job_id = data.job_id  # type: ignore[attr-defined]
            if job_id is not None and job_id in self.jobs:
                derived.jobs.add(job_id)
        node = data.node if has_node else None  # type: ignore[attr-defined]
        cluster = data.cluster if has_node else None  # type: ignore[attr-defined]
        if node is not None and cluster is not None:
            derived.nodes.add((cluster, node))
        elif isinstance(data, ClusterStatusChanged):
            derived.nodes.update(key for key in self.nodes if key[0] == data.cluster)
        if isinstance(data, (TenantRegistered, QuotaSet)):
            derived.tenants = None

    def job(self, job_id: str) -> JobFacts:
        facts = self.jobs.get(job_id)
        if facts is None:
            if job_id in self.settled:
                return JobFacts()  # folded into nothing: a settled job's later records change no decision
            facts = self.jobs[job_id] = JobFacts()
        return facts

    # -- snapshot --------------------------------------------------------------------------------

    def policy_config(self) -> m.PolicyConfig:
        if self.policy is None:
            return m.PolicyConfig()
        cached = self._policy_config
        if cached is None or cached[0] is not self.policy:  # parsed once per PolicyConfigured, not per cycle
            cached = self._policy_config = (
                self.policy,
                policy_from_document(self.policy.policy_version, self.policy.document),
            )
        return cached[1]

    def pending_count(self) -> int:
        self._refresh()
        return len(self._derived.pending)

    def running_count(self) -> int:
        self._refresh()
        return len(self._derived.running)

    def pending_jobs(self) -> list[m.Job]:
        self._refresh()
        return list(self._derived.pending.values())

    def open_cancellations(self) -> list[str]:
        """Jobs asked to be cancelled and not ended yet, in id order."""
        self._refresh()
        return sorted(self._derived.cancel_open)

    def refresh(self) -> None:
        """Bring what snapshots are made of up to date with what was folded, dropping the jobs that
        settled: the first step of every snapshot, and what a follower that takes none (a standby, a
        restart catching up) calls to keep only what is open."""
        self._refresh()

    def snapshot(self, now_ms: int) -> m.FleetSnapshot:
        self._now_ms = now_ms
        self._refresh()
        derived = self._derived
        for key in derived.suspects:  # their penalty ends with time, not with an event
            self._set_node_model(key)
        running = tuple(derived.running_sorted)
        delta = None
        if derived.snapshot_running is not None:
            added: list[m.RunningJob] = []
            removed: list[m.RunningJob] = []
            for job_id, before in sorted(derived.running_was.items()):
                after = derived.running.get(job_id)
                if before is not after:
                    if before is not None:
                        removed.append(before)
                    if after is not None:
                        added.append(after)
            delta = m.RunningDelta(derived.snapshot_running, tuple(added), tuple(removed))
        derived.snapshot_running, derived.running_was = running, {}
        pending = tuple(derived.pending[job_id] for job_id in sorted(derived.pending))
        # At C speed (every cycle, every node); a removed node's entry is None, a ``Node`` is always true.
        nodes = tuple(filter(None, derived.node_list))
        half_life = self.policy_config().usage_half_life_ms
        if half_life != derived.usage_half_life_ms:  # a policy changed the half-life: grow them all again
            derived.usage_half_life_ms = half_life
            derived.usage = {}
            for tenant, records in self._usage_records():
                ledger = self._ledger(tenant)
                for record in records:
                    ledger.add(record)
            derived.tenants = None
        if derived.tenants is None:
            derived.tenants = self._tenants()
        return m.FleetSnapshot(
            now_ms=now_ms,
            clusters=tuple(self._cluster(c) for c in sorted(self.clusters)),
            nodes=nodes,
            tenants=derived.tenants,
            running=running,
            pending=pending,
            running_delta=delta,
        )

    def _refresh(self) -> None:
        derived = self._derived
        touched_nodes = derived.nodes
        order, running = derived.running_order, derived.running_sorted
        running_was = derived.running_was
        for job_id in sorted(derived.jobs):
            before = derived.running.get(job_id)
            was = before is not None
            self._refresh_job(job_id, touched_nodes)
            if not self.keep_settled and self.jobs[job_id].settled():
                self._settle(job_id)
            now = derived.running.get(job_id)
            if now is not before and job_id not in running_was:
                running_was[job_id] = before
            if now is not None:
                at = bisect.bisect_left(order, job_id)
                if was:
                    running[at] = now
                else:
                    order.insert(at, job_id)
                    running.insert(at, now)
            elif was:
                at = bisect.bisect_left(order, job_id)
                del order[at]
                del running[at]
        derived.jobs = set()
        if touched_nodes:
            fresh = [key for key in touched_nodes if key not in derived.node_models]
            for key in sorted(touched_nodes):
                self._set_node_model(key)
                if key in self.nodes and self.nodes[key].suspect_until_ms:
                    derived.suspects.add(key)
            if fresh:
                derived.node_order = sorted(derived.node_models)
                derived.node_pos = {key: at for at, key in enumerate(derived.node_order)}
                derived.node_list = [derived.node_models[key] for key in derived.node_order]
            derived.nodes = set()

    def _set_node_model(self, key: tuple[str, str]) -> None:
        derived = self._derived
        model = derived.node_models[key] = self._node(key)
        at = derived.node_pos.get(key)
        if at is not None:
            derived.node_list[at] = model

    def _refresh_job(self, job_id: str, touched_nodes: set[tuple[str, str]]) -> None:
        derived = self._derived
        facts = self.jobs[job_id]
        for held, gpus, cpu, mem in derived.holds.pop(job_id, ()):
            used = derived.used_gpu[held]
            for index, milli in gpus:
                used[index] -= milli
            derived.used_cpu[held][0] -= cpu
            derived.used_cpu[held][1] -= mem
            touched_nodes.add(held)
        derived.running.pop(job_id, None)
        derived.pending.pop(job_id, None)
        derived.cancel_open.discard(job_id)
        if facts.cancel_requested and not facts.terminal:
            derived.cancel_open.add(job_id)
        if facts.spec is None:
            return
        self._refresh_usage(job_id, facts)
        placed = facts.running_placement()
        if facts.pending():
            derived.pending[job_id] = job_model(facts)
        if placed is None:
            return
        job = job_model(facts)
        if len(placed.replicas) < job.replicas:  # started with fewer (``min_replicas``): it holds only those
            job = replace(job, replicas=len(placed.replicas))
        replicas = tuple(
            m.ReplicaPlacement(core_node_id(placed.cluster, r.node), tuple(r.gpu_indices), r.gpu_milli_each)
            for r in placed.replicas
        )
        derived.running[job_id] = m.RunningJob(job, ClusterId(placed.cluster), replicas, facts.submitted_ms)
        holds = []
        for replica in placed.replicas:
            key: tuple[str, str] = (placed.cluster, replica.node)
            gpus = [(index, replica.gpu_milli_each) for index in replica.gpu_indices]
            used = derived.used_gpu.setdefault(key, {})
            for index, milli in gpus:
                used[index] = used.get(index, 0) + milli
            cpu_mem = derived.used_cpu.setdefault(key, [0, 0])
            cpu_mem[0] += job.cpu_milli
            cpu_mem[1] += job.memory_mib
            holds.append((key, gpus, job.cpu_milli, job.memory_mib))
            touched_nodes.add(key)
        derived.holds[job_id] = holds

    def _settle(self, job_id: str) -> None:
        del self.jobs[job_id]
        self.settled.add(job_id)
        derived = self._derived
        mine = derived.usage_of.pop(job_id, None)
        if mine is not None:
            tenant, records = mine
            packed = derived.settled_usage.get(tenant)
            if packed is None:
                packed = derived.settled_usage[tenant] = SettledUsage()
            packed.extend(records)

    def _usage_records(self) -> list[tuple[str, list[m.UsageRecord]]]:
        """Every job's usage records by tenant, the settled ones included (to grow the ledgers again)."""
        derived = self._derived
        return [*derived.usage_of.values(), *((t, packed.records()) for t, packed in derived.settled_usage.items())]

    def _refresh_usage(self, job_id: str, facts: JobFacts) -> None:
        assert facts.spec is not None
        records = []
        for run in sorted(facts.ended):
            placed = facts.placements.get(run)
            if placed is None:
                continue
            milli = sum(len(r.gpu_indices) * r.gpu_milli_each for r in placed.replicas)
            start, end = facts.placed_at.get(run, 0), facts.ended_at.get(run, 0)
            records.append(m.UsageRecord(end, milli * max(0, end - start)))
        derived = self._derived
        tenant, before = derived.usage_of.get(job_id, (facts.spec.tenant, []))
        if before == records:
            return
        ledger = self._ledger(tenant)
        for record in before:
            ledger.add(record, -1)
        for record in records:
            ledger.add(record)
        derived.usage_of[job_id] = (tenant, records)
        derived.tenants = None

    def _ledger(self, tenant: str) -> UsageLedger:
        derived = self._derived
        ledger = derived.usage.get(tenant)
        if ledger is None:
            ledger = derived.usage[tenant] = UsageLedger(derived.usage_half_life_ms, {})
        return ledger

    def _node(self, key: tuple[str, str]) -> m.Node | None:
        facts = self.nodes.get(key)
        if facts is None:
            return None
        observed = facts.observed
        if observed is None or facts.removed_generation >= observed.generation:
            return None
        used = self._derived.used_gpu.get(key, {})
        cpu_mem = self._derived.used_cpu.get(key, (0, 0))
        gpus = []
        suspect = self._now_ms < facts.suspect_until_ms
        for device in observed.gpus:
            health = facts.gpu_health.get(device.index, device.health.value)
            if suspect and health == m.Health.OK.value:
                health = m.Health.DEGRADED.value
            gpus.append(m.Gpu(device.index, max(0, _MILLI - used.get(device.index, 0)), m.Health(health)))
        reachable = self.cluster_status.get(key[0], _REACHABLE) == _REACHABLE
        schedulable = observed.schedulable and reachable
        return m.Node(
            node_id=core_node_id(*key),
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
            taints=_taints(observed),
        )

    def _cluster(self, cluster_id: str) -> m.Cluster:
        registered = self.clusters[cluster_id]
        rates = [rate.micro_per_gpu_hour for rate in registered.gpu_rates]
        return m.Cluster(
            cluster_id=ClusterId(cluster_id),
            datasets=tuple(sorted(registered.datasets)),
            congestion_milli=self.congestion.get(cluster_id, (0, 0))[1],
            cost_milli_per_gpu_hour=(sum(rates) // len(rates) // 1000) if rates else 0,
            status=self.cluster_status.get(cluster_id, _REACHABLE),
        )

    def usage_histories(self, half_life_ms: int) -> dict[str, m.UsageHistory]:
        """Every tenant's usage history grown with ``half_life_ms`` (what-ifs under another policy)."""
        records: dict[str, list[m.UsageRecord]] = {}
        for tenant, mine in self._usage_records():
            records.setdefault(tenant, []).extend(mine)
        return {tenant: history_of(mine, half_life_ms) for tenant, mine in sorted(records.items())}

    def _tenants(self) -> tuple[m.Tenant, ...]:
        usage = self._derived.usage
        names = sorted(set(self.tenants) | {tenant for tenant, _ in self.quotas})
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
                    usage=usage[name].history() if name in usage else m.UsageHistory(),
                )
            )
        return tuple(out)


def core_node_id(cluster: str, node: str) -> NodeId:
    """The core's id of a node: node names are unique only within a cluster (two clusters may well
    both have a ``gpu-node-1``), and ids have no ``/``, so ``cluster/node`` is unique and reversible."""
    return NodeId(f"{cluster}/{node}")


def event_node(node_id: str) -> NodeId:
    """The node's own name, as events carry it (beside their cluster field)."""
    return NodeId(node_id.partition("/")[2] or node_id)


def job_model(facts: JobFacts) -> m.Job:
    spec = facts.spec
    assert spec is not None
    preempted = facts.times_preempted()
    return spec if preempted == spec.times_preempted else replace(spec, times_preempted=preempted)


def _job_of(e: JobSubmitted, submitted_ms: int) -> m.Job:
    r = e.resources
    return m.Job(
        job_id=JobId(e.job_id),
        tenant=e.tenant,
        queue=e.queue,
        kind=e.kind,
        priority_class=e.priority_class,
        replicas=e.replicas,
        gang=e.gang,
        cpu_milli=r.cpu_milli,
        memory_mib=r.memory_mib,
        gpus=r.gpus,
        gpu_milli=r.gpu_milli,
        gpu_models=tuple(sorted(r.gpu_models)),
        min_gpu_memory_mib=r.min_gpu_memory_mib,
        interconnect=e.interconnect,
        datasets=tuple(sorted(e.datasets)),
        preemptible=e.preemptible,
        expected_runtime_s=e.expected_runtime_s,
        max_runtime_s=e.max_runtime_s,
        submitted_at_ms=submitted_ms,
        times_preempted=0,
        min_replicas=_min_replicas(e),
        tolerations=tuple(
            sorted(
                ((t.key, t.value, None if t.effect is None else t.effect.value) for t in e.tolerations),
                key=lambda t: (t[0], t[1] or "", t[2] or ""),
            )
        ),
    )


_REACHABLE = ClusterStatus.REACHABLE.value


def _min_replicas(e: JobSubmitted) -> int | None:
    """An inference service that is not a gang may start with ``inference.min_replicas`` (at least one);
    every other job starts with all its replicas or waits."""
    if e.kind is not JobKind.INFERENCE or e.inference is None or e.gang or e.inference.min_replicas >= e.replicas:
        return None
    return max(1, e.inference.min_replicas)


def _taints(observed: NodeObserved) -> tuple[m.Taint, ...]:
    return tuple(sorted((t.key, t.value, t.effect.value) for t in observed.taints))


def policy_from_document(version: str, document: Any) -> m.PolicyConfig:
    """The policy configuration from a ``PolicyConfigured`` document; unknown keys are refused."""
    doc = json.loads(json.dumps(document))  # a plain, detached copy
    base = m.PolicyConfig()
    known = {name for name in base.__dataclass_fields__ if name not in ("version",)}
    unknown = sorted(set(doc) - known)
    if unknown:
        # Named beside the valid ones, so a misspelt key can be corrected without reading the code.
        raise ValueError(f"unknown settings {', '.join(unknown)}; valid settings: {', '.join(sorted(known))}")
    for name, value in doc.items():
        _check_setting(name, value, getattr(base, name))
    if "node_policy" in doc:
        doc["node_policy"] = m.NodePolicy(doc["node_policy"])
    if "cluster_weights" in doc:
        doc["cluster_weights"] = m.ClusterWeights(**doc["cluster_weights"])
    if "typical_shapes" in doc:
        doc["typical_shapes"] = tuple(
            m.Shape(**{**s, "models": tuple(s.get("models", ()))}) for s in doc["typical_shapes"]
        )
    config = m.PolicyConfig(version=version, **doc)
    if config.usage_half_life_ms < 0 or 0 < config.usage_half_life_ms < MIN_USAGE_HALF_LIFE_MS:
        # Fair share's history keeps one sum per 32 half-lives: a half-life of milliseconds would keep
        # one per few records and make every cycle read them all (0 means no decay at all).
        raise ValueError(f"usage_half_life_ms must be 0 or at least {MIN_USAGE_HALF_LIFE_MS} ms")
    return config


_PERCENT = {"typical_coverage_pct": 100}
_MILLI_SCALE = {"hot_pressure_milli": 1000, "aging_unit_milli": 1000}
_AT_LEAST_ONE = {"max_decisions", "aging_step_ms"}
_NULLABLE = {"hot_model_cap_milli"}  # a whole number, or null for none


def _check_setting(name: str, value: Any, default: Any) -> None:
    """A setting of the type its default has, in its range: a quoted ``"false"`` would otherwise be a
    true value (preemption stays on), and a negative count a slice from the end."""

    def refuse(reason: str) -> None:
        raise ValueError(f"setting {name}: {reason}, not {json.dumps(value)}")

    if isinstance(default, bool):
        if not isinstance(value, bool):
            refuse("must be true or false")
    elif isinstance(default, int) or name in _NULLABLE:
        if value is None and name in _NULLABLE:
            return
        if isinstance(value, bool) or not isinstance(value, int):
            refuse("must be a whole number" + (" or null" if name in _NULLABLE else ""))
        low = 1 if name in _AT_LEAST_ONE else 0
        high = _PERCENT.get(name, _MILLI_SCALE.get(name))
        if value < low or (high is not None and value > high):
            refuse(f"must be from {low}" + (f" to {high}" if high is not None else " up"))
    elif isinstance(default, m.ClusterWeights):
        if not isinstance(value, dict):
            refuse("must be a mapping of weights")
        for term, weight in value.items():
            if term not in default.__dataclass_fields__:
                refuse(f"has an unknown term {term!r} (terms: {', '.join(default.__dataclass_fields__)})")
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
                refuse(f"weight {term} must be a whole number from 0 up")
    elif isinstance(default, tuple):
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            refuse("must be a list of shapes")
    elif isinstance(default, str) and not isinstance(value, str):
        refuse("must be a string")


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
    state.cluster_status[e.cluster] = e.status.value


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
        facts.spec = _job_of(e, time_ms)
        facts.submitted_ms = time_ms


def _cancel_requested(state: SchedulerState, e: JobCancelRequested, _: int) -> None:
    state.job(e.job_id).cancel_requested = True


def _ended(how: str) -> Any:
    def handle(state: SchedulerState, e: Event, time_ms: int) -> None:
        facts = state.job(e.job_id)  # type: ignore[attr-defined]
        run = getattr(e, "run", 0)
        if how == "cancelled" and run == 0:
            facts.terminal = facts.terminal or "cancelled"
            return
        if run in facts.ended:
            return  # a run's first end is final: a later report (a failure while it was being stopped) is not
        facts.ended[run] = how
        facts.ended_at[run] = time_ms
        if how in ("succeeded", "failed", "cancelled"):
            facts.terminal = how

    return handle


def _rejected(state: SchedulerState, e: JobRejected, _: int) -> None:
    facts = state.job(e.job_id)
    facts.terminal = facts.terminal or "rejected"


def _placed(state: SchedulerState, e: JobPlaced, time_ms: int) -> None:
    facts = state.job(e.job_id)
    if e.run in facts.placements:
        return
    facts.victims = ()
    facts.placements[e.run] = Placement(e.cluster, e.replicas)
    facts.placed_at[e.run] = time_ms


def _queued(state: SchedulerState, e: JobQueued, _: int) -> None:
    state.job(e.job_id).last_queued = tuple(r.value for r in e.reasons)


def _stop_requested(state: SchedulerState, e: JobPreemptionRequested | JobReclaimRequested, _: int) -> None:
    state.job(e.job_id).stop_requested.add(e.run)
    if isinstance(e, JobPreemptionRequested) and e.preemptor is not None:
        preemptor = state.job(e.preemptor)
        if e.job_id not in preemptor.victims:
            preemptor.victims += (e.job_id,)


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
