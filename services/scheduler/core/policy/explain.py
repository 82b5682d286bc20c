"""Explanations: why a job waits, per cluster, the binding constraint and the smallest change.

Called by the cycle for every job it queues. Each cluster gets one reason code and a detail with the
numbers; the binding constraint is the reason of the cluster that comes closest to fitting the job; the
smallest change lists what would make it fit now (fewer GPUs or NPUs, fewer replicas, another GPU model) and
when it would fit as it is (from the running jobs' expected ends, as backfill computes them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import numpy as np

from services.scheduler.core.policy import topology
from services.scheduler.core.policy.backfill import earliest_start
from services.scheduler.core.policy.capacity import largest_npu_block, largest_whole_gpu_block, per_node
from services.scheduler.core.policy.context import Ctx
from services.scheduler.core.policy.decisions import Change, ClusterWhyNot, Constraint
from services.scheduler.core.policy.fleet import Demand, FleetState
from services.scheduler.core.policy.model import MILLI, ClusterId, Interconnect, Job, hard_taints
from services.scheduler.core.policy.placer import MASKED
from services.scheduler.core.policy.reasons import ReasonCode


@dataclass(frozen=True, slots=True)
class Shortfall:
    per_cluster: tuple[ClusterWhyNot, ...]
    binding: ReasonCode
    binding_detail: str
    smallest_change: str
    estimated_start_ms: int | None
    constraint: Constraint
    """The binding constraint with its numbers (the closest cluster's)."""
    change: Change | None
    """The first change of ``smallest_change`` as a field of the request (None: none fits now)."""


def moment(time_ms: int) -> str:
    """A time as people read it in explanations: RFC 3339 in UTC, to the millisecond."""
    at = _EPOCH + timedelta(milliseconds=time_ms)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{time_ms % 1000:03d}Z"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def describe(job: Job) -> str:
    if job.gpus:
        g = f"{job.gpus} GPU{'s' if job.gpus > 1 else ''}"
    elif job.gpu_milli:
        g = f"{job.gpu_milli}m of one GPU"
    else:
        g = "no GPU"
    models = f" ({'|'.join(job.gpu_models)})" if job.gpu_models else ""
    if job.npus:
        npu_models = f" ({'|'.join(job.npu_models)})" if job.npu_models else ""
        npus = f"{job.npus} NPU{'s' if job.npus > 1 else ''}{npu_models}"
        g, models = (npus, "") if g == "no GPU" else (g, f"{models} + {npus}")
    per = f"{job.replicas} x " if job.replicas > 1 else ""
    return f"{per}{g}{models}, {job.cpu_milli // MILLI} CPU, {job.memory_mib} MiB" + (
        " in one cluster" if job.replicas > 1 else ""
    )


def _cluster(
    ctx: Ctx, job: Job, d: Demand, ci: int, extra: np.ndarray | None, empty: int, forced: ReasonCode | None = None
) -> tuple[ClusterWhyNot, int, Constraint]:
    """The cluster's reason, how many replicas it could take now, and the constraint with its numbers.
    ``empty``: the replicas it could hold with no job running; ``forced``: what holds the job when it is
    not the fleet (its quota, a hot-model cap, a preemption)."""
    fs = ctx.fleet
    lo, hi = fs.cluster_range[ci]
    cid = fs.clusters[ci]
    model = d.models[0] if len(d.models) == 1 else None
    gpu_ask = d.gpus * MILLI if d.gpus else d.gpu_milli  # milli-GPU per replica

    def bound(reason: ReasonCode, resource: str | None = None, requested: int = 0, available: int = 0) -> Constraint:
        return Constraint(reason, resource, model if resource == "gpu" else None, cid, requested, available)

    def per_replica(reason: ReasonCode, resource: str, requested: int, available: int) -> Constraint:
        """One replica's numbers, when one replica is what does not fit; when a node has room for one but
        the cluster not for all of them, no single resource's numbers say why (the detail counts them):
        "requested 4 GPUs, available 8" would read as a contradiction."""
        if job.replicas > 1 and available >= requested:
            return bound(reason)
        return bound(reason, resource, requested, available)

    needs_gpu = bool(d.gpus or d.gpu_milli)
    gpu_nodes = (fs.gpu_index[lo:hi] >= 0).any(axis=1)  # failed cards count: their failure is said below
    if needs_gpu:
        model_ok = fs.model_mask(d.models)[lo:hi] & gpu_nodes
        if not model_ok.any():
            have = sorted({fs.models[m] for m in fs.model_of[lo:hi] if m >= 0})
            want = "|".join(d.models) or "any GPU"
            why = ClusterWhyNot(
                cid, ReasonCode.GPU_MODEL_UNAVAILABLE, f"no {want} node; has {', '.join(have) or 'no GPUs'}"
            )
            return why, 0, bound(why.reason, "gpu", gpu_ask, 0)
        if not (model_ok & (fs.gpu_mem[lo:hi] >= d.min_gpu_memory_mib)).any():
            why = ClusterWhyNot(cid, ReasonCode.GPU_MEMORY_TOO_SMALL, f"no GPU with {d.min_gpu_memory_mib} MiB")
            return why, 0, bound(why.reason)
    if d.npus:
        npu_why = _npu_kind(fs, d, lo, hi, cid)
        if npu_why is not None:
            return npu_why, 0, bound(npu_why.reason, "npu", d.npus, 0)
    cap_now = per_node(fs, d, lo, hi)
    if extra is not None:
        masked = extra[lo:hi] >= MASKED
        if topology.fits(job, cap_now, fs, lo, hi) and not topology.fits(job, np.where(masked, 0, cap_now), fs, lo, hi):
            r = ctx.reservation
            reason = ReasonCode.RESERVED_FOR_GANG if r is not None and r.cluster == ci else ReasonCode.HOT_MODEL_CAP
            held = reason is ReasonCode.RESERVED_FOR_GANG and r
            detail = (
                f"capacity held for {r.job_id} until {moment(r.start_ms)}" if held and r
                else "the free capacity is on hot models, above the tenant's cap"
            )  # fmt: skip
            return ClusterWhyNot(cid, reason, detail), topology.most_in_one(job, cap_now, fs, lo, hi), bound(reason)
        cap_now = np.where(masked, 0, cap_now)
    total_now = topology.most_in_one(job, cap_now, fs, lo, hi)  # in one domain, if it requires one
    if not fs.schedulable[lo:hi].any():
        status = next((c.status for c in ctx.snap.clusters if c.cluster_id == cid), "reachable")
        reason, detail = _CLOSED.get(status, (ReasonCode.NODE_UNSCHEDULABLE, "every node is cordoned"))
        return ClusterWhyNot(cid, reason, detail), 0, bound(reason)
    if forced is not None and total_now >= job.replicas:
        # Room enough here: what holds the job is not this cluster.
        waits_for = _WAITS_FOR.get(forced, forced.value)
        detail = f"room for its {job.replicas} replica(s) now ({total_now} would fit); it waits for {waits_for}"
        why = ClusterWhyNot(cid, forced, detail)
        return why, total_now, bound(forced)
    # Could the cluster ever hold it (all running jobs gone)?
    if empty < job.replicas and topology.fits(job, _empty_capacity(ctx, d, lo, hi, tolerated=False), fs, lo, hi):
        taints = sorted({t for i in fs.tainted if lo <= i < hi for t in hard_taints(fs.nodes[i].taints)})
        named = ", ".join(f"{key}={value}:{effect}" for key, value, effect in taints[:4])
        detail = f"the nodes that could hold it carry taints it does not tolerate ({named}); room for {empty} of "
        detail += f"{job.replicas} replicas on the others"
        why = ClusterWhyNot(cid, ReasonCode.TAINT_NOT_TOLERATED, detail)
        return why, total_now, bound(why.reason)
    kind = topology.required(job)
    if kind is not None and (empty < job.replicas or total_now < job.replicas):
        domains = _topology(ctx, job, d, kind, ci, cap_now, empty)
        if domains is not None:
            return domains, total_now, bound(domains.reason)
    if empty < job.replicas and topology.fits(job, _empty_capacity(ctx, d, lo, hi, repaired=True), fs, lo, hi):
        why = ClusterWhyNot(cid, ReasonCode.GPU_UNHEALTHY, _failed_devices(fs, d, lo, hi, empty, job.replicas))
        if d.npus and not needs_gpu:  # one replica's numbers: the NPUs it asks, the most working on a node
            working = fs.npu_count(d, slice(lo, hi))[fs.usable(d)[lo:hi]]
            return why, total_now, per_replica(why.reason, "npu", d.npus, int(working.max()) if working.size else 0)
        if d.gpus and not d.npus:
            working = fs.gpu_count[lo:hi][fs.usable(d)[lo:hi] & fs.model_mask(d.models)[lo:hi]]
            most = int(working.max()) if working.size else 0
            return why, total_now, per_replica(why.reason, "gpu", gpu_ask, most * MILLI)
        return why, total_now, bound(why.reason)
    if empty < job.replicas:
        reason = ReasonCode.GANG_TOO_LARGE if job.replicas > 1 else ReasonCode.NO_FEASIBLE_NODE
        why = ClusterWhyNot(cid, reason, f"holds at most {empty} of {job.replicas} replicas even when empty")
        return why, total_now, (bound(reason) if job.replicas > 1 else _largest_node(ctx, d, lo, hi, bound))
    for res, code in (
        ("gpu", None),
        ("npu", ReasonCode.INSUFFICIENT_NPU),
        ("cpu", ReasonCode.INSUFFICIENT_CPU),
        ("memory", ReasonCode.INSUFFICIENT_MEMORY),
    ):
        if (res == "gpu" and not needs_gpu) or (res == "npu" and not d.npus):
            continue
        if int(per_node(fs, d, lo, hi, ignore=frozenset({res})).sum()) >= job.replicas:
            if res == "npu":
                block, at = largest_npu_block(fs, d, lo, hi)
                where = f" on {fs.node_ids[at]}" if at >= 0 and block else ""
                detail = (
                    f"largest free NPU block is {block} NPUs{where}; room for {total_now} of {job.replicas} replicas"
                )
                why = ClusterWhyNot(cid, ReasonCode.INSUFFICIENT_NPU, detail)
                return why, total_now, per_replica(why.reason, "npu", d.npus, block)
            if res == "gpu":
                if d.gpus:
                    block, at = largest_whole_gpu_block(fs, d, lo, hi)
                    where = f" on {fs.node_ids[at]}" if at >= 0 and block else ""
                    detail = (
                        f"largest free block is {block} GPUs{where}; room for {total_now} of {job.replicas} replicas"
                    )
                    why = ClusterWhyNot(cid, ReasonCode.INSUFFICIENT_GPU, detail)
                    return why, total_now, per_replica(why.reason, "gpu", gpu_ask, block * MILLI)
                best = int(fs.gpu_free[lo:hi].max()) if hi > lo else 0
                detail = f"largest free GPU share is {best}m, needs {d.gpu_milli}m"
                why = ClusterWhyNot(cid, ReasonCode.INSUFFICIENT_GPU_SHARE, detail)
                return why, total_now, per_replica(why.reason, "gpu", d.gpu_milli, best)
            assert code is not None
            most = int((fs.cpu_free if res == "cpu" else fs.mem_free)[lo:hi].max()) if hi > lo else 0
            unit = "m CPU" if res == "cpu" else " MiB"
            need = d.cpu_milli if res == "cpu" else d.memory_mib
            why = ClusterWhyNot(cid, code, f"most free on a node is {most}{unit}, needs {need}{unit}")
            return why, total_now, per_replica(code, res, need, most)
    why = ClusterWhyNot(cid, ReasonCode.NO_FEASIBLE_NODE, f"room for {total_now} of {job.replicas} replicas")
    return why, total_now, bound(why.reason)


def _topology(
    ctx: Ctx, job: Job, d: Demand, kind: Interconnect, ci: int, cap_now: np.ndarray, empty: int
) -> ClusterWhyNot | None:
    """Why a job that requires an interconnect does not fit in cluster ``ci`` when its domains are what
    holds it: none could ever hold all of its replicas (the cluster as a whole could), or none has room
    for them now (the cluster as a whole has). ``empty``: the most one domain could hold with no job
    running. None: not the domains (the cluster's size or its free capacity says why)."""
    fs = ctx.fleet
    lo, hi = fs.cluster_range[ci]
    cid = fs.clusters[ci]
    name = topology.KIND_NAMES[kind]
    n = job.replicas
    if empty < n:
        when_empty = _empty_capacity(ctx, d, lo, hi)
        if int(when_empty.sum()) < n:
            return None  # the cluster could not hold it even spread over domains: its size says why
        largest = topology.largest_room(fs, kind, when_empty, lo, hi)
        if largest.domain < 0:
            detail = f"needs {n} replica{_s(n)} in one {name}; no node it fits on is in one"
        else:
            biggest = topology.domain_name(fs, kind, largest.domain)
            detail = f"needs {n} replica{_s(n)} in one {name}; the largest, {biggest}, holds at most "
            detail += f"{largest.replicas} even when empty"
        return ClusterWhyNot(cid, ReasonCode.INTERCONNECT_DOMAIN_TOO_SMALL, detail)
    if int(cap_now.sum()) < n:
        return None  # not even spread over domains: the capacity taken now says why
    room = topology.largest_room(fs, kind, cap_now, lo, hi)
    if room.domain < 0:
        detail = f"needs {n} replica{_s(n)} in one {name}; none in {cid} has room for any now"
    else:
        where = topology.domain_name(fs, kind, room.domain)
        detail = f"needs {n} replica{_s(n)} in one {name}; the largest with room is {where} in {cid} with room for "
        detail += f"{room.replicas}"
    return ClusterWhyNot(cid, ReasonCode.INTERCONNECT_UNAVAILABLE, detail)


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _npu_kind(fs: FleetState, d: Demand, lo: int, hi: int, cid: ClusterId) -> ClusterWhyNot | None:
    """Why no node of the cluster could ever give a replica of ``d`` its NPUs: none has NPUs of a model
    it accepts, or none with the memory it asks, or none has them beside the GPUs it asks too."""
    sl = slice(lo, hi)
    has = (fs.npu_index[sl] >= 0).any(axis=1)
    kinds = sorted({fs.npu_models[m] for m in fs.npu_model_of[sl].ravel().tolist() if m >= 0})
    want = "|".join(d.npu_models) or "any"
    if d.npu_models and not any(m in kinds for m in d.npu_models):
        detail = f"no {want} NPU node; has {', '.join(kinds) + ' NPUs' if kinds else 'no NPUs'}"
        return ClusterWhyNot(cid, ReasonCode.GPU_MODEL_UNAVAILABLE, detail)
    accepted = fs.npu_fits(d)[sl].any(axis=1)  # failed NPUs count: their failure is said later
    if not accepted.any():
        if not has.any():  # nothing to wait for here: as for a GPU model the cluster does not have
            return ClusterWhyNot(cid, ReasonCode.GPU_MODEL_UNAVAILABLE, "no node here has NPUs")
        detail = f"no {want} NPU with {d.min_npu_memory_mib} MiB"
        return ClusterWhyNot(cid, ReasonCode.GPU_MEMORY_TOO_SMALL, detail)
    if (d.gpus or d.gpu_milli) and not (accepted & (fs.gpu_index[sl] >= 0).any(axis=1)).any():
        return ClusterWhyNot(cid, ReasonCode.GPU_MODEL_UNAVAILABLE, "no node here has both GPUs and NPUs")
    return None


def _largest_node(ctx: Ctx, d: Demand, lo: int, hi: int, bound: Callable[..., Constraint]) -> Constraint:
    """A replica no node of the cluster could hold even when empty: the first resource (GPU, CPU, memory)
    that no suitable node has enough of, with the most any of them has (none: only a combination fails)."""
    fs = ctx.fleet
    sl = slice(lo, hi)
    ok = fs.usable(d)[sl].copy()
    if d.gpus or d.gpu_milli:
        ok &= fs.model_mask(d.models)[sl] & (fs.gpu_mem[sl] >= d.min_gpu_memory_mib) & (fs.gpu_count[sl] > 0)
        gpus = int(fs.gpu_count[sl][ok].max()) * MILLI if ok.any() else 0
        asked = d.gpus * MILLI if d.gpus else d.gpu_milli
        if gpus < asked:
            return bound(ReasonCode.NO_FEASIBLE_NODE, "gpu", asked, gpus)
    if d.npus:
        ok &= fs.npu_count(d, sl) > 0
        most = int(fs.npu_count(d, sl)[ok].max()) if ok.any() else 0
        if most < d.npus:
            return bound(ReasonCode.NO_FEASIBLE_NODE, "npu", d.npus, most)
    for resource, caps, asked in (("cpu", fs.cpu_cap, d.cpu_milli), ("memory", fs.mem_cap, d.memory_mib)):
        most = int(caps[sl][ok].max()) if ok.any() else 0
        if most < asked:
            return bound(ReasonCode.NO_FEASIBLE_NODE, resource, asked, most)
    return bound(ReasonCode.NO_FEASIBLE_NODE)


def _empty_capacity(
    ctx: Ctx, d: Demand, lo: int, hi: int, *, tolerated: bool = True, repaired: bool = False
) -> np.ndarray:
    """Replicas each of the cluster's nodes could hold with no job running (on every schedulable node,
    taints or not, when ``tolerated`` is False; with their failed GPUs and NPUs working, when
    ``repaired``)."""
    fs = ctx.fleet
    sl = slice(lo, hi)
    fits = np.full(hi - lo, 1 << 20, dtype=np.int64)
    if d.cpu_milli:
        fits = np.minimum(fits, fs.cpu_cap[sl] // d.cpu_milli)
    if d.memory_mib:
        fits = np.minimum(fits, fs.mem_cap[sl] // d.memory_mib)
    gpus = (fs.gpu_index[sl] >= 0).sum(axis=1) if repaired else fs.gpu_count[sl]
    if d.gpus:
        fits = np.minimum(fits, gpus // d.gpus)
    elif d.gpu_milli:
        fits = np.minimum(fits, gpus * (MILLI // d.gpu_milli))
    if d.gpus or d.gpu_milli:
        fits = np.where(fs.model_mask(d.models)[sl] & (fs.gpu_mem[sl] >= d.min_gpu_memory_mib), fits, 0)
    if d.npus:
        npus = fs.npu_fits(d)[sl].sum(axis=1) if repaired else fs.npu_count(d, sl)
        fits = np.minimum(fits, npus // d.npus)
    return np.where(fs.usable(d)[sl] if tolerated else fs.schedulable[sl], fits, 0)


def _failed_devices(fs: FleetState, d: Demand, lo: int, hi: int, empty: int, replicas: int) -> str:
    """Why failed cards hold a job that the cluster would take with them working: how many of the GPUs
    and NPUs it could use have failed, on which node the most, and what the cluster holds without them."""
    sl = slice(lo, hi)
    nodes = fs.usable(d)[sl]
    failed: list[tuple[str, np.ndarray]] = []
    if d.gpus or d.gpu_milli:
        model_ok = fs.model_mask(d.models)[sl] & (fs.gpu_mem[sl] >= d.min_gpu_memory_mib) & nodes
        down = (fs.gpu_index[sl] >= 0) & ~fs.gpu_usable[sl]
        failed.append(("GPU", np.where(model_ok, down.sum(axis=1), 0)))
    if d.npus:
        down = fs.npu_fits(d)[sl] & ~fs.npu_usable[sl]
        failed.append(("NPU", np.where(nodes, down.sum(axis=1), 0)))
    said = []
    for kind, down_per_node in failed:
        count = int(down_per_node.sum())
        if count:
            worst = lo + int(np.argmax(down_per_node))  # the first of the nodes with the most, in node order
            most = int(down_per_node.max())
            said.append(f"{count} {kind}{_s(count)} it could use failed ({most} on {fs.node_ids[worst]})")
    held = f"holds {empty} of its {replicas} replicas" if replicas > 1 else "no node holds it"
    return f"{' and '.join(said)}; {held} until they are back"


_CLOSED = {
    "unreachable": (ReasonCode.CLUSTER_UNREACHABLE, "its connector reports the cluster unreachable"),
    "draining": (ReasonCode.CLUSTER_DRAINING, "the cluster is draining: it takes no new work"),
}
"""Why a cluster whose nodes all take no work does not, when its status says so."""

_WAITS_FOR = {
    ReasonCode.QUOTA_EXCEEDED: "its quota",
    ReasonCode.BUDGET_EXCEEDED: "its GPU-hour budget",
    ReasonCode.HOT_MODEL_CAP: "its tenant's cap on hot GPU or NPU models",
    ReasonCode.WAITING_FOR_PREEMPTION: "the jobs asked to stop",
}


def explain(
    ctx: Ctx, job: Job, d: Demand, extra: np.ndarray | None, estimate: bool, forced: ReasonCode | None = None
) -> Shortfall:
    fs = ctx.fleet
    # The most replicas each cluster could hold with no job running (in one domain, if the job requires one).
    empty = [topology.most_in_one(job, _empty_capacity(ctx, d, lo, hi), fs, lo, hi) for lo, hi in fs.cluster_range]
    rows = [_cluster(ctx, job, d, ci, extra, empty[ci], forced) for ci in range(len(fs.clusters))]
    per = tuple(r[0] for r in rows)
    # Binding: the cluster closest to fitting (most replicas now); among equals, one that has the GPU
    # model asked for (its reason says more than "no such model here"), then the one that holds the most
    # replicas when empty, then by cluster id.
    closest = (
        max(
            range(len(rows)),
            key=lambda i: (rows[i][1], per[i].reason is not ReasonCode.GPU_MODEL_UNAVAILABLE, empty[i], -i),
        )
        if rows
        else -1
    )
    binding = per[closest].reason if closest >= 0 else ReasonCode.NO_FEASIBLE_NODE
    binding_detail = f"{per[closest].cluster}: {per[closest].detail}" if closest >= 0 else "no cluster"
    constraint = rows[closest][2] if closest >= 0 else Constraint(binding)
    changes: list[str] = []
    fields: list[Change] = []
    if d.gpus and job.replicas == 1:
        blocks = [
            (largest_whole_gpu_block(fs, d, lo, hi)[0], fs.clusters[ci]) for ci, (lo, hi) in enumerate(fs.cluster_range)
        ]
        b, where = max(blocks, key=lambda x: (x[0], [-ord(c) for c in x[1]])) if blocks else (0, "")
        if 0 < b < d.gpus:
            changes.append(f"would fit now with {b} GPUs in {where}")
            fields.append(Change("resources.gpus", str(d.gpus), str(b), f"would fit now in {where}"))
    if d.npus and job.replicas == 1:
        npu_blocks = [
            (largest_npu_block(fs, d, lo, hi)[0], fs.clusters[ci]) for ci, (lo, hi) in enumerate(fs.cluster_range)
        ]
        nb, nwhere = max(npu_blocks, key=lambda x: (x[0], [-ord(c) for c in x[1]])) if npu_blocks else (0, "")
        if 0 < nb < d.npus:
            changes.append(f"would fit now with {nb} NPUs in {nwhere}")
            fields.append(Change("resources.npus", str(d.npus), str(nb), f"would fit now in {nwhere}"))
    if job.replicas == 1:
        for resource, free, asked, name, unit in (
            ("cpu", fs.cpu_free, d.cpu_milli, "resources.cpu_milli", "m CPU"),
            ("memory", fs.mem_free, d.memory_mib, "resources.memory_mib", " MiB"),
        ):
            # The most of it free on a node where everything else the replica asks for fits now.
            best, where = 0, ""
            for ci, (lo, hi) in enumerate(fs.cluster_range):
                ok = per_node(fs, d, lo, hi, ignore=frozenset({resource})) > 0
                if ok.any() and int(free[lo:hi][ok].max()) > best:
                    best, where = int(free[lo:hi][ok].max()), fs.clusters[ci]
            if 0 < best < asked:
                changes.append(f"would fit now with {best}{unit} in {where}")
                fields.append(Change(name, str(asked), str(best), f"would fit now in {where}"))
    if job.replicas > 1 and rows:
        now = rows[closest][1]
        if 0 < now < job.replicas:
            changes.append(f"would fit now with {now} replicas in {per[closest].cluster}")
            fields.append(Change("replicas", str(job.replicas), str(now), f"would fit now in {per[closest].cluster}"))
    kind = topology.required(job)
    if kind is not None:
        spread = [
            fs.clusters[ci]
            for ci, (lo, hi) in enumerate(fs.cluster_range)
            if int(per_node(fs, d, lo, hi).sum()) >= job.replicas
        ]
        if spread:
            changes.append(
                f"would fit now in {spread[0]} across several {topology.KIND_NAMES[kind]}s (as a preference)"
            )
            fields.append(Change("interconnect_required", "true", "false", f"would fit now in {spread[0]}"))
    if d.models:
        other = replace(d, models=())
        fits_any = [
            fs.clusters[ci]
            for ci, (lo, hi) in enumerate(fs.cluster_range)
            if int(per_node(fs, other, lo, hi).sum()) >= job.replicas
        ]
        if fits_any:
            changes.append(f"would fit now in {fits_any[0]} accepting any GPU model")
            models = "|".join(d.models)
            fields.append(Change("resources.gpu_models", models, "any", f"would fit now in {fits_any[0]}"))
    start_ms: int | None = None
    if estimate:
        got = earliest_start(ctx, job, d)
        if got is not None:
            start_ms = got[0]
            mins = max(0, (start_ms - ctx.snap.now_ms) // 60_000)
            changes.append(f"fits as asked in {fs.clusters[got[1]]} in about {mins} min")
    text = "; ".join(changes) or "no change fits the current fleet"
    return Shortfall(per, binding, binding_detail, text, start_ms, constraint, fields[0] if fields else None)


__all__ = ["Shortfall", "describe", "explain", "moment"]
