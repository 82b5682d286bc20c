"""What the scheduler keeps of each job and node, as facts keyed by run, and the maps that hold them.

Called by the fold (``services.scheduler.core.state.fold``), which changes these facts one entity at a
time, and by ``SchedulerState``, which derives snapshots from them. Pure data.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from events.catalog.budget_windows import HeldLedger
from events.catalog.decisions import ReplicaPlacement as EventReplicaPlacement
from events.catalog.governance import BudgetSet, BudgetWindowOpened, PolicyConfigured, QuotaSet, TenantRegistered
from events.catalog.inventory import ClusterRegistered, NodeObserved
from events.catalog.lifecycle import REQUEUED, JobStatus, RunEnd
from events.catalog.profiles import ResourceProfileUpdated
from events.wire.envelope import Latest
from services.scheduler.core.policy import model as m


@dataclass(frozen=True, slots=True)
class Placement:
    """What the state keeps of a ``JobPlaced``: where the run went. The scores and the explanation are
    for readers of the log; kept whole, they were most of what every job ever placed cost in memory."""

    cluster: str
    replicas: tuple[EventReplicaPlacement, ...]
    """Every replica the run holds: its ``JobPlaced``'s, then those of each ``JobReplicasAdded``."""
    grown: tuple[tuple[int, int], ...] = ()
    """Per ``JobReplicasAdded`` folded, when (log time) and the milli-GPU its replicas hold: a run's GPU
    time counts each replica from when it was added, not from the run's placement."""
    where: tuple[tuple[str, int], ...] = ()
    """A spread run's (cluster, since when) of each replica, as ``replicas``; empty for a run that does not
    spread (every replica in ``cluster``: no tuple per run for them)."""

    def gpu_milli(self) -> int:
        """The milli-GPU its replicas hold (all of them, those added included)."""
        return sum(len(r.gpu_indices) * r.gpu_milli_each for r in self.replicas)

    def gpu_milli_ms(self, start_ms: int, end_ms: int, left: Mapping[str, PartEnd] | None = None) -> int:
        """The GPU time it held from ``start_ms`` (its placement) to ``end_ms``: each added replica from
        when it was added; a spread run's replicas each until their part ended (``left``), if it did."""
        if self.where:
            total = 0
            for r, (cluster, since) in zip(self.replicas, self.where, strict=True):
                part = left.get(cluster) if left else None
                until = min(end_ms, part.at_ms) if part is not None else end_ms
                total += len(r.gpu_indices) * r.gpu_milli_each * max(0, until - max(since, start_ms))
            return total
        added = sum(milli for _, milli in self.grown)
        base = (self.gpu_milli() - added) * max(0, end_ms - start_ms)
        return base + sum(milli * max(0, end_ms - max(at, start_ms)) for at, milli in self.grown)

    def cluster_of(self, index: int) -> str:
        """The cluster of ``replicas[index]``."""
        return self.where[index][0] if self.where else self.cluster

    def clusters(self) -> tuple[str, ...]:
        """Its clusters, in the order their parts opened."""
        return tuple(dict.fromkeys(c for c, _ in self.where)) if self.where else (self.cluster,)

    def next_replica(self) -> int:
        """The number the run's next replica takes (numbers are unique across its clusters)."""
        return max((r.replica for r in self.replicas), default=-1) + 1

    def added(self, cluster: str, new: tuple[EventReplicaPlacement, ...], at_ms: int, milli: int) -> Placement:
        """The run grown by ``new`` in ``cluster`` (its own, or a spread run's part there) at ``at_ms``:
        new numbers continue the run's, so the replicas stay in number order."""
        where = (*self.where, *((cluster, at_ms),) * len(new)) if self.where else ()
        return Placement(self.cluster, (*self.replicas, *new), (*self.grown, (at_ms, milli)), where)

    def without(self, left: Collection[str]) -> Placement:
        """The run as it holds now: the replicas of the clusters its parts ``left`` taken away."""
        if not left or not self.where:
            return self
        kept = [(r, w) for r, w in zip(self.replicas, self.where, strict=True) if w[0] not in left]
        where = tuple(w for _, w in kept)
        return Placement(where[0][0] if where else self.cluster, tuple(r for r, _ in kept), self.grown, where)


