"""One job's turn in a scheduling cycle: ``decide_job(ctx, job) -> Verdict``, the steps of ``JOB_STEPS``
tried in order. Pure and deterministic.

Called by the cycle (``schedule``, step 3 of its recipe) once per pending job, in fair-share order. Each
step takes the cycle's working state (``Ctx``: the fleet arrays, the quota book, hot-model usage, the
reservation) and the job's ``Turn``, and returns a ``Verdict`` (decisions made, the job left waiting with
the reason found, or both) or ``None``: go on to the next step. ``wait``, the last step, always gives one.
Steps that place, preempt or reserve change ``Ctx`` as they decide; ``hot_model_cap`` and
``honour_reservation`` only note on the turn what later steps read. Calls the placer through
``Ctx.try_place``, preemption (``find_victims``), backfill (``may_backfill``, ``reserve``), the quota
book and the budget book.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from services.scheduler.core.policy import backfill, context, topology
from services.scheduler.core.policy.capacity import per_node
from services.scheduler.core.policy.context import I64, Ctx, Plan
from services.scheduler.core.policy.decisions import (
    AddReplicas,
    CandidateScore,
    Constraint,
    Decision,
    Place,
    Preempt,
    Reserve,
)
from services.scheduler.core.policy.explain import describe, moment
from services.scheduler.core.policy.federation import ClusterScore
from services.scheduler.core.policy.federation_why import why_first
from services.scheduler.core.policy.fleet import Demand
from services.scheduler.core.policy.model import ClusterId, Job, ReplicaPlacement, RunningJob
from services.scheduler.core.policy.placer import MASKED
from services.scheduler.core.policy.preemption import Room, count_asked, find_victims
from services.scheduler.core.policy.quota import QuotaCheck, fmt_amount
from services.scheduler.core.policy.reasons import ReasonCode


class Waiting(NamedTuple):
    """A job left waiting, for the cycle to explain and put in the queue."""

    job: Job
    demand: Demand
    reason: ReasonCode | None  # found before the fleet was searched; None: explain it from the fleet
    note: str  # that reason's numbers in words
    constraint: Constraint | None  # the same as a ``Constraint``


class Verdict(NamedTuple):
    """What a step decided for the job: the decisions made, in order, and the job's place in the queue
    if it waits (None: it was placed)."""

    made: tuple[Decision, ...]
    waits: Waiting | None


@dataclass(slots=True)
class Turn:
    """One job's working record in the cycle: the job, what one replica asks for, and what the steps so
    far found."""

    job: Job
    demand: Demand
    borrowed: bool = False  # within_quota: the job uses quota above its tenant's guarantee
    hot_cap: int | None = None  # hot_model_cap: the tenant's cap on hot models (GPU and NPU alike)
    forbid_hot: bool = False  # hot_model_cap: the job would take the tenant above that cap on hot GPU models
    forbid_hot_npu: bool = False  # hot_model_cap: ... above that cap on hot NPU models
    may_backfill: bool = False  # honour_reservation: it ends before the reservation starts
    extra: I64 | None = None  # honour_reservation: the per-node extra cost of the room it may use
    grows: RunningJob | None = None  # a top-up: the run that holds fewer replicas than ``job`` adds
    asked: int | None = None  # a spread job's first part: ``job`` is capped per cluster, this is all it asks

    def waits(self, reason: ReasonCode | None, note: str = "", constraint: Constraint | None = None) -> Verdict:
        return Verdict((), Waiting(self.job, self.demand, reason, note, constraint))


Step = Callable[[Ctx, Turn], Verdict | None]


def asks_nothing(ctx: Ctx, t: Turn) -> Verdict | None:
    """A job that asks for no resources, or no replicas, fits nowhere meaningful: it waits."""
    d = t.demand
    if t.job.replicas <= 0 or not (d.gpus or d.gpu_milli or d.cpu_milli or d.memory_mib or d.npus):
        return t.waits(ReasonCode.NO_FEASIBLE_NODE, "the job asks for nothing")
    return None


def within_quota(ctx: Ctx, t: Turn) -> Verdict | None:
    """The tenant's (and queue's) limits, borrowing from its cohort; refused with ``QuotaExceeded``.
    GPU-model quotas are checked on the model the plan uses (``place``, ``fewer_replicas``)."""
    q = ctx.book.check(t.job, None)
    if not q.ok:
        return t.waits(ReasonCode.QUOTA_EXCEEDED, q.message, quota_constraint(q))
    t.borrowed = q.borrowed
    return None


def within_budget(ctx: Ctx, t: Turn) -> Verdict | None:
    """Every hard GPU-hour budget of the tenant (its own, its cohort's) has what the job is expected to
    need of it left this window (``budgets``); refused with ``BudgetExceeded``, naming the budget, what is
    left and what the job needs."""
    book = ctx.budgets
    refused = book.refusal(t.job) if book is not None else None
    if refused is None:
        return None
    return t.waits(ReasonCode.BUDGET_EXCEEDED, refused.message(t.job, ctx.snap.now_ms))


def hot_model_cap(ctx: Ctx, t: Turn) -> Verdict | None:
    """Hot-spot governance: would this job take its tenant above its cap on hot GPU models, or on hot NPU
    models (the same cap, counted apart: milli-GPU of hot GPU models, milli-NPU of hot NPU models)? Then it
    is kept off them (``honour_reservation`` masks them; ``hot_model_wait`` says so if that is what holds
    it). Decides nothing."""
    job = t.job
    t.hot_cap = cap = ctx.hot_cap(job.tenant)
    t.forbid_hot = cap is not None and ctx.hot_usage.get(job.tenant, 0) + job.total_gpu_milli() > cap
    if cap is not None and job.npus and ctx.hot_npus:
        t.forbid_hot_npu = ctx.hot_npu_usage.get(job.tenant, 0) + job.total_npu_milli() > cap
    return None


def honour_reservation(ctx: Ctx, t: Turn) -> Verdict | None:
    """The room the job may use: off the head-of-line gang's reserved nodes unless it may backfill onto
    them (its maximum runtime ends before the reservation starts), steered off hot models if it accepts
    several, off them altogether if over its hot-model cap. Decides nothing."""
    t.may_backfill = backfill.may_backfill(ctx, t.job)
    t.extra = ctx.extra_for(t.job, t.demand, t.forbid_hot, t.may_backfill, t.forbid_hot_npu)
    return None


def place(ctx: Ctx, t: Turn) -> Verdict | None:
    """All replicas in one cluster: a what-if per cluster, the federation score, commit the best. The
    plan's GPU model must be within the tenant's quota for that model."""
    job, d = t.job, t.demand
    got = ctx.try_place(job, d, t.extra)
    if got is None:
        return None
    plan, ranked = got
    q = ctx.book.check(job, *plan_models(plan))
    if not q.ok:
        return t.waits(ReasonCode.QUOTA_EXCEEDED, q.message, quota_constraint(q))
    return Verdict((_place(ctx, job, d, plan, ranked, q.borrowed or t.borrowed, t.may_backfill, asked=t.asked),), None)


def hot_model_wait(ctx: Ctx, t: Turn) -> Verdict | None:
    """The job would fit on a hot model, but its tenant's cap keeps it off: that cap is why it waits."""
    job, d = t.job, t.demand
    if not (t.forbid_hot or t.forbid_hot_npu):
        return None
    if ctx.try_place(job, d, ctx.extra_for(job, d, False, t.may_backfill)) is None:
        return None
    cap = t.hot_cap or 0
    if t.forbid_hot and (job.total_gpu_milli() or not t.forbid_hot_npu):
        kind, used, asked, hot = "GPU", ctx.hot_usage.get(job.tenant, 0), job.total_gpu_milli(), ctx.hot
    else:
        kind, used, asked, hot = "NPU", ctx.hot_npu_usage.get(job.tenant, 0), job.total_npu_milli(), ctx.hot_npus
    # Amounts in milli-device, shown as devices (fmt_amount's milli-GPU formatting counts NPUs alike).
    note = (
        f"{job.tenant} holds {fmt_amount('gpu', used)} {kind}s of hot models ({', '.join(sorted(hot))}); "
        f"this job would take it to {fmt_amount('gpu', used + asked)}, above its cap of "
        f"{fmt_amount('gpu', cap)}"
    )
    left = max(0, cap - used)
    if kind == "GPU":
        constraint = Constraint(ReasonCode.HOT_MODEL_CAP, "gpu", None, None, asked, left)
    else:  # a Constraint counts NPUs whole
        constraint = Constraint(ReasonCode.HOT_MODEL_CAP, "npu", None, None, asked // 1000, left // 1000)
    return t.waits(ReasonCode.HOT_MODEL_CAP, note, constraint)


def preempt(ctx: Ctx, t: Turn) -> Verdict | None:
    """The smallest set of eligible lower-priority or borrowing jobs to stop, counting those already
    stopping for it; the job waits for them."""
    job = t.job
    if not ctx.config.preemption:
        return None
    # In a long queue most jobs find nothing to stop, and a job like one that found nothing finds
    # nothing again until something changes: the search reads only these of it (and nothing stops for it).
    alike = (
        job.tenant,
        job.queue,
        job.priority_class,
        job.kind,
        job.replicas,
        t.demand,
        t.forbid_hot,
        t.may_backfill,
        topology.required(job),
    )
    owed = ctx.stopping_for(job.job_id)
    if context.REMEMBER_ALIKE and not owed and ctx.no_room.get(alike) == ctx.generation:
        return None
    room = find_victims(ctx, job, t.demand, t.extra)
    if room is None:
        if not owed:
            ctx.no_room[alike] = ctx.generation
        return None
    cid = ctx.fleet.clusters[room.cluster]
    made: list[Decision] = []
    for v in room.victims:
        vj = v.running.job
        grace = ctx.config.rules_for(vj.priority_class).grace_period_s
        made.append(
            Preempt(
                victim=vj.job_id,
                victim_tenant=vj.tenant,
                preemptor=job.job_id,
                cluster=cid,
                rule=v.rule,
                message=(
                    f"{vj.job_id} ({vj.priority_class.value}, {fmt_amount('gpu', vj.total_gpu_milli())} GPUs) is "
                    f"preempted for {job.job_id} ({job.priority_class.value}) in {cid} by rule {v.rule.value}; "
                    f"it has {grace} s to stop"
                ),
                grace_period_s=grace,
            )
        )
    count_asked(ctx, room.victims)
    # The victims keep their resources until their cluster reports them stopped; they cannot be chosen
    # again in this cycle (nor in a later one: they are stopping then).
    asked = {v.running.job.job_id for v in room.victims}
    ctx.running = [r for r in ctx.running if r.job.job_id not in asked]
    return Verdict(tuple(made), _waits_for_room(t, cid, room))


def _waits_for_room(t: Turn, cid: ClusterId, room: Room) -> Waiting:
    def names(jobs: Sequence[str]) -> str:
        return ", ".join(jobs[:8]) + (", ..." if len(jobs) > 8 else "")

    said = []
    if room.victims:
        asked = [v.running.job.job_id for v in room.victims]
        said.append(f"{len(asked)} job(s) in {cid} are asked to stop: {names(asked)}")
    if room.stopping:
        stopping = [r.job.job_id for r in room.stopping]
        said.append(f"{len(stopping)} job(s) in {cid} are stopping to make room for it: {names(stopping)}")
    return Waiting(
        t.job,
        t.demand,
        ReasonCode.WAITING_FOR_PREEMPTION,
        "; ".join(said),
        Constraint(ReasonCode.WAITING_FOR_PREEMPTION, cluster=cid),
    )


def fewer_replicas(ctx: Ctx, t: Turn) -> Verdict | None:
    """A job that is not a gang (``min_replicas``) takes what fits now in one cluster, once neither the
    room it asks for nor preemption can give it all of them; its run grows there later (``top_up``)."""
    job, d = t.job, t.demand
    if job.min_replicas is None:
        return None
    fewer = _most_that_fit(ctx, job, d, t.extra)
    if fewer is None:
        return None
    placing, (plan, ranked) = fewer
    q = ctx.book.check(placing, *plan_models(plan))
    if not q.ok:
        return None
    asked = t.asked or job.replicas
    return Verdict((_place(ctx, placing, d, plan, ranked, q.borrowed, t.may_backfill, asked=asked),), None)


def top_up(ctx: Ctx, t: Turn) -> Verdict:
    """A run that holds fewer replicas than its job asks grows by as many as fit now in its cluster (in
    its interconnect domain if it requires one), up to what its quota and budgets take; it never preempts
    (a run already serves, so the room it lacks is not worth another job's work) and never reserves. What
    does not fit waits silently for a later cycle: its run's placement said what waits, and the log does
    not grow with every cycle it still waits."""
    run, job, d = t.grows, t.job, t.demand
    assert run is not None
    if job.spread_clusters > 1:
        return _top_up_spread(ctx, t, run)
    fs = ctx.fleet
    if run.cluster not in fs.clusters:
        return Verdict((), None)
    ci = fs.clusters.index(run.cluster)
    lo, hi = fs.cluster_range[ci]
    extra = np.full(fs.size, MASKED, dtype=np.int64)
    extra[lo:hi] = 0
    kind = topology.required(job)
    first = fs.index.get(run.placements[0].node_id) if run.placements else None
    if kind is not None and first is not None:
        extra = np.maximum(extra, topology.other_domain(fs, kind, first) * MASKED)
    if t.extra is not None:
        extra = np.maximum(extra, t.extra)
    cap = np.where(extra[lo:hi] < MASKED, per_node(fs, d, lo, hi), 0)
    count = _admissible_count(ctx, job, min(topology.most_in_one(job, cap, fs, lo, hi), job.replicas))
    return _grow(ctx, t, run, count, extra)


def _top_up_spread(ctx: Ctx, t: Turn, run: RunningJob) -> Verdict:
    """A spread run grows as a top-up does, in the cluster that scores best among those that may take
    the most of what it lacks: one of its live parts below the per-cluster cap, or a cluster it has no
    part in while it has fewer than ``spread_clusters`` parts; never one its part left (``run.left``)."""
    job, d, fs = t.job, t.demand, ctx.fleet
    cap = -(-run.replicas_asked // job.spread_clusters)
    held: dict[ClusterId, int] = {}  # from where its replicas are (the simulations grow runs whole)
    for p in run.placements:
        row = fs.index.get(p.node_id)
        if row is not None:
            cid = fs.clusters[int(fs.cluster_of[row])]
            held[cid] = held.get(cid, 0) + 1
    fits: list[tuple[int, int]] = []  # (cluster position, replicas it may take now)
    for ci, cid in enumerate(fs.clusters):
        room = cap - held.get(cid, 0)
        if cid in run.left or room <= 0 or (cid not in held and len(held) >= job.spread_clusters):
            continue
        lo, hi = fs.cluster_range[ci]
        usable = per_node(fs, d, lo, hi)
        if t.extra is not None:
            usable = np.where(t.extra[lo:hi] < MASKED, usable, 0)
        fit = min(topology.most_in_one(job, usable, fs, lo, hi), room, job.replicas)
        if fit >= 1:
            fits.append((ci, fit))
    count = _admissible_count(ctx, job, max((fit for _, fit in fits), default=0))
    extra = np.full(fs.size, MASKED, dtype=np.int64)
    for ci, fit in fits:
        if fit >= count:
            lo, hi = fs.cluster_range[ci]
            extra[lo:hi] = 0
    if t.extra is not None:
        extra = np.maximum(extra, t.extra)
    return _grow(ctx, t, run, count, extra)


def _admissible_count(ctx: Ctx, job: Job, count: int) -> int:
    """The most of ``count`` new replicas of ``job`` its quota and budgets take, halving (0: none)."""
    while count >= 1 and not _admissible(ctx, replace(job, replicas=count)):
        count //= 2
    return max(count, 0)


def _grow(ctx: Ctx, t: Turn, run: RunningJob, count: int, extra: I64) -> Verdict:
    """Add ``count`` replicas to ``run`` where ``extra`` lets them go, if they fit and the plan's models
    are within quota; else nothing (a top-up waits silently)."""
    if count < 1:
        return Verdict((), None)
    adding = replace(t.job, replicas=count)
    got = ctx.try_place(adding, t.demand, extra)
    if got is None:
        return Verdict((), None)
    plan, ranked = got
    q = ctx.book.check(adding, *plan_models(plan))
    if not q.ok:
        return Verdict((), None)
    return Verdict((_add(ctx, adding, t.demand, plan, ranked, run, q.borrowed),), None)


def _admissible(ctx: Ctx, job: Job) -> bool:
    """Whether the quota and every hard budget of the tenant take ``job`` (a top-up's new replicas)."""
    return ctx.book.check(job, None).ok and (ctx.budgets is None or ctx.budgets.refusal(job) is None)


def reserve(ctx: Ctx, t: Turn) -> Verdict | None:
    """Hold nodes for a large head-of-line gang job (one reservation a cycle) where it will fit at the
    earliest; shorter jobs may backfill onto them. The job still waits."""
    job, d, config = t.job, t.demand, ctx.config
    if (
        not config.backfill
        or ctx.reservation is not None
        or job.replicas * max(d.gpus, 1 if d.gpu_milli else 0) < config.reservation_min_gpus
    ):
        return None
    r = backfill.reserve(ctx, job, d)
    if r is None:
        return None
    ctx.reservation = r
    ctx.generation += 1
    cid = ctx.fleet.clusters[r.cluster]
    held = Reserve(
        job_id=job.job_id,
        cluster=cid,
        nodes=tuple(ctx.fleet.node_ids[i] for i in sorted(r.nodes)),
        expected_start_ms=r.start_ms,
        message=(
            f"{len(r.nodes)} node(s) in {cid} are held for {job.job_id} "
            f"({describe(job)}), expected to start at {moment(r.start_ms)}; shorter jobs may backfill"
        ),
    )
    return Verdict((held,), Waiting(job, d, None, "", None))


def wait(ctx: Ctx, t: Turn) -> Verdict | None:
    """Otherwise the job waits in the queue; the cycle explains why from the fleet."""
    return t.waits(None)


JOB_STEPS: tuple[Step, ...] = (
    asks_nothing,
    within_quota,
    within_budget,
    hot_model_cap,
    honour_reservation,
    place,
    hot_model_wait,
    preempt,
    fewer_replicas,
    reserve,
    wait,
)
"""A job's turn, in order: the first step to give a verdict decides it."""

TOP_UP_STEPS: tuple[Step, ...] = (hot_model_cap, honour_reservation, top_up)
"""A growing run's turn (``grows``): the room it may use, then as many replicas as fit and its quota and
budgets take (checked in ``top_up`` for that many, not for all it lacks)."""


def decide_job(ctx: Ctx, job: Job, grows: RunningJob | None = None) -> Verdict:
    """``job``'s turn; with ``grows``, ``job`` stands for the replicas that run lacks (its top-up)."""
    turn = Turn(job, Demand.of(job), grows=grows)
    if grows is None and job.spread_clusters > 1 and job.replicas > (cap := job.per_cluster_cap()):
        # A spread service opens with its first part, at most the per-cluster cap; the rest are added
        # in other clusters (``top_up``) as its run grows.
        least = None if job.min_replicas is None else min(job.min_replicas, cap)
        first = replace(job, replicas=cap, min_replicas=least)
        turn = Turn(first, Demand.of(first), asked=job.replicas)
    for step in TOP_UP_STEPS if grows is not None else JOB_STEPS:
        verdict = step(ctx, turn)
        if verdict is not None:
            return verdict
    raise AssertionError("the last step, wait, always gives a verdict")


def plan_models(plan: Plan) -> tuple[str | None, str | None]:
    """The GPU model and the NPU model a plan's quota lines per model count (None: none)."""
    return (plan.models[0] if plan.models else None), (plan.npu_models[0] if plan.npu_models else None)


def quota_constraint(q: QuotaCheck) -> Constraint:
    resource, _, model = q.resource.partition(":")
    return Constraint(ReasonCode.QUOTA_EXCEEDED, resource, model or None, None, q.request, q.available)


def _most_that_fit(
    ctx: Ctx, job: Job, d: Demand, extra: I64 | None
) -> tuple[Job, tuple[Plan, list[ClusterScore]]] | None:
    """The job with as many replicas as fit now in one cluster (fewer than it asks, at least its
    ``min_replicas``) and their plan, or None. Replicas of one shape fit node by node independently, so
    the count of each cluster's nodes is exact."""
    assert job.min_replicas is not None
    fs = ctx.fleet
    most = 0
    for lo, hi in fs.cluster_range:
        cap = per_node(fs, d, lo, hi)
        if extra is not None:
            cap = np.where(extra[lo:hi] < MASKED, cap, 0)
        most = max(most, topology.most_in_one(job, cap, fs, lo, hi))
    count = min(most, job.replicas - 1)
    if count < job.min_replicas:
        return None
    fewer = replace(job, replicas=count)
    got = ctx.try_place(fewer, d, extra)
    return None if got is None else (fewer, got)


def _devices(p: ReplicaPlacement) -> str:
    """A replica's node and devices as an explanation names them: ``n1[0,1]``, ``n2[npu 0,1]``."""
    taken = [",".join(map(str, p.gpu_indices))] if p.gpu_indices else []
    if p.npu_indices:
        taken.append("npu " + ",".join(map(str, p.npu_indices)))
    return f"{p.node_id}[{'; '.join(taken)}]" if taken else p.node_id


def _candidate(s: ClusterScore, nodes: tuple[str, ...]) -> CandidateScore:
    return CandidateScore(cluster=s.cluster, nodes=nodes, breakdown=tuple(sorted(s.breakdown().items())))


def _place(
    ctx: Ctx,
    job: Job,
    d: Demand,
    plan: Plan,
    ranked: list[ClusterScore],
    borrowed: bool,
    backfilled: bool,
    *,
    asked: int | None = None,
) -> Place:
    """Commit ``plan`` and say why there: the federation score's terms, the runner-up, what broke a tie."""
    fs = ctx.fleet
    replicas = _commit(ctx, job, d, plan)
    cid = fs.clusters[plan.cluster]
    nodes = tuple(p.node_id for p in replicas)
    chosen = _candidate(ranked[0], nodes)
    runner = _candidate(ranked[1], ()) if len(ranked) > 1 else None
    reasons = [ReasonCode.PLACED] + ([ReasonCode.BACKFILLED] if backfilled else [])
    gpus = ", ".join(_devices(p) for p in replicas)
    alt = f"; runner-up {runner.cluster} scored {ranked[1].total} vs {ranked[0].total}" if runner is not None else ""
    if runner is None and len(fs.clusters) > 1:  # no comparison to give: say that none was possible
        alt = f"; the only one of the federation's {len(fs.clusters)} clusters with room for it now"
    if runner is not None and ranked[1].total == ranked[0].total:
        # Equal scores: say what decided, so "why there" never reads as chance.
        if ranked[1].placement_cost != ranked[0].placement_cost:
            alt += f", a tie won on placement cost ({ranked[0].placement_cost} vs {ranked[1].placement_cost})"
        else:
            alt += f", a tie decided by the stable cluster order ({cid} before {runner.cluster})"
    why = why_first(ranked, ctx.profiles, job.kind, ctx.fleet.cluster_has_npus)
    alt += f"; {why}" if why else ""
    share = f" ({d.gpu_milli}m each)" if d.is_share else ""
    terms = " + ".join(f"{name} {points}" for name, points in ranked[0].terms().items())
    msg = (
        f"{job.job_id} placed in {cid} on {gpus}{share} by {ctx.config.node_policy.value}: placement cost "
        f"{plan.cost}, federation score {ranked[0].total} = {terms} (weighted; lower wins){alt}"
        + ("; uses quota above its guarantee (borrowed, reclaimable)" if borrowed else "")
        + (
            f"; {_still_waiting(cid, job.replicas, asked, job.min_replicas, job.spread_clusters)}"
            if asked is not None and asked > job.replicas
            else ""
        )
    )
    return Place(
        job_id=job.job_id,
        tenant=job.tenant,
        cluster=cid,
        replicas=replicas,
        chosen=chosen,
        runner_up=runner,
        reasons=tuple(reasons),
        message=msg,
        borrowed=borrowed,
    )


def _commit(ctx: Ctx, job: Job, d: Demand, plan: Plan) -> tuple[ReplicaPlacement, ...]:
    """Take ``plan``'s room for ``job`` (the fleet, the quota book, budgets, hot-model usage)."""
    replicas = ctx.commit(plan, d)
    model, npu_model = plan_models(plan)
    borrowing = ctx.book.borrowing(job.tenant)
    ctx.book.add(job, model, npu_model=npu_model)
    if not borrowing and ctx.book.borrowing(job.tenant):  # its running jobs may be reclaimed now
        ctx.generation += 1
    if ctx.budgets is not None:
        ctx.budgets.charge(job)
    if model in ctx.hot:
        ctx.hot_usage[job.tenant] = ctx.hot_usage.get(job.tenant, 0) + job.total_gpu_milli()
    if npu_model is not None and npu_model in ctx.hot_npus:
        ctx.hot_npu_usage[job.tenant] = ctx.hot_npu_usage.get(job.tenant, 0) + job.total_npu_milli()
    return replicas


def _still_waiting(cid: ClusterId, running: int, asked: int, least: int | None = None, spread: int = 1) -> str:
    """What a run that holds fewer replicas than it asks says of the rest (``least``: its job's
    ``min_replicas``, said when it was more than one; ``spread``: the clusters it may spread over)."""
    least_words = f", at least {least} to start" if (least or 1) > 1 else ""
    if spread > 1:
        cap = -(-asked // spread)
        return (
            f"running {running} of {asked} replicas; {asked - running} wait for room (spread over up to {spread} "
            f"clusters, at most {cap} in any one{least_words}; they are added where room appears, in this "
            "cluster or another, never by preempting)"
        )
    return (
        f"running {running} of {asked} replicas; {asked - running} wait for room (no more fit in {cid} now"
        f"{least_words}; they are added there as room appears, never by preempting)"
    )


def _add(
    ctx: Ctx, job: Job, d: Demand, plan: Plan, ranked: list[ClusterScore], run: RunningJob, borrowed: bool
) -> AddReplicas:
    """Commit a top-up's ``plan`` and say what it added and what still waits."""
    fs = ctx.fleet
    replicas = _commit(ctx, job, d, plan)
    cid = fs.clusters[plan.cluster]
    held, asked = run.job.replicas, run.replicas_asked
    cap = -(-asked // job.spread_clusters)
    now = held + len(replicas)
    share = f" ({d.gpu_milli}m each)" if d.is_share else ""
    opens = bool(run.parts) and cid not in dict(run.parts)
    msg = (
        f"{job.job_id} {'opens a part in' if opens else 'grows in'} {cid}: added {len(replicas)} replica(s) on "
        f"{', '.join(_devices(p) for p in replicas)}{share} by {ctx.config.node_policy.value} (placement cost "
        f"{plan.cost}), "
        + (
            f"to spread it over up to {job.spread_clusters} clusters (at most {cap} in any one)"
            if job.spread_clusters > 1
            else "as room appeared"
        )
        + (
            f"; {_still_waiting(cid, now, asked, spread=job.spread_clusters)}"
            if now < asked
            else f"; all {asked} replicas run now"
            + (f", in {', '.join(sorted({*dict(run.parts), cid}))}" if run.parts else "")
        )
        + ("; uses quota above its guarantee (borrowed, reclaimable)" if borrowed else "")
    )
    return AddReplicas(
        job_id=job.job_id,
        tenant=job.tenant,
        cluster=cid,
        replicas=replicas,
        held=held,
        asked=asked,
        chosen=_candidate(ranked[0], tuple(p.node_id for p in replicas)),
        message=msg,
        borrowed=borrowed,
    )


__all__ = ["JOB_STEPS", "TOP_UP_STEPS", "Step", "Turn", "Verdict", "Waiting", "decide_job", "quota_constraint"]
