"""``SchedulerState``: the facts folded from the log, and the fleet snapshot the core decides on.

Called by the scheduler host (live), ``fedsched audit verify`` (replay) and ``audit whatif``, through
``services.scheduler.core.decide``. Pure. The fold itself is ``services.scheduler.core.state.fold``;
this module keeps what snapshots are derived from up to date with it, entity by entity, and drops the jobs
that settled (see the package's docstring).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

from events.catalog.base import has_field
from events.catalog.budget_windows import DAY_MS, Window
from events.catalog.documents import BudgetSpec
from events.catalog.governance import PolicyConfigured, QuotaSet, TenantRegistered
from events.catalog.inventory import ClusterStatus, ClusterStatusChanged
from events.catalog.types import ClusterId, JobId, ResourceKind, TenantId
from events.wire.envelope import Envelope
from services.scheduler.core.policy import model as m
from services.scheduler.core.policy.usage import UsageLedger, history_of
from services.scheduler.core.state.budget_count import Holdings, hard_budgets
from services.scheduler.core.state.convert import core_node_id, job_model, taints
from services.scheduler.core.state.facts import Facts, JobFacts, Placement, SettledUsage
from services.scheduler.core.state.fold import HANDLERS
from services.scheduler.core.state.policy_document import policy_from_document

_MILLI = 1000
_REACHABLE = ClusterStatus.REACHABLE.value


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
    growing: set[str] = field(default_factory=set)  # runs that hold fewer replicas than asked, not stopping
    spread_runs: dict[str, m.RunningJob] = field(default_factory=dict)
    """Spread runs, whole (all live parts): what a top-up of one reads (``running`` has a part each)."""
    closing: set[str] = field(default_factory=set)  # spread runs every part of which ended: to close
    parts_of: dict[str, tuple[str, ...]] = field(default_factory=dict)  # spread run -> its keys in ``running``
    failed: dict[str, m.FailedRun] = field(default_factory=dict)  # runs awaiting a retry verdict
    backoff: dict[str, int] = field(default_factory=dict)  # pending job -> when its retry may be placed
    # What each running job holds, per node: (node key, [(gpu index, milli)], cpu, memory, npu indices).
    holds: dict[str, list[tuple[tuple[str, str], list[tuple[int, int]], int, int, tuple[int, ...]]]] = field(
        default_factory=dict
    )
    used_gpu: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    used_npu: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)  # node -> NPU index -> holders
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
class SchedulerState(Facts):
    keep_settled: bool = False
    """Keep every job's facts (readers of the whole history): a live scheduler drops the settled ones."""
    events: int = 0
    _now_ms: int = 0
    _derived: _Derived = field(default_factory=_Derived)
    _policy_config: tuple[PolicyConfigured, m.PolicyConfig] | None = field(default=None, compare=False, repr=False)
    _held_pruned_ms: int = field(default=0, compare=False, repr=False)

    # -- fold ------------------------------------------------------------------------------------

    def fold(self, envelope: Envelope) -> None:
        self.events += 1
        data = envelope.data
        handler = HANDLERS.get(type(data))
        if handler is None:
            return
        handler(self, data, envelope.time_ms, envelope.id)
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

    def growing_count(self) -> int:
        """Runs that hold fewer replicas than their job asks and may grow (a cycle may add to them)."""
        self._refresh()
        return len(self._derived.growing)

    def awaiting_verdict_count(self) -> int:
        """Runs that failed for a cause that may be retried and await the next cycle's verdict."""
        self._refresh()
        return len(self._derived.failed)

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

    def closing_runs(self) -> list[str]:
        """Jobs whose spread run has every part ended and is not closed yet, in id order: the cycle closes
        them (``JobRunClosed``)."""
        self._refresh()
        return sorted(self._derived.closing)

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
        backoff = derived.backoff
        pending = tuple(
            derived.pending[job_id] for job_id in sorted(derived.pending) if backoff.get(job_id, 0) <= now_ms
        )
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
            budgets=self._budgets(now_ms) if self.budgets else (),
            preempted_last_hour=self._preempted_last_hour(now_ms),
            failed=tuple(derived.failed[job_id] for job_id in sorted(derived.failed)),
            running_delta=delta,
            growing=tuple(derived.spread_runs.get(j) or derived.running[j] for j in sorted(derived.growing)),
        )

    def _preempted_last_hour(self, now_ms: int) -> tuple[tuple[TenantId, int], ...]:
        out = []
        for tenant, times in sorted(self.preempted_at.items()):
            lo = bisect.bisect_right(times, now_ms - m.PREEMPTION_RATE_WINDOW_MS)
            count = bisect.bisect_right(times, now_ms) - lo
            if count > 0:
                out.append((TenantId(tenant), count))
        return tuple(out)

    def _budgets(self, now_ms: int) -> tuple[m.Budget, ...]:
        """The hard budgets with a window open (governance's ``BudgetWindowOpened``), and what their tenants
        hold within it, counted as every simulation counts it (``budget_count``)."""
        if now_ms - self._held_pruned_ms > DAY_MS:
            self.held.forget_before(now_ms)
            self._held_pruned_ms = now_ms

        def window_of(name: str, _: BudgetSpec) -> Window | None:
            opened = self.budget_windows.get(name)
            return None if opened is None else Window(opened.start_ms, opened.end_ms, opened.label)

        def placed_ms(running: m.RunningJob) -> int:
            facts = self.jobs[running.job.job_id]
            return facts.placed_at.get(facts.current_run(), now_ms)

        specs = {name: budget.spec for name, budget in self.budgets.items()}
        cohorts = {tenant: registered.cohort for tenant, registered in self.tenants.items()}

        def grown(running: m.RunningJob) -> tuple[tuple[int, int], ...]:
            facts = self.jobs[running.job.job_id]
            placement = facts.placements.get(facts.current_run())
            if placement is not None and placement.where:  # a spread run's part: each replica from its start
                return tuple(
                    (since, len(r.gpu_indices) * r.gpu_milli_each)
                    for r, (cluster, since) in zip(placement.replicas, placement.where, strict=True)
                    if cluster == running.cluster
                )
            return placement.grown if placement is not None else ()

        holdings = Holdings(self.held, self._derived.running.values(), placed_ms, grown)
        return hard_budgets(specs, window_of, cohorts, holdings, now_ms, self.policy_config())

    def _refresh(self) -> None:
        derived = self._derived
        touched_nodes = derived.nodes
        order, running = derived.running_order, derived.running_sorted
        running_was = derived.running_was
        for job_id in sorted(derived.jobs):
            keys_before = derived.parts_of.get(job_id, (job_id,))  # a spread run has an entry per part
            befores = {key: derived.running.get(key) for key in keys_before}
            self._refresh_job(job_id, touched_nodes)
            if not self.keep_settled and self.jobs[job_id].settled():
                self._settle(job_id)
            for entry in sorted({*keys_before, *derived.parts_of.get(job_id, (job_id,))}):
                before = befores.get(entry)
                was = before is not None
                now = derived.running.get(entry)
                if now is not before and entry not in running_was:
                    running_was[entry] = before
                if now is not None:
                    at = bisect.bisect_left(order, entry)
                    if was:
                        running[at] = now
                    else:
                        order.insert(at, entry)
                        running.insert(at, now)
                elif was:
                    at = bisect.bisect_left(order, entry)
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
        for held, gpus, cpu, mem, npus in derived.holds.pop(job_id, ()):
            used = derived.used_gpu[held]
            for index, milli in gpus:
                used[index] -= milli
            if npus:
                holders = derived.used_npu[held]
                for index in npus:
                    holders[index] -= 1
            derived.used_cpu[held][0] -= cpu
            derived.used_cpu[held][1] -= mem
            touched_nodes.add(held)
        for part_key in derived.parts_of.pop(job_id, (job_id,)):
            derived.running.pop(part_key, None)
        derived.growing.discard(job_id)
        derived.spread_runs.pop(job_id, None)
        derived.closing.discard(job_id)
        derived.pending.pop(job_id, None)
        derived.failed.pop(job_id, None)
        derived.backoff.pop(job_id, None)
        derived.cancel_open.discard(job_id)
        if facts.cancel_requested and not facts.terminal:
            derived.cancel_open.add(job_id)
        if facts.spec is None:
            return
        if facts.closable():
            derived.closing.add(job_id)
        self._refresh_usage(job_id, facts)
        placed = facts.running_placement()
        if facts.pending():
            derived.pending[job_id] = job_model(facts)
            not_before = facts.not_before_ms()
            if not_before > 0:
                derived.backoff[job_id] = not_before
        failed_run = facts.awaiting_verdict()
        if failed_run:
            assert facts.failures is not None
            failure = facts.failures[failed_run]
            derived.failed[job_id] = m.FailedRun(
                job_model(facts),
                failed_run,
                ClusterId(failure.cluster),
                failure.node,
                failure.reason,
                failure.infrastructure,
                failure.at_ms,
                facts.retries(failure.infrastructure),
            )
        if placed is None:
            return
        job = job_model(facts)
        asked = job.replicas
        run = facts.current_run()
        # When the run started (its cluster's report), else when it was placed: not when the job was
        # submitted, which made every job that waited look closer to its end (decisions-3 did).
        started = facts.started_at.get(run, facts.placed_at.get(run, facts.submitted_ms))
        if placed.where:
            self._refresh_spread(job_id, facts, job, placed, started)
        else:
            if len(placed.replicas) < asked:  # started with fewer (not a gang): it holds only those, for now
                job = replace(job, replicas=len(placed.replicas))
            replicas = tuple(
                m.ReplicaPlacement(
                    core_node_id(placed.cluster, r.node), tuple(r.gpu_indices), r.gpu_milli_each, tuple(r.npu_indices)
                )
                for r in placed.replicas
            )
            stop = facts.stop_requested.get(run)
            derived.running[job_id] = m.RunningJob(
                job,
                ClusterId(placed.cluster),
                replicas,
                started,
                stopping=stop is not None,
                stopping_for=JobId(stop[0]) if stop is not None and stop[0] else None,
                replicas_asked=asked if asked > job.replicas else 0,
            )
            if asked > job.replicas and stop is None:
                derived.growing.add(job_id)
        cpu_milli, memory_mib = job.cpu_milli, job.memory_mib
        holds = []
        for at, replica in enumerate(placed.replicas):
            key: tuple[str, str] = (placed.cluster_of(at), replica.node)
            gpus = [(index, replica.gpu_milli_each) for index in replica.gpu_indices]
            used = derived.used_gpu.setdefault(key, {})
            for index, milli in gpus:
                used[index] = used.get(index, 0) + milli
            cpu_mem = derived.used_cpu.setdefault(key, [0, 0])
            cpu_mem[0] += cpu_milli
            cpu_mem[1] += memory_mib
            npus = tuple(replica.npu_indices)
            if npus:
                holders = derived.used_npu.setdefault(key, {})
                for index in npus:
                    holders[index] = holders.get(index, 0) + 1
            holds.append((key, gpus, cpu_milli, memory_mib, npus))
            touched_nodes.add(key)
        derived.holds[job_id] = holds

    def _refresh_spread(self, job_id: str, facts: JobFacts, job: m.Job, placed: Placement, started: int) -> None:
        """A spread run in the snapshot: one running entry per live part (its cluster, its replicas), so
        preemption and quotas see each part where it is, and the whole run for its top-up."""
        derived = self._derived
        run = facts.current_run()
        asked = job.replicas
        by_cluster: dict[str, list[m.ReplicaPlacement]] = {}
        for index, r in enumerate(placed.replicas):
            cluster = placed.cluster_of(index)
            by_cluster.setdefault(cluster, []).append(
                m.ReplicaPlacement(
                    core_node_id(cluster, r.node), tuple(r.gpu_indices), r.gpu_milli_each, tuple(r.npu_indices)
                )
            )
        keys = []
        stopping = False
        for cluster, replicas in by_cluster.items():
            stop = facts.part_stops.get((run, cluster)) if facts.part_stops else None
            stopping = stopping or stop is not None
            entry = f"{job_id}@{cluster}"
            keys.append(entry)
            derived.running[entry] = m.RunningJob(
                replace(job, replicas=len(replicas)),
                ClusterId(cluster),
                tuple(replicas),
                started,
                stopping=stop is not None,
                stopping_for=JobId(stop[0]) if stop is not None and stop[0] else None,
            )
        derived.parts_of[job_id] = tuple(keys)
        held = len(placed.replicas)
        whole = m.RunningJob(
            replace(job, replicas=held),
            ClusterId(placed.cluster),
            tuple(p for replicas in by_cluster.values() for p in replicas),
            started,
            stopping=stopping,
            replicas_asked=asked if asked > held else 0,
            parts=tuple((ClusterId(c), len(r)) for c, r in by_cluster.items()),
            left=tuple(ClusterId(c) for c in facts.left(run)),
        )
        derived.spread_runs[job_id] = whole
        if asked > held and not stopping and not facts.cancel_requested:
            derived.growing.add(job_id)

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
            start, end = facts.placed_at.get(run, 0), facts.ended_at.get(run, 0)
            records.append(m.UsageRecord(end, placed.gpu_milli_ms(start, end, facts.left(run))))
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
            free = max(0, _MILLI - used.get(device.index, 0))
            gpus.append(m.Gpu(device.index, free, m.Health(health), device.model, device.memory_mib))
        holders = self._derived.used_npu.get(key, {})
        npus = tuple(
            m.Npu(
                device.index,
                device.model,
                device.memory_mib,
                holders.get(device.index, 0) <= 0,
                _npu_health(facts.npu_health.get(device.index, device.health.value), suspect),
            )
            for device in observed.npus
        )
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
            nvlink_domain=observed.nvlink_domain or "",
            rdma_fabric=observed.rdma_fabric or "",
            taints=taints(observed),
            npus=npus,
        )

    def _cluster(self, cluster_id: str) -> m.Cluster:
        registered = self.clusters[cluster_id]
        profile = self.profiles.get(cluster_id)
        # No roll-up yet (no node reported): nothing is known against it, as of a new cluster.
        return m.Cluster(
            cluster_id=ClusterId(cluster_id),
            datasets=tuple(sorted(registered.datasets)),
            congestion_milli=profile.congestion_milli if profile is not None else 0,
            stability_milli=profile.health_milli if profile is not None else m.MILLI,
            status=self.cluster_status.get(cluster_id, _REACHABLE),
            gpu_rates=tuple(sorted((r.model, r.micro_per_gpu_hour // 1000) for r in registered.gpu_rates)),
            fit_training=profile.fit_training if profile is not None else True,
            fit_inference=profile.fit_inference if profile is not None else True,
            failures_per_kgpu_hour_milli=profile.failures_per_kgpu_hour_milli if profile is not None else 0,
            recent_failures=profile.recent_failures if profile is not None else None,
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
                    if line.resource in (ResourceKind.GPU, ResourceKind.NPU) and line.gpu_model:
                        resource = f"{line.resource.value}:{line.gpu_model}"
                    limit = line.limit if line.limit is not None else 2**62
                    quotas.append(m.Quota(resource, line.guaranteed, limit, "" if queue == "default" else queue))
            out.append(
                m.Tenant(
                    tenant_id=TenantId(name),
                    weight=registered.weight if registered else 1,
                    cohort=(registered.cohort or "") if registered else "",
                    quotas=tuple(quotas),
                    hot_model_cap_milli=registered.hot_model_cap_milli if registered else None,
                    usage=usage[name].history() if name in usage else m.UsageHistory(),
                )
            )
        return tuple(out)


def _npu_health(reported: str, suspect: bool) -> m.Health:
    """An NPU's health as its latest health report, or its node's last snapshot, says; a suspect node's
    healthy ones count as degraded (as its GPUs do): taken last."""
    health = m.Health(reported)
    return m.Health.DEGRADED if suspect and health is m.Health.OK else health