@dataclass(frozen=True, slots=True)
class PartEnd:
    """How one cluster's part of a spread run ended (its cluster's run-end event), and when."""

    how: RunEnd
    reason: str | None
    node: str | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class Failure:
    """A run that failed for a cause that may be retried: where, why, when."""

    reason: str
    infrastructure: bool
    cluster: str
    node: str | None
    at_ms: int


@dataclass(slots=True)
class JobFacts:
    """Everything known of one job, as sets of facts keyed by run (order-independent)."""

    spec: m.Job | None = None
    """The request as the core reads it, made once when it is folded (the event itself, kept for every job
    ever submitted, cost several times as much memory)."""
    submitted_ms: int = 0
    placements: dict[int, Placement] = field(default_factory=dict)
    placed_at: dict[int, int] = field(default_factory=dict)
    started_at: dict[int, int] = field(default_factory=dict)
    """run -> when its cluster reported it started (``JobStarted``; the first report)."""
    ended: dict[int, RunEnd] = field(default_factory=dict)  # run -> how it ended
    ended_at: dict[int, int] = field(default_factory=dict)
    terminal: JobStatus | None = None
    """The job's final status, once it has ended for good."""
    cancel_requested: bool = False
    stop_requested: dict[int, tuple[str, int]] = field(default_factory=dict)
    """Runs asked to stop (preempted or reclaimed) -> the job the room is for ("" for none) and when a
    preemption asked it (-1: a reclaim)."""
    last_queued: tuple[str, ...] = ()  # reason codes of the latest JobQueued
    last_queued_at: tuple[int, int | None, int | None, int | None] = (0, None, None, None)
    """The latest JobQueued's time, places in the federation's order and in its own queue, and estimated
    start (what a new one is weighed against)."""
    last_wait: tuple[str, tuple[str, ...]] = ("", ())  # the latest JobQueued's cycle, and the ids applied of it
    held_counted: set[int] = field(default_factory=set)
    """Runs whose GPU time (placement to end) is in the budgets' ``HeldLedger``."""
    victims: tuple[str, ...] = ()
    """Jobs asked to stop to make room for it since its latest placement (both on the decisions topic, so
    in one order everywhere): its next ``JobPlaced`` names them."""
    part_ends: dict[int, dict[str, PartEnd]] | None = None
    """A spread run's parts that ended, per run: cluster -> how, in the order folded (``None`` for a job
    that does not spread). The run ends only with the scheduler's ``JobRunClosed`` (``ended``)."""
    part_stops: dict[tuple[int, str], tuple[str, int]] | None = None
    """Runs asked to stop by (run, cluster), as ``stop_requested`` by run: a spread run's parts are
    stopped one by one (``None`` for a job never asked to stop)."""
    failures: dict[int, Failure] | None = None
    """Runs that failed for a cause that may be retried (by kind: ``failure_kind``), whatever the job asked."""
    verdicts: dict[int, tuple[bool, int]] | None = None
    """The scheduler's verdict on a failed run: (infrastructure, from when it may be placed again), the
    time -1 when its retries were exhausted. Both ``None`` until there is one: most jobs never fail, and an
    empty dict per job cost 7% of the state's memory."""

    def current_run(self) -> int:
        return max(self.placements, default=0)

    def running_placement(self) -> Placement | None:
        """Where the current run holds replicas now (a spread run: in its parts that have not ended);
        ``None`` once it ended, or while every part of a spread run has ended and it awaits its close."""
        run = self.current_run()
        if not run or run in self.ended or self.terminal:
            return None
        placed = self.placements[run]
        left = self.left(run)
        if not left:
            return placed
        live = placed.without(left)
        return live if live.replicas else None

    def left(self, run: int) -> dict[str, PartEnd]:
        """The clusters whose part of spread run ``run`` ended (empty for any other run)."""
        return self.part_ends.get(run, {}) if self.part_ends else {}

    def closable(self) -> bool:
        """A spread run every part of which has ended, not closed yet: the scheduler closes it."""
        run = self.current_run()
        if not run or run in self.ended or not self.part_ends:
            return False
        left = self.part_ends.get(run)
        return left is not None and set(self.placements[run].clusters()) <= left.keys()

    def pending(self) -> bool:
        if self.spec is None or self.terminal or self.cancel_requested:
            return False
        return self.running_placement() is None and not self.awaiting_verdict() and not self.closable()

    def awaiting_verdict(self) -> int:
        """The run whose failure awaits the scheduler's retry verdict (0: none): the latest run, ended
        failed by the infrastructure, or by the workload of a job that asked for retries."""
        run = self.current_run()
        failure = self.failures.get(run) if self.failures else None
        if failure is None or self.verdict(run) or self.spec is None or self.terminal or self.cancel_requested:
            return 0
        return run if failure.infrastructure or self.spec.application_retries > 0 else 0

    def retries(self, infrastructure: bool) -> int:
        """Retries of one kind the scheduler gave the job."""
        return sum(1 for kind, at in (self.verdicts or {}).values() if kind is infrastructure and at >= 0)

    def not_before_ms(self) -> int:
        """When its latest retry may be placed (0: it is not in a retry's backoff)."""
        return max((at for _, at in (self.verdicts or {}).values()), default=0)

    def verdict(self, run: int) -> bool:
        """Whether the scheduler gave its retry verdict on ``run``."""
        return self.verdicts is not None and run in self.verdicts

    def times_preempted(self) -> int:
        return sum(1 for how in self.ended.values() if how in REQUEUED)

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
    npu_health: dict[int, str] = field(default_factory=dict)
    """Per device index, what the latest health report said since the latest snapshot (which says it
    anew): it wins over the snapshot's device health."""
    health_at: Latest = field(default_factory=Latest)
    """The latest ``GpuHealthReported`` applied (it samples GPUs, NPUs or both)."""
    suspect_until_ms: int = 0
    """Governance found jobs failing on this node: until then its healthy GPUs and NPUs count as degraded, so
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
class Facts:
    """Every entity the fold keeps, by key. ``SchedulerState`` adds what snapshots are derived from."""

    nodes: dict[tuple[str, str], NodeFacts] = field(default_factory=dict)
    clusters: dict[str, ClusterRegistered] = field(default_factory=dict)
    cluster_status: dict[str, str] = field(default_factory=dict)
    """Cluster -> its last reported status; its nodes take no work unless it is reachable."""
    profiles: dict[str, ResourceProfileUpdated] = field(default_factory=dict)
    """Cluster -> its latest roll-up profile (by version): congestion, stability, fit for training and
    inference, as the fleet projection rolled them up from the cluster's nodes."""
    tenants: dict[str, TenantRegistered] = field(default_factory=dict)
    quotas: dict[tuple[str, str], QuotaSet] = field(default_factory=dict)
    policy: PolicyConfigured | None = None
    budgets: dict[str, BudgetSet] = field(default_factory=dict)
    preempted_at: dict[str, list[int]] = field(default_factory=dict)
    """Per tenant, when its jobs were asked to stop by a preemption (sorted; the hour up to the latest is
    kept): what the policy's ``max_preemptions_per_tenant_hour`` counts."""
    budget_windows: dict[str, BudgetWindowOpened] = field(default_factory=dict)
    """Each budget's latest window opened (by start)."""
    held: HeldLedger = field(default_factory=HeldLedger)
    """The GPU time runs that ended held, per tenant, for the budgets' windows."""
    jobs: dict[str, JobFacts] = field(default_factory=dict)
    settled: set[str] = field(default_factory=set)
    """Jobs whose facts were dropped once settled; what still comes for them is ignored."""
    cycles: int = 0
    latest: dict[tuple[str, ...], Latest] = field(default_factory=dict)
    """The latest report applied of each cluster's registration and status, tenant, and per author of each
    queue's quota and of the policy, by (kind, key..., author): an older one, or the same one again,
    changes nothing."""

    def job(self, job_id: str) -> JobFacts:
        facts = self.jobs.get(job_id)
        if facts is None:
            if job_id in self.settled:
                return JobFacts()  # folded into nothing: a settled job's later records change no decision
            facts = self.jobs[job_id] = JobFacts()
        return facts
