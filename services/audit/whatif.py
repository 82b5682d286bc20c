"""``fedsched audit whatif``: recorded history replayed through the timed simulator under another policy.

Called by the audit CLI. The recorded submissions (with their real arrival times and the runtimes
they really had), the recorded fleet and the tenants' quotas are fed through the same ``schedule``
core the service runs, under the candidate policy, and the outcome is printed beside what really
happened: waiting-time percentiles per priority class, preemptions, GPU allocation and cost per tenant.
A policy change can be tried on real history before it goes live. The tenants, quotas and GPU-hour
budgets are those in force at the end of the recorded history; a hard budget holds jobs back in the
calendar's window at the simulated time, counted as the live scheduler counts it (``whatif_budgets``).

Both sides count the same things, so that the policy in force, replayed, comes out close to what was
recorded: submissions within the window (``--since``/``--until``), preemptions requested within it, and
as never started the jobs that were never placed at all (a preempted job waiting again has started).
Cancellations are replayed at their recorded time: a job still waiting then leaves the queue, a running
one ends then, and a job that was cancelled while running runs until then (it had not ended by itself).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field, replace

from events.catalog.decisions import JobPreemptionRequested, JobQueued
from events.catalog.errors import EventError
from events.catalog.jobs import JobCancelled, JobFailed, JobStarted, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.log.contract import EventLog, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode
from events.wire.envelope import Envelope
from services.audit.whatif_budgets import budgets_in_force
from services.scheduler.core.decide import INPUT_TOPICS, SAME_INSTANT_LIMIT
from services.scheduler.core.policy import (
    AddReplicas,
    FleetSnapshot,
    Job,
    Place,
    PolicyConfig,
    Preempt,
    RunningJob,
    schedule,
)
from services.scheduler.core.policy import model as m
from services.scheduler.core.state import Placement, SchedulerState, job_model

_HOUR_MS = 3_600_000


@dataclass
class Outcome:
    """What happened (or would have): per job its wait, and totals."""

    waits_ms: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))  # priority -> waits
    preemptions: int = 0
    gpu_milli_ms: int = 0
    capacity_milli: int = 0
    span_ms: int = 0
    cost_micro: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    never_started: int = 0
    held_by_budget: set[str] = field(default_factory=set)
    """Jobs a hard GPU-hour budget held back at least once (their wait's reason ``BudgetExceeded``)."""

    def allocation_pct(self) -> float:
        if not self.capacity_milli or not self.span_ms:
            return 0.0
        return 100.0 * self.gpu_milli_ms / (self.capacity_milli * self.span_ms)

    def summary(self) -> dict[str, object]:
        waits = {}
        for priority, values in sorted(self.waits_ms.items()):
            ordered = sorted(values)
            waits[priority] = {
                "jobs": len(ordered),
                "p50_s": _pct(ordered, 50) / 1000,
                "p95_s": _pct(ordered, 95) / 1000,
                "max_s": (ordered[-1] if ordered else 0) / 1000,
            }
        return {
            "wait_by_priority": waits,
            "preemptions": self.preemptions,
            "gpu_allocation_pct": round(self.allocation_pct(), 2),
            "cost_micro_by_tenant": dict(sorted(self.cost_micro.items())),
            "never_started": self.never_started,
            "held_by_budget": len(self.held_by_budget),
        }


def _pct(ordered: list[int], q: int) -> int:
    if not ordered:
        return 0
    return ordered[min(len(ordered) - 1, (len(ordered) * q) // 100)]


@dataclass
class History:
    state: SchedulerState
    arrivals: list[tuple[Job, int, int]]  # job, arrival ms, runtime ms
    actual: Outcome
    start_ms: int
    end_ms: int
    cancels: dict[str, int] = field(default_factory=dict)
    """Job id to when it was cancelled (its recorded ``JobCancelled``), for the jobs that ended so."""


async def load_history(
    event_log: EventLog, *, namespace: str = "", since_ms: int | None = None, until_ms: int | None = None
) -> History:
    prefix = f"{namespace}." if namespace else ""
    envelopes: list[Envelope] = []
    reader = await event_log.reader()
    try:
        for topic in INPUT_TOPICS:
            for partition in range(await event_log.partitions(prefix + topic)):
                async for batch in read_to_end(reader, TopicPartition(prefix + topic, partition), max_records=5000):
                    for record in batch:
                        try:
                            envelopes.append(decode(record.headers, record.value))
                        except EventError:
                            continue
    finally:
        await reader.close()
    return history_of(envelopes, since_ms=since_ms, until_ms=until_ms)


def history_of(envelopes: list[Envelope], *, since_ms: int | None = None, until_ms: int | None = None) -> History:
    """The recorded history (and what really happened in the window) from the scheduler's input events."""
    state = SchedulerState(keep_settled=True)  # every job's facts: the history is what it reads
    envelopes = sorted(envelopes, key=lambda e: e.time_ms)
    started: dict[tuple[str, int], int] = {}
    ended: dict[tuple[str, int], int] = {}
    cancelled_at: dict[str, int] = {}
    preempted_at: list[int] = []
    held: set[str] = set()
    for envelope in envelopes:
        state.fold(envelope)
        data = envelope.data
        if isinstance(data, JobStarted):
            started.setdefault((data.job_id, data.run), envelope.time_ms)
        elif isinstance(data, JobSucceeded | JobFailed):
            ended[(data.job_id, data.run)] = envelope.time_ms
        elif isinstance(data, JobCancelled):
            cancelled_at.setdefault(data.job_id, envelope.time_ms)
        elif isinstance(data, JobPreemptionRequested):
            preempted_at.append(envelope.time_ms)
        elif isinstance(data, JobQueued) and ReasonCode.BUDGET_EXCEEDED in data.reasons:
            held.add(data.job_id)
    start = max(since_ms or 0, min((e.time_ms for e in envelopes), default=0))
    end = min(until_ms or 2**62, max((e.time_ms for e in envelopes), default=0))
    snapshot = state.snapshot(end)
    capacity = sum(len(n.gpus) for n in snapshot.nodes) * 1000
    preemptions = sum(1 for at in preempted_at if start <= at <= end)
    actual = Outcome(preemptions=preemptions, capacity_milli=capacity, span_ms=max(1, end - start))
    arrivals: list[tuple[Job, int, int]] = []
    cancels: dict[str, int] = {}
    rates = _rates(state)
    for job_id, facts in sorted(state.jobs.items()):
        if facts.spec is None or not (start <= facts.submitted_ms <= end):
            continue
        job = replace(_job_of(state, job_id), times_preempted=0)
        if facts.terminal == "cancelled" and job_id in cancelled_at:
            cancels[job_id] = cancelled_at[job_id]
        first = min(facts.placements, default=None)
        runtime = 0
        if first is not None:
            wait = facts.placed_at[first] - facts.submitted_ms
            actual.waits_ms[job.priority_class.value].append(max(0, wait))
            for run, placement in facts.placements.items():
                begin = started.get((job_id, run), facts.placed_at[run])
                finish = ended.get((job_id, run), facts.ended_at.get(run, end))
                milli = sum(len(r.gpu_indices) * r.gpu_milli_each for r in placement.replicas)
                actual.gpu_milli_ms += milli * max(0, min(finish, end) - max(begin, start))
                actual.cost_micro[job.tenant] += (
                    rates.get((placement.cluster, _model(state, placement)), 0)
                    * milli
                    * max(0, finish - begin)
                    // (1000 * _HOUR_MS)
                )
            last = max(facts.placements)
            if (job_id, last) in ended:
                runtime = ended[(job_id, last)] - started.get((job_id, last), facts.placed_at[last])
            elif job_id in cancels and facts.ended.get(last) == "cancelled":
                runtime = end - facts.submitted_ms + 1  # it ran until cancelled: no end of its own in the window
        else:
            actual.never_started += 1
        if job_id in held:
            actual.held_by_budget.add(job_id)
        runtime = runtime or (job.expected_runtime_s or 3600) * 1000
        arrivals.append((job, facts.submitted_ms, max(1, runtime)))
    return History(state, arrivals, actual, start, end, cancels)


def simulate(history: History, config: PolicyConfig) -> Outcome:
    """Replay the arrivals through ``schedule`` on the recorded fleet, jobs running their real runtimes and
    cancelled at their recorded time, up to the end of the recorded window, as what really happened is
    counted: GPU time and cost within it, waits of the jobs placed within it, and the jobs never placed
    in it as never started (a preempted job still waiting at its end has started).

    A preempted job stops at once in the simulation: the cycle runs again at the same moment, so the job
    that asked for the room gets it then, not at the next arrival or end (hours later, on a quiet
    fleet)."""
    base = history.state.snapshot(history.start_ms)
    # Fair share reads past usage decayed with the policy's half-life: this policy's, not the recorded one.
    usage = history.state.usage_histories(config.usage_half_life_ms)
    tenants = tuple(replace(t, usage=usage.get(t.tenant_id, m.UsageHistory())) for t in base.tenants)
    nodes: dict[tuple[str, str], m.Node] = {
        (n.cluster, n.node_id): replace(
            n,
            gpus=tuple(replace(g, free_milli=1000) for g in n.gpus),
            schedulable=True,  # the recorded fleet; a cluster that went away when recording stopped counts
            cpu_free_milli=n.cpu_milli,
            memory_free_mib=n.memory_mib,
        )
        for n in base.nodes
    }
    rates = _rates(history.state)
    budgets = budgets_in_force(history.state, config, history.start_ms)
    models: dict[tuple[str, str], str] = {(n.cluster, n.node_id): n.gpu_model for n in base.nodes}
    outcome = Outcome(
        capacity_milli=sum(len(n.gpus) for n in nodes.values()) * 1000,
        span_ms=max(1, history.end_ms - history.start_ms),
    )
    arrivals = sorted(history.arrivals, key=lambda a: (a[1], a[0].job_id))
    runtime: dict[str, int] = {job.job_id: r for job, _, r in arrivals}
    arrived = {job.job_id: a for job, a, _ in arrivals}
    cancels = sorted((at, job_id) for job_id, at in history.cancels.items() if job_id in runtime)
    next_cancel = 0
    cancelled: set[str] = set()
    placed_once: set[str] = set()
    pending: dict[str, Job] = {}
    running: dict[str, tuple[RunningJob, int]] = {}
    ends: list[tuple[int, str]] = []
    index = 0
    now = history.start_ms
    horizon = history.end_ms
    again = 0  # cycles run at this moment in a row, each after a preemption
    while index < len(arrivals) or ends or again or next_cancel < len(cancels) or budgets.next_opening(now) is not None:
        upcoming = [
            t
            for t in (
                arrivals[index][1] if index < len(arrivals) else None,
                ends[0][0] if ends else None,
                cancels[next_cancel][0] if next_cancel < len(cancels) else None,
                budgets.next_opening(now),  # a job a budget holds back gets the next window's first moment
            )
            if t is not None
        ]
        now = now if again else min(upcoming)
        if now > horizon:
            break
        budgets.advance(now)
        while ends and ends[0][0] <= now:
            at, job_id = heapq.heappop(ends)
            entry = running.get(job_id)
            if entry is None or entry[1] + runtime[job_id] != at:
                continue  # the end of a run that was preempted (the job may run again, to a later end)
            del running[job_id]
            _account(outcome, entry, now, rates, models)
            _release(nodes, entry[0])
            budgets.ended(entry[0], now)
        while index < len(arrivals) and arrivals[index][1] <= now:
            if arrivals[index][0].job_id not in cancelled:
                pending[arrivals[index][0].job_id] = arrivals[index][0]
            index += 1
        while next_cancel < len(cancels) and cancels[next_cancel][0] <= now:
            job_id = cancels[next_cancel][1]
            next_cancel += 1
            cancelled.add(job_id)
            if pending.pop(job_id, None) is not None:  # cancelled while waiting: it leaves the queue
                budgets.withdrawn(job_id, now)
            entry = running.pop(job_id, None)
            if entry is not None:  # cancelled while running: it ends now
                _account(outcome, entry, now, rates, models)
                _release(nodes, entry[0])
                budgets.ended(entry[0], now)
        if not pending and not any(r.missing() for r, _ in running.values()):  # nothing to place, no run to grow
            again = 0
            continue
        in_order = tuple(r for r, _ in (running[j] for j in sorted(running)))
        snapshot = FleetSnapshot(
            now_ms=now,
            clusters=base.clusters,
            nodes=tuple(nodes[k] for k in sorted(nodes)),
            tenants=tenants,
            running=in_order,
            pending=tuple(pending[j] for j in sorted(pending)),
            budgets=budgets.in_force(now, in_order),
        )
        freed = False
        result = schedule(snapshot, config)
        budgets.decided(snapshot.budgets, result, snapshot.pending)
        for decision in result.decisions:
            if isinstance(decision, Place) and decision.job_id in pending:
                job = pending.pop(decision.job_id)
                placed = RunningJob.started(job, decision.cluster, decision.replicas, now)
                _take(nodes, placed)
                budgets.started(placed)
                running[job.job_id] = (placed, now)
                placed_once.add(job.job_id)
                if job.times_preempted == 0:
                    outcome.waits_ms[job.priority_class.value].append(now - arrived[job.job_id])
                heapq.heappush(ends, (now + runtime[job.job_id], job.job_id))
            elif isinstance(decision, AddReplicas) and decision.job_id in running:
                # The GPU time so far at the run's size, then the grown run from now.
                before = running[decision.job_id]
                _account(outcome, before, now, rates, models)
                added = replace(before[0], placements=decision.replicas)
                _take(nodes, added)
                budgets.grew(before[0], decision.replicas, now)
                running[decision.job_id] = (before[0].grown(decision.replicas), now)
            elif isinstance(decision, Preempt) and decision.victim in running:
                entry = running.pop(decision.victim)
                _account(outcome, entry, now, rates, models)
                _release(nodes, entry[0])
                budgets.ended(entry[0], now)
                outcome.preemptions += 1
                victim = entry[0].requested()
                pending[victim.job_id] = replace(victim, times_preempted=victim.times_preempted + 1)
                freed = True
        again = again + 1 if freed and again < SAME_INSTANT_LIMIT else 0
        if not ends and index >= len(arrivals) and next_cancel >= len(cancels) and not again and not budgets.holds:
            break  # what is left can never start on this fleet
    for entry in running.values():  # still running at the end of the window: counted up to it
        _account(outcome, entry, max(entry[1], min(now, horizon)), rates, models)
    outcome.never_started = sum(1 for job, _, _ in arrivals if job.job_id not in placed_once)
    outcome.held_by_budget = set(budgets.held_jobs)
    return outcome


def _account(
    outcome: Outcome,
    entry: tuple[RunningJob, int],
    now: int,
    rates: dict[tuple[str, str], int],
    models: dict[tuple[str, str], str],
) -> None:
    placed, began = entry
    milli = sum(len(r.gpu_indices) * r.gpu_milli_each for r in placed.placements)
    outcome.gpu_milli_ms += milli * (now - began)
    model = models.get((placed.cluster, placed.placements[0].node_id), "") if placed.placements else ""
    outcome.cost_micro[placed.job.tenant] += (
        rates.get((placed.cluster, model), 0) * milli * (now - began) // (1000 * _HOUR_MS)
    )


def _take(nodes: dict[tuple[str, str], m.Node], placed: RunningJob) -> None:
    _adjust(nodes, placed, -1)


def _release(nodes: dict[tuple[str, str], m.Node], placed: RunningJob) -> None:
    _adjust(nodes, placed, +1)


def _adjust(nodes: dict[tuple[str, str], m.Node], placed: RunningJob, sign: int) -> None:
    job = placed.job
    for replica in placed.placements:
        key = (placed.cluster, replica.node_id)
        node = nodes[key]
        gpus = tuple(
            replace(g, free_milli=g.free_milli + sign * replica.gpu_milli_each) if g.index in replica.gpu_indices else g
            for g in node.gpus
        )
        nodes[key] = replace(
            node,
            gpus=gpus,
            cpu_free_milli=node.cpu_free_milli + sign * job.cpu_milli,
            memory_free_mib=node.memory_free_mib + sign * job.memory_mib,
        )


def _rates(state: SchedulerState) -> dict[tuple[str, str], int]:
    return {
        (cluster, rate.model): rate.micro_per_gpu_hour
        for cluster, registered in state.clusters.items()
        for rate in registered.gpu_rates
    }


def _model(state: SchedulerState, placed: Placement) -> str:
    facts = state.nodes.get((placed.cluster, placed.replicas[0].node))
    if facts is None or facts.observed is None or not facts.observed.gpus:
        return ""
    return facts.observed.gpus[0].model


def _job_of(state: SchedulerState, job_id: str) -> Job:
    return job_model(state.jobs[job_id])
