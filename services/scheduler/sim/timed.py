"""Timed-mode simulation: the trace's creation and deletion times replayed through full cycles.

Called by ``fedsched simulate --mode timed`` (``services.cli.simulate_timed``). Each pod becomes a job
(priority class from its QoS: LS -> production inference, Guaranteed -> critical training, Burstable ->
standard, BE -> best effort; one of four tenants, or of the configuration's; runtime = deletion - scheduled
time). Time advances from event to event; whenever jobs arrived or ended, one scheduling cycle
(``schedule``, the same core the service runs) decides on every waiting job: placements start running,
preemptions send their victims back to the queue. Reports queueing delay, job completion time, GPU
utilisation and preemptions per policy.

With a configuration (``services.scheduler.sim.config``: Tenant, Quota, Budget and Policy documents), every
cycle decides with its tenants, quotas and policy, and with the hard GPU-hour budgets in force at the
simulated time (``services.scheduler.core.simulated_budgets``, counted as the live scheduler counts them).
No governance process runs here: a budget's window is the calendar's at the simulated time (the trace's
time 0 is 1970-01-01T00:00Z), and a job a hard budget holds back gets a cycle the moment the next window
opens. The report's ``budgets`` lists, per budget and window, the GPU-hours used, when 80% and 100% were
crossed, and the jobs held back and for how long. A job held back with nothing running or left to arrive,
and not started when a new window opened, is left waiting (its need exceeds what a whole window has).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from events.catalog.jobs import JobKind, PriorityClass
from events.catalog.types import ClusterId, JobId, TenantId
from services.scheduler.core.decide import SAME_INSTANT_LIMIT
from services.scheduler.core.policy import (
    AddReplicas,
    Cluster,
    FleetSnapshot,
    FleetState,
    Gpu,
    Job,
    Node,
    NodePolicy,
    Place,
    Preempt,
    RunningJob,
    schedule,
)
from services.scheduler.core.policy.fleet import Demand
from services.scheduler.sim.config import SimConfig
from services.scheduler.sim.traces import TracePod

NO_CONFIGURATION = SimConfig()
QOS = {
    "LS": (PriorityClass.PRODUCTION_INFERENCE, JobKind.INFERENCE),
    "Guaranteed": (PriorityClass.CRITICAL_TRAINING, JobKind.TRAINING),
    "Burstable": (PriorityClass.STANDARD, JobKind.BATCH),
    "BE": (PriorityClass.BEST_EFFORT, JobKind.BATCH),
}


def to_job(p: TracePod, tenants: Sequence[str] = ()) -> tuple[Job, int, int]:
    """The pod as a job (its arrival and runtime in ms), of ``tenants[number % len(tenants)]`` (by the digits
    of its name), else of ``tenant-0`` to ``tenant-3``."""
    prio, kind = QOS.get(p.qos, (PriorityClass.STANDARD, JobKind.BATCH))
    created = p.creation_s or 0
    runtime = max(1, (p.deletion_s or created + 3600) - created)
    d = p.demand()
    digits = "".join(ch for ch in p.name if ch.isdigit()) or "0"
    job = Job(
        job_id=JobId(p.name),
        tenant=TenantId(tenants[int(digits) % len(tenants)] if tenants else f"tenant-{int(digits) % 4}"),
        kind=kind,
        priority_class=prio,
        cpu_milli=d.cpu_milli,
        memory_mib=d.memory_mib,
        gpus=d.gpus,
        gpu_milli=d.gpu_milli,
        gpu_models=d.models,
        expected_runtime_s=runtime,
        submitted_at_ms=created * 1000,
    )
    return job, created * 1000, runtime * 1000


def _nodes_now(fs: FleetState) -> tuple[Node, ...]:
    out = []
    for i, n in enumerate(fs.nodes):
        gpus = tuple(
            Gpu(index=int(fs.gpu_index[i, j]), free_milli=int(fs.gpu_free[i, j]))
            for j in range(fs.gpu_slots)
            if fs.gpu_index[i, j] >= 0
        )
        out.append(replace(n, cpu_free_milli=int(fs.cpu_free[i]), memory_free_mib=int(fs.mem_free[i]), gpus=gpus))
    return tuple(out)


def run_timed(
    nodes: list[Node],
    pods: list[TracePod],
    policy: NodePolicy,
    seed: int,
    max_pods: int,
    configuration: SimConfig = NO_CONFIGURATION,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    ordered = sorted(pods, key=lambda p: (p.creation_s or 0, p.name))
    if max_pods:
        ordered = ordered[:max_pods]
    fs = FleetState(nodes)
    capacity = fs.capacity_gpu_milli()
    config = configuration.policy_config(policy, seed)
    budgets = configuration.simulated_budgets(config)
    clusters = tuple(Cluster(ClusterId(c)) for c in fs.clusters)
    arrivals = [to_job(p, configuration.dealt_to) for p in ordered]
    runtime = {j.job_id: r for j, _, r in arrivals}
    arrived_at = {j.job_id: a for j, a, _ in arrivals}
    empty = FleetState(nodes)
    pending: dict[JobId, Job] = {}
    running: dict[JobId, RunningJob] = {}
    ends: list[tuple[int, str]] = []
    started: dict[JobId, int] = {}
    finished: dict[JobId, int] = {}
    dropped = preemptions = cycles = 0
    busy_gpu_ms = 0
    now = arrivals[0][1] if arrivals else 0
    first = now
    k = 0
    again = 0  # cycles run at this moment in a row, each after a preemption freed room
    woke = False  # this moment is a budget's window opening, and nothing else
    while k < len(arrivals) or ends or pending:
        nxt = [
            x for x in (arrivals[k][1] if k < len(arrivals) else None, ends[0][0] if ends else None) if x is not None
        ]
        if again:
            nxt.append(now)  # the job that asked for the room gets it now, not at the next arrival or end
        opening = budgets.next_opening(now)  # a job a budget holds back gets the next window's first moment
        if not nxt and (opening is None or woke):
            break  # only jobs that can never start are left
        woke = not nxt or (opening is not None and opening < min(nxt))
        t = opening if woke and opening is not None else min(nxt)
        busy_gpu_ms += (capacity - int((fs.gpu_free * fs.gpu_usable).sum())) * (t - now)
        now = t
        budgets.advance(now)
        while ends and ends[0][0] <= now:
            at, jid = heapq.heappop(ends)
            r = running.get(JobId(jid))
            if r is None or r.started_at_ms + runtime[r.job.job_id] != at:
                continue  # the end of a run that was preempted (the job may run again, to a later end)
            del running[r.job.job_id]
            for p in r.placements:
                fs.give(p, r.job.cpu_milli, r.job.memory_mib)
            budgets.ended(r, now)
            finished[r.job.job_id] = now
        while k < len(arrivals) and arrivals[k][1] <= now:
            job = arrivals[k][0]
            k += 1
            if not empty.feasible(Demand.of(job)).any():
                dropped += 1
                continue
            pending[job.job_id] = job
        if not pending and not any(r.missing() for r in running.values()):  # nothing to place, no run to grow
            again = 0
            continue
        in_order = tuple(running[j] for j in sorted(running))
        snap = FleetSnapshot(
            now_ms=now,
            clusters=clusters,
            nodes=_nodes_now(fs),
            tenants=configuration.tenants,
            running=in_order,
            pending=tuple(pending[j] for j in sorted(pending)),
            budgets=budgets.in_force(now, in_order),
        )
        result = schedule(snap, config)
        budgets.decided(snap.budgets, result, snap.pending)
        cycles += 1
        freed = False
        for d in result.decisions:
            if isinstance(d, Place):
                job = pending.pop(d.job_id)
                dem = Demand.of(job)
                for p in d.replicas:
                    i = fs.index[p.node_id]
                    slots = [int(np.flatnonzero(fs.gpu_index[i] == g)[0]) for g in p.gpu_indices]
                    fs.take(i, dem, slots)
                running[job.job_id] = RunningJob.started(job, d.cluster, d.replicas, now)
                budgets.started(running[job.job_id])
                started.setdefault(job.job_id, now)
                heapq.heappush(ends, (now + runtime[job.job_id], str(job.job_id)))
            elif isinstance(d, AddReplicas) and d.job_id in running:
                grows = running[d.job_id]
                dem = Demand.of(grows.job)
                for p in d.replicas:
                    i = fs.index[p.node_id]
                    slots = [int(np.flatnonzero(fs.gpu_index[i] == g)[0]) for g in p.gpu_indices]
                    fs.take(i, dem, slots)
                budgets.grew(grows, d.replicas, now)
                running[d.job_id] = grows.grown(d.replicas)
            elif isinstance(d, Preempt) and d.victim in running:
                r = running.pop(d.victim)
                for p in r.placements:
                    fs.give(p, r.job.cpu_milli, r.job.memory_mib)
                budgets.ended(r, now)
                preemptions += 1
                pending[r.job.job_id] = replace(r.requested(), times_preempted=r.job.times_preempted + 1)
                freed = True
        again = again + 1 if freed and again < SAME_INSTANT_LIMIT else 0
    queue_s = np.array([(started[j] - arrived_at[j]) / 1000 for j in sorted(started)] or [0.0])
    jct_s = np.array([(finished[j] - arrived_at[j]) / 1000 for j in sorted(finished)] or [0.0])
    span = max(1, now - first)
    return {
        "policy": policy.value,
        "seed": seed,
        "jobs": len(arrivals),
        "completed": len(finished),
        "dropped": dropped,
        "unfinished": len(arrivals) - len(finished) - dropped,
        "preemptions": preemptions,
        "cycles": cycles,
        "mean_queue_s": round(float(queue_s.mean()), 1),
        "p50_queue_s": round(float(np.percentile(queue_s, 50)), 1),
        "p99_queue_s": round(float(np.percentile(queue_s, 99)), 1),
        "mean_jct_s": round(float(jct_s.mean()), 1),
        "p50_jct_s": round(float(np.percentile(jct_s, 50)), 1),
        "gpu_utilisation_pct": round(100.0 * busy_gpu_ms / (capacity * span), 2) if capacity else 0.0,
        "budgets": budgets.report(now),
        "wall_s": round(time.perf_counter() - t0, 2),
    }


__all__ = ["run_timed", "to_job"]
