"""Preemption: the smallest set of running jobs whose stop lets a waiting job fit.

Called by the cycle's ``preempt`` step (``job_steps``) for a job that fits nowhere. Rules, in this order:
a victim must be preemptible, not stopping already, within its class's interruption budget
(``PreemptionRules``), have run its class's minimum runtime, and belong to a tenant under the policy's
hourly preemption limit; inference is never preempted for anything but inference; a victim either has a
lower priority class than the preemptor (``PriorityPreemption``) or belongs to another tenant that is
above its guaranteed quota while the preemptor's tenant stays within its own (``ReclaimBorrowedQuota``,
tried first).

The jobs already stopping to make room for this very job (asked in an earlier cycle) count as released
first: when their room is enough, nobody else is asked; when it is not, only the difference is. Victims
are released greedily (reclaim first, then lowest priority, fewest GPUs, least progress lost), then any
victim not needed is put back, so the set is minimal; a set that would break the policy's per-cycle or
per-tenant limits is not used. Between clusters the set whose most important victim is least important
wins, then the one taking the fewest GPUs away (a standard job is never stopped where a best-effort one
would do). Room is counted on the nodes the job may use (off a gang's reservation, off hot models when
its tenant is over its cap) and, for a job that requires an interconnect, inside one NVLink domain or
RDMA fabric: a set of victims that frees room spread over several domains does not make room for it.
Everything is a what-if on the fleet arrays and undone before returning.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from services.scheduler.core.policy import topology
from services.scheduler.core.policy.capacity import per_node
from services.scheduler.core.policy.context import I64, Ctx
from services.scheduler.core.policy.fleet import Demand
from services.scheduler.core.policy.model import PRIORITY_ORDER, Job, JobKind, RunningJob, TenantId, priority_rank
from services.scheduler.core.policy.placer import MASKED
from services.scheduler.core.policy.reasons import ReasonCode


@dataclass(frozen=True, slots=True)
class Victim:
    running: RunningJob
    rule: ReasonCode


@dataclass(frozen=True, slots=True)
class Room:
    """Where room is made for a job: the cluster (its position), the jobs to ask to stop now (sorted by
    id; possibly none) and those already stopping for it there."""

    cluster: int
    victims: tuple[Victim, ...]
    stopping: tuple[RunningJob, ...]


def _rule(ctx: Ctx, job: Job, v: RunningJob) -> ReasonCode | None:
    vj = v.job
    if v.stopping or not vj.preemptible or vj.job_id == job.job_id:
        return None
    if vj.kind is JobKind.INFERENCE and job.kind is not JobKind.INFERENCE:
        return None
    rule = _allowed_by(ctx, job, vj)
    if rule is None:  # most running jobs, in a long queue: the cheap test first
        return None
    rules = ctx.config.rules_for(vj.priority_class)
    if (
        vj.times_preempted >= rules.interruption_budget
        or ctx.snap.now_ms - v.started_at_ms < rules.min_runtime_s * 1000
    ):
        return None
    limit = ctx.config.max_preemptions_per_tenant_hour
    if limit is not None and ctx.preempted.get(vj.tenant, 0) >= limit:
        return None
    return rule


def _allowed_by(ctx: Ctx, job: Job, vj: Job) -> ReasonCode | None:
    """The rule that lets ``job`` stop ``vj``, if one does."""
    if (
        vj.tenant != job.tenant
        and ctx.book.borrowing(vj.tenant)
        and ctx.book.within_guaranteed(job, None)
        and priority_rank(vj.priority_class) >= priority_rank(job.priority_class)
    ):
        return ReasonCode.RECLAIM_BORROWED
    if priority_rank(vj.priority_class) > priority_rank(job.priority_class):
        return ReasonCode.PRIORITY_PREEMPTION
    return None


def _over_tenant_limit(ctx: Ctx, asked: Counter[TenantId]) -> bool:
    limit = ctx.config.max_preemptions_per_tenant_hour
    return limit is not None and any(ctx.preempted.get(t, 0) + n > limit for t, n in asked.items())


def within_limits(ctx: Ctx, victims: tuple[Victim, ...]) -> bool:
    """Would asking these victims keep the cycle and their tenants within the policy's limits?"""
    per_cycle = ctx.config.max_preemptions_per_cycle
    if per_cycle is not None and ctx.preemptions + len(victims) > per_cycle:
        return False
    return not _over_tenant_limit(ctx, Counter(v.running.job.tenant for v in victims))


def count_asked(ctx: Ctx, victims: tuple[Victim, ...]) -> None:
    """Count victims asked to stop against the cycle's and their tenants' limits."""
    ctx.preemptions += len(victims)
    for v in victims:
        tenant = v.running.job.tenant
        ctx.preempted[tenant] = ctx.preempted.get(tenant, 0) + 1


def _fits(ctx: Ctx, job: Job, d: Demand, lo: int, hi: int, extra: I64 | None) -> bool:
    cap = per_node(ctx.fleet, d, lo, hi)
    if extra is not None:
        cap = np.where(extra[lo:hi] < MASKED, cap, 0)
    return topology.fits(job, cap, ctx.fleet, lo, hi)


