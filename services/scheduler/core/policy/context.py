"""The working state of one cycle, and the placement of one whole job (all replicas, one cluster).

Called by the cycle, preemption, backfill and explanations. ``try_place`` places a job's replicas one by
one in each candidate cluster (what-if, rolled back), ranks the clusters with the federation score and
returns the best plan; ``commit`` applies a plan exactly as it was tried.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from events.catalog.profiles import is_hot
from services.scheduler.core.policy import topology
from services.scheduler.core.policy.budgets import BudgetBook
from services.scheduler.core.policy.capacity import per_node
from services.scheduler.core.policy.fairshare import Held
from services.scheduler.core.policy.federation import ClusterScore, score_clusters
from services.scheduler.core.policy.fleet import Demand, FleetState
from services.scheduler.core.policy.model import (
    Cluster,
    ClusterId,
    FleetSnapshot,
    Job,
    PolicyConfig,
    ReplicaPlacement,
    RunningJob,
    TenantId,
)
from services.scheduler.core.policy.placer import MASKED, Choice, Placer
from services.scheduler.core.policy.quota import QuotaBook

I64 = npt.NDArray[np.int64]
HOT_PENALTY = 10_000_000_000
REMEMBER_ALIKE = True
"""A cycle remembers what it found for a job to reuse it for jobs alike in all it reads of them (the
preemption search that found nothing, the explanation of a wait). Off only in the test that proves the
answers the same without."""


@dataclass(frozen=True, slots=True)
class Plan:
    cluster: int
    choices: tuple[Choice, ...]
    cost: int
    models: tuple[str, ...]
    npu_models: tuple[str, ...] = ()


_BY_JOB_ID = operator.attrgetter("job.job_id")


@dataclass(slots=True)
class Reservation:
    job_id: str
    cluster: int
    nodes: frozenset[int]
    start_ms: int


@dataclass(slots=True)
class Ctx:
    snap: FleetSnapshot
    config: PolicyConfig
    fleet: FleetState
    placer: Placer
    profiles: dict[ClusterId, Cluster]
    book: QuotaBook
    pressure: dict[str, int]
    hot_usage: dict[TenantId, int] = field(default_factory=dict)
    npu_pressure: dict[str, int] = field(default_factory=dict)
    """Per NPU model, the allocated share of its working NPUs (``capacity.npu_model_pressure``)."""
    hot_npu_usage: dict[TenantId, int] = field(default_factory=dict)
    """Per tenant, the milli-NPU (1000 an NPU) its runs hold of hot NPU models."""
    held: dict[TenantId, Held] = field(default_factory=dict)  # what running jobs hold, per tenant
    reservation: Reservation | None = None
    budgets: BudgetBook | None = None  # the hard budgets in force (None: none)
    preempted: dict[TenantId, int] = field(default_factory=dict)
    """Per tenant, its jobs asked to stop within the policy's hour (the snapshot's, then this cycle's)."""
    preemptions: int = 0  # jobs asked to stop in this cycle
    generation: int = 0
    """Counts what may let a preemption search succeed where an earlier one failed: a tenant that starts
    borrowing (its running jobs become reclaimable) and a reservation (another mask). Nothing else in a
    cycle can: placements and preemptions only take room and candidates away, and add to the counts
    the limits hold. A search that found nothing at one generation finds nothing again at the same one."""
    no_room: dict[object, int] = field(default_factory=dict)
    """Preemption searches that found nothing, by what they read of the job -> the generation then."""
    _running: list[RunningJob] | None = None
    _stopping: dict[str, list[RunningJob]] | None = None

    @property
    def running(self) -> list[RunningJob]:
        """The running jobs in id order. Sorted on first use: only preemption and backfill read them,
        and a cycle where everything fits should not pay for sorting thousands of jobs."""
        if self._running is None:
            self._running = sorted(self.snap.running, key=_BY_JOB_ID)
        return self._running

    @running.setter
    def running(self, value: list[RunningJob]) -> None:
        self._running = value

    def stopping_for(self, job_id: str) -> list[RunningJob]:
        """The running jobs stopping to make room for ``job_id``, in id order (indexed on first use)."""
        if self._stopping is None:
            self._stopping = {}
            for r in self.running:
                if r.stopping_for is not None:
                    self._stopping.setdefault(r.stopping_for, []).append(r)
        return self._stopping.get(job_id, [])

    @property
    def hot(self) -> frozenset[str]:
        return frozenset(m for m, p in self.pressure.items() if is_hot(p, self.config.hot_pressure_milli))

    @property
    def hot_npus(self) -> frozenset[str]:
        """The hot NPU models, by the one definition GPU models are judged by (``is_hot``)."""
        if not self.npu_pressure:
            return frozenset()
        return frozenset(m for m, p in self.npu_pressure.items() if is_hot(p, self.config.hot_pressure_milli))

    def hot_cap(self, tenant: TenantId) -> int | None:
        t = self.book.tenants.get(tenant)
        if t is not None and t.hot_model_cap_milli is not None:
            return t.hot_model_cap_milli
        return self.config.hot_model_cap_milli

    def model_at(self, c: Choice) -> str:
        """The GPU model of the cards a choice takes ("" for none)."""
        return self.fleet.model_of_slots(c.node, c.slots)

    def extra_for(
        self, job: Job, d: Demand, forbid_hot: bool, backfill_ok: bool, forbid_hot_npu: bool = False
    ) -> I64 | None:
        """Per-node extra cost: hot-model steering, a hot-model ban (GPU models, NPU models), nodes
        reserved for a gang."""
        fs = self.fleet
        extra: I64 | None = None
        hot = self.hot
        if hot and (d.gpus or d.gpu_milli):
            is_hot = np.zeros(fs.size, dtype=np.bool_)
            for m in sorted(hot):
                if m in fs.models:
                    is_hot |= fs.model_of == fs.models.index(m)
            if forbid_hot:
                extra = np.where(is_hot, MASKED, 0).astype(np.int64)
            elif len(d.models) != 1:  # the job accepts several models: steer it off hot ones
                extra = np.where(is_hot, HOT_PENALTY // max(1, fs.size), 0).astype(np.int64)
        hot_npus = self.hot_npus if d.npus else frozenset()
        if hot_npus:
            on_hot = np.zeros(fs.size, dtype=np.bool_)
            for m in sorted(hot_npus):
                on_hot |= (fs.npu_model_of == fs.npu_models.index(m)).any(axis=1)
            npu_extra: I64 | None = None
            if forbid_hot_npu:
                npu_extra = np.where(on_hot, MASKED, 0).astype(np.int64)
            elif len(d.npu_models) != 1:  # the job accepts several NPU models: steer it off hot ones
                npu_extra = np.where(on_hot, HOT_PENALTY // max(1, fs.size), 0).astype(np.int64)
            if npu_extra is not None:
                extra = npu_extra if extra is None else np.maximum(extra, npu_extra)
        r = self.reservation
        if r is not None and r.job_id != job.job_id and not backfill_ok:
            mask = np.zeros(fs.size, dtype=np.int64)
            mask[sorted(r.nodes)] = MASKED
            extra = mask if extra is None else np.maximum(extra, mask)
        return extra

    def try_place(self, job: Job, d: Demand, extra: I64 | None) -> tuple[Plan, list[ClusterScore]] | None:
        fs = self.fleet
        plans: dict[ClusterId, Plan] = {}
        cands: list[tuple[ClusterId, int, int]] = []
        kind = topology.required(job)
        for ci, (lo, hi) in enumerate(fs.cluster_range):
            # For one replica the trial is the capacity count: its choice is None exactly when no node
            # (outside the masked ones) fits it.
            within = extra
            if job.replicas > 1 or kind is not None:
                cap = per_node(fs, d, lo, hi)
                if extra is not None:
                    cap = np.where(extra[lo:hi] < MASKED, cap, 0)
                if not topology.fits(job, cap, fs, lo, hi):
                    continue
                if kind is not None:  # the first replica goes to a domain with room for all of them
                    out = topology.outside(fs, kind, cap, job, lo, hi) * MASKED
                    within = out if extra is None else np.maximum(extra, out)
            plan = self._trial(ci, job, d, within)
            if plan is None:
                continue
            cid = fs.clusters[ci]
            plans[cid] = plan
            hot = max([self.pressure.get(m, 0) for m in plan.models] + [0])
            cands.append((cid, plan.cost, hot))
        if not cands:
            return None
        models = {cid: plan.models for cid, plan in plans.items()}
        weights = self.config.cluster_weights
        ranked = score_clusters(cands, self.profiles, job.datasets, weights, job=job, models=models)
        return plans[ranked[0].cluster], ranked

    def _trial(self, ci: int, job: Job, d: Demand, extra: I64 | None) -> Plan | None:
        fs, placer = self.fleet, self.placer
        lo, hi = fs.cluster_range[ci]
        if job.replicas == 1:  # nothing to take and give back: no later replica depends on this one
            c = placer.choose(d, lo, hi, extra)
            if c is None:
                return None
            model = self.model_at(c)
            npu = self.fleet.npu_model_of_slots(c.node, c.npu_slots)
            return Plan(ci, (c,), c.cost, (model,) if model else (), (npu,) if npu else ())
        taken: list[ReplicaPlacement] = []
        choices: list[Choice] = []
        cur = extra
        hard, soft = topology.required(job), topology.preferred(job)
        try:
            for r in range(job.replicas):
                c = placer.choose(d, lo, hi, cur)
                if c is None:
                    return None
                choices.append(c)
                taken.append(placer.place(d, c))
                if r == 0 and hard is not None:  # the rest stay in the first one's domain
                    out = topology.other_domain(fs, hard, c.node) * MASKED
                    cur = out if cur is None else np.maximum(cur, out)
                elif r == 0 and soft is not None:
                    other = topology.other_domain(fs, soft, c.node)
                    pen = other * (self.config.cross_domain_penalty // max(1, fs.size) + 1)
                    cur = pen if cur is None else np.where(cur >= MASKED, cur, cur + pen)
            models = tuple(sorted({self.model_at(c) for c in choices} - {""}))
            npus = tuple(sorted({fs.npu_model_of_slots(c.node, c.npu_slots) for c in choices} - {""}))
            return Plan(ci, tuple(choices), sum(c.cost for c in choices), models, npus)
        finally:
            for p in reversed(taken):
                placer.release(p, d)

    def commit(self, plan: Plan, d: Demand) -> tuple[ReplicaPlacement, ...]:
        return tuple(self.fleet.take(c.node, d, c.slots, c.npu_slots) for c in plan.choices)


__all__ = ["HOT_PENALTY", "Ctx", "Plan", "Reservation"]
