"""Preemption: the smallest set of running jobs whose stop lets a waiting job fit.

Called by the cycle for a job that fits nowhere. Rules, in this order: a victim must be preemptible and
have interruption budget left; inference is never preempted for anything but inference; a victim either
has a lower priority class than the preemptor (``PriorityPreemption``) or belongs to another tenant that
is above its guaranteed quota while the preemptor's tenant stays within its own (``ReclaimBorrowedQuota``,
tried first). Victims are released greedily (reclaim first, then lowest priority, fewest GPUs, least
progress lost), then any victim not needed is put back, so the set is minimal. Between clusters the set
whose most important victim is least important wins, then the one taking the fewest GPUs away (a
standard job is never stopped where a best-effort one would do). Everything is a what-if on the fleet
arrays and undone before returning.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.scheduler.core.policy.capacity import per_node
from services.scheduler.core.policy.context import Ctx
from services.scheduler.core.policy.fleet import Demand
from services.scheduler.core.policy.model import Job, JobKind, RunningJob, priority_rank
from services.scheduler.core.policy.reasons import ReasonCode


@dataclass(frozen=True, slots=True)
class Victim:
    running: RunningJob
    rule: ReasonCode


def _rule(ctx: Ctx, job: Job, v: RunningJob) -> ReasonCode | None:
    vj = v.job
    if not vj.preemptible or vj.times_preempted >= vj.interruption_budget or vj.job_id == job.job_id:
        return None
    if vj.kind is JobKind.INFERENCE and job.kind is not JobKind.INFERENCE:
        return None
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


def _fits(ctx: Ctx, job: Job, d: Demand, lo: int, hi: int) -> bool:
    return int(per_node(ctx.fleet, d, lo, hi).sum()) >= job.replicas


def _release(ctx: Ctx, v: RunningJob, sign: int) -> None:
    for p in v.placements:
        if p.node_id not in ctx.fleet.index:
            continue
        if sign > 0:
            ctx.fleet.give(p, v.job.cpu_milli, v.job.memory_mib)
        else:
            ctx.fleet.retake(p, v.job.cpu_milli, v.job.memory_mib)


def find_victims(ctx: Ctx, job: Job, d: Demand) -> tuple[int, list[Victim]] | None:
    """(cluster position, minimal victims) whose most important victim is the least important, then with
    the fewest GPUs taken away, or None."""
    fs = ctx.fleet
    best: tuple[tuple[int, int, int, str], int, list[Victim]] | None = None
    for ci, (lo, hi) in enumerate(fs.cluster_range):
        cid = fs.clusters[ci]
        eligible = []
        for v in ctx.running:
            if v.cluster != cid:
                continue
            rule = _rule(ctx, job, v)
            if rule is not None:
                eligible.append(Victim(v, rule))
        if not eligible:
            continue
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
            if _fits(ctx, job, d, lo, hi):
                break
        if not _fits(ctx, job, d, lo, hi):
            for x in reversed(chosen):
                _release(ctx, x.running, -1)
            continue
        for x in list(reversed(chosen)):  # minimality: put back every victim not needed
            _release(ctx, x.running, -1)
            if _fits(ctx, job, d, lo, hi):
                chosen.remove(x)
            else:
                _release(ctx, x.running, +1)
        for x in chosen:
            _release(ctx, x.running, -1)
        if not chosen:
            # It fits here with no victim at all: what keeps it off is not the room (a node it may not
            # use now, as one held for a gang), and stopping anyone would not place it.
            continue
        gpus = sum(x.running.job.total_gpu_milli() for x in chosen)
        # Between clusters, as within one: stop the least important jobs first (the most important victim
        # of the set decides), then take the fewest GPUs away, then stop the fewest jobs.
        most_important = min(priority_rank(x.running.job.priority_class) for x in chosen)
        key = (-most_important, gpus, len(chosen), str(cid))
        if best is None or key < best[0]:
            best = (key, ci, sorted(chosen, key=lambda x: str(x.running.job.job_id)))
    if best is None:
        return None
    return best[1], best[2]


__all__ = ["Victim", "find_victims"]