def _release(ctx: Ctx, v: RunningJob, sign: int) -> None:
    for p in v.placements:
        if p.node_id not in ctx.fleet.index:
            continue
        if sign > 0:
            ctx.fleet.give(p, v.job.cpu_milli, v.job.memory_mib)
        else:
            ctx.fleet.retake(p, v.job.cpu_milli, v.job.memory_mib)


_NO_NEW_VICTIM = -len(PRIORITY_ORDER) - 1  # ranks before any set that asks somebody new to stop


def find_victims(ctx: Ctx, job: Job, d: Demand, extra: I64 | None = None) -> Room | None:
    """The room to make for ``job``: the cluster whose minimal set of new victims has the least
    important most important victim, then takes the fewest GPUs away; a cluster where the jobs already
    stopping for it are enough comes first. None if no cluster can make room within the rules."""
    fs = ctx.fleet
    best: tuple[tuple[int, int, int, str], Room] | None = None
    owed = ctx.stopping_for(job.job_id)
    for ci, cid in enumerate(fs.clusters):
        stopping = tuple(r for r in owed if r.cluster == cid)
        for r in stopping:
            _release(ctx, r, +1)
        try:
            sets = [
                _minimal_set(ctx, job, d, ci, within, bool(stopping), nodes)
                for within, nodes in _scopes(ctx, job, ci, extra)
            ]
        finally:
            for r in reversed(stopping):
                _release(ctx, r, -1)
        for chosen in sets:
            if chosen is None or not (chosen or stopping) or not within_limits(ctx, chosen):
                # Nothing to stop here, or (fitting with no victim at all) what keeps the job off is not the
                # room, as a node held for a gang: stopping anyone would not place it.
                continue
            gpus = sum(x.running.job.total_gpu_milli() for x in chosen)
            # Between clusters, as within one: stop the least important jobs first (the most important
            # victim of the set decides), then take the fewest GPUs away, then stop the fewest jobs.
            most_important = min((priority_rank(x.running.job.priority_class) for x in chosen), default=None)
            rank = _NO_NEW_VICTIM if most_important is None else -most_important
            key = (rank, gpus, len(chosen), str(cid))
            if best is None or key < best[0]:
                best = (key, Room(ci, chosen, stopping))
    return None if best is None else best[1]


def _scopes(ctx: Ctx, job: Job, ci: int, extra: I64 | None) -> list[tuple[I64 | None, frozenset[str] | None]]:
    """Where room may be made in cluster ``ci``: the whole cluster, or, for a job that requires an
    interconnect, each of its domains of that kind apart (the nodes outside masked, and the ids of the
    nodes inside, whose running jobs alone may be victims), in domain order."""
    kind = topology.required(job)
    if kind is None:
        return [(extra, None)]
    fs = ctx.fleet
    lo, hi = fs.cluster_range[ci]
    dom = topology.domain_of(fs, kind)
    out: list[tuple[I64 | None, frozenset[str] | None]] = []
    for number in sorted(set(dom[lo:hi].tolist()) - {-1}):
        inside = dom == number
        mask = np.where(inside, 0, MASKED).astype(np.int64)
        within = mask if extra is None else np.maximum(extra, mask)
        out.append((within, frozenset(fs.node_ids[i] for i in np.flatnonzero(inside[lo:hi]) + lo)))
    return out


def _minimal_set(
    ctx: Ctx, job: Job, d: Demand, ci: int, extra: I64 | None, released: bool, nodes: frozenset[str] | None = None
) -> tuple[Victim, ...] | None:
    """The fewest eligible victims in cluster ``ci`` whose stop lets the job fit there (in id order;
    none if it fits already), or None if stopping every one of the first ``max_victims`` would not.
    ``released``: room was given back before (jobs stopping for it), so it may fit with no victim.
    ``nodes``: only jobs running on one of these may be victims (None: any in the cluster)."""
    lo, hi = ctx.fleet.cluster_range[ci]
    if released and _fits(ctx, job, d, lo, hi, extra):
        return ()
    cid = ctx.fleet.clusters[ci]
    eligible = []
    for v in ctx.running:
        if v.cluster != cid or (nodes is not None and not any(p.node_id in nodes for p in v.placements)):
            continue
        rule = _rule(ctx, job, v)
        if rule is not None:
            eligible.append(Victim(v, rule))
    if not eligible:
        return None
    eligible.sort(
        key=lambda x: (
            0 if x.rule is ReasonCode.RECLAIM_BORROWED else 1,
            -priority_rank(x.running.job.priority_class),
            x.running.job.total_gpu_milli(),
            -x.running.started_at_ms,
            str(x.running.job.job_id),
        )
    )
    chosen: list[Victim] = []
    for x in eligible[: ctx.config.max_victims]:
        _release(ctx, x.running, +1)
        chosen.append(x)
        if _fits(ctx, job, d, lo, hi, extra):
            break
    if not _fits(ctx, job, d, lo, hi, extra):
        for x in reversed(chosen):
            _release(ctx, x.running, -1)
        return None
    for x in list(reversed(chosen)):  # minimality: put back every victim not needed
        _release(ctx, x.running, -1)
        if _fits(ctx, job, d, lo, hi, extra):
            chosen.remove(x)
        else:
            _release(ctx, x.running, +1)
    for x in chosen:
        _release(ctx, x.running, -1)
    return tuple(sorted(chosen, key=lambda x: str(x.running.job.job_id)))


__all__ = ["Room", "Victim", "count_asked", "find_victims", "within_limits"]
