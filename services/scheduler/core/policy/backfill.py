"""Backfill: when a waiting job could start, and the reservation of the head-of-line gang job.

Called by the cycle (reservations) and by explanations (estimated start times). Running jobs are assumed
to end at ``started_at + expected runtime`` (or their maximum runtime, or the policy default); releasing
them in that order on a copy of the capacity, the first moment a job's replicas all fit in one cluster is
its estimated start (all in one domain, for a job that requires an interconnect: ``topology``). The
reservation holds the nodes the gang would then use; a later job may run on
them only if its maximum runtime ends before the reservation starts.
"""

from __future__ import annotations

import numpy as np

from services.scheduler.core.policy import topology
from services.scheduler.core.policy.capacity import I64, per_node
from services.scheduler.core.policy.context import Ctx, Reservation
from services.scheduler.core.policy.fleet import Demand, FleetState
from services.scheduler.core.policy.model import Job, RunningJob


def expected_end_ms(ctx: Ctx, r: RunningJob) -> int:
    j = r.job
    runtime = j.expected_runtime_s or j.max_runtime_s or ctx.config.default_runtime_s
    return max(ctx.snap.now_ms, r.started_at_ms + runtime * 1000)


def earliest_start(ctx: Ctx, job: Job, d: Demand) -> tuple[int, int, list[int]] | None:
    """(start ms, cluster position, node positions to use) at the earliest, or None if never."""
    fs = ctx.fleet
    best: tuple[int, int, list[int]] | None = None
    ends = sorted(ctx.running, key=lambda r: (expected_end_ms(ctx, r), str(r.job.job_id)))
    for ci, (lo, hi) in enumerate(fs.cluster_range):
        cid = fs.clusters[ci]
        released = []
        when: int | None = None
        try:
            if topology.fits(job, per_node(fs, d, lo, hi), fs, lo, hi):
                when = ctx.snap.now_ms
            else:
                for r in ends:
                    if r.cluster != cid:
                        continue
                    for p in r.placements:
                        if p.node_id in fs.index:
                            fs.give(p, r.job.cpu_milli, r.job.memory_mib)
                    released.append(r)
                    if topology.fits(job, per_node(fs, d, lo, hi), fs, lo, hi):
                        when = expected_end_ms(ctx, r)
                        break
            if when is not None and (best is None or (when, ci) < (best[0], best[1])):
                cap = _within_one_domain(fs, job, per_node(fs, d, lo, hi), lo, hi)
                order = np.argsort(fs.tiebreak[lo:hi], kind="stable")
                nodes: list[int] = []
                need = job.replicas
                for j in order:
                    if need <= 0:
                        break
                    k = int(cap[j])
                    if k > 0:
                        nodes.append(lo + int(j))
                        need -= k
                best = (when, ci, sorted(nodes))
        finally:
            for r in reversed(released):
                for p in r.placements:
                    if p.node_id in fs.index:
                        fs.retake(p, r.job.cpu_milli, r.job.memory_mib)
    return best


def _within_one_domain(fs: FleetState, job: Job, cap: I64, lo: int, hi: int) -> I64:
    """``cap`` on the nodes of the domain with the most room, for a job that requires an interconnect
    (its reservation holds nodes of one domain); ``cap`` as it is otherwise."""
    kind = topology.required(job)
    if kind is None:
        return cap
    best = topology.largest_room(fs, kind, cap, lo, hi).domain
    return np.where(topology.domain_of(fs, kind)[lo:hi] == best, cap, 0)


def reserve(ctx: Ctx, job: Job, d: Demand) -> Reservation | None:
    got = earliest_start(ctx, job, d)
    if got is None:
        return None
    start, ci, nodes = got
    return Reservation(job_id=str(job.job_id), cluster=ci, nodes=frozenset(nodes), start_ms=start)


def may_backfill(ctx: Ctx, job: Job) -> bool:
    r = ctx.reservation
    if r is None or job.max_runtime_s is None:
        return False
    return ctx.snap.now_ms + job.max_runtime_s * 1000 <= r.start_ms


__all__ = ["earliest_start", "expected_end_ms", "may_backfill", "reserve"]
