"""The fold: one handler per event type, each changing the facts of the one entity the event is about.

Called by ``SchedulerState.fold``. Pure. See ``services.scheduler.core.state`` for why the result does not
depend on how partitions interleave.

Every handler is idempotent, so an event appended again at a later offset, after any number of other
records, changes nothing (the table of every event type is in ``events.log.reading``): a report keeps
the latest of its entity (a node's generation; by time, then the order read, with the envelope id telling
a repeat: ``events.wire.envelope.Latest``, for GPU health, a cluster's registration and status, a tenant,
and per author a queue's quota and the policy, since authors' clocks differ); a step of a job's lifecycle
is taken once (a run's first placement and first end are final, a submission is the first one, a stop
request is made once per run, and so is a retry verdict); a wait keeps the latest cycle's reasons.

A run that failed for a cause that may be retried (``events.catalog.lifecycle.awaits_verdict``) leaves
its job open until the scheduler's verdict on it is folded (``JobRetryScheduled``: queued again after its
backoff; ``JobRetriesExhausted``: failed); the job is neither pending nor final meanwhile, and the next
cycle gives the verdict (``JobFacts.awaiting_verdict``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from events.catalog.decisions import (
    FailureKind,
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReclaimRequested,
    JobReplicasAdded,
    JobRetriesExhausted,
    JobRetryScheduled,
    JobRunClosed,
    SchedulingCycleCompleted,
)
from events.catalog.governance import (
    BudgetSet,
    BudgetWindowOpened,
    GovernanceFinding,
    PolicyConfigured,
    QuotaSet,
    TenantRegistered,
)
from events.catalog.inventory import (
    ClusterRegistered,
    ClusterStatusChanged,
    GpuHealthReported,
    NodeObserved,
    NodeRemoved,
)
from events.catalog.jobs import JobCancelRequested, JobFailed, JobRejected, JobStarted, JobSubmitted
from events.catalog.lifecycle import RUN_END_OF, JobStatus, RunEnd, RunEndEvent, ends_run, failure_kind, final_status
from events.catalog.profiles import ResourceProfileUpdated
from events.wire.envelope import Latest, mark_after
from services.scheduler.core.policy import model as m
from services.scheduler.core.state.convert import job_of
from services.scheduler.core.state.facts import (
    SUSPECT_FOR_MS,
    Facts,
    Failure,
    JobFacts,
    NodeFacts,
    PartEnd,
    Placement,
)
from services.scheduler.core.state.policy_document import policy_from_document


def _node_observed(state: Facts, e: NodeObserved, _: int, __: str) -> None:
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    if facts.observed is None or e.generation > facts.observed.generation:
        facts.observed = e
        facts.gpu_health = {}
        facts.npu_health = {}


def _node_removed(state: Facts, e: NodeRemoved, _: int, __: str) -> None:
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    facts.removed_generation = max(facts.removed_generation, e.generation)


def _gpu_health(state: Facts, e: GpuHealthReported, time_ms: int, event_id: str) -> None:
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    stamp = facts.health_at.after(time_ms, event_id)
    if stamp is None:
        return
    facts.health_at = stamp
    for sample in e.gpus:
        facts.gpu_health[sample.index] = sample.health.value
    for npu in e.npus:
        facts.npu_health[npu.index] = npu.health.value


def _latest(stamps: dict[tuple[str, ...], Latest], key: tuple[str, ...], time_ms: int, event_id: str) -> bool:
    """Whether the report (``time_ms``, ``event_id``) about ``key`` is the latest: if so it is noted."""
    stamp = stamps.get(key, _BEFORE_ALL).after(time_ms, event_id)
    if stamp is None:
        return False
    stamps[key] = stamp
    return True


_BEFORE_ALL = Latest()


def _cluster_registered(state: Facts, e: ClusterRegistered, time_ms: int, event_id: str) -> None:
    if _latest(state.latest, ("cluster", e.cluster), time_ms, event_id):
        state.clusters[e.cluster] = e


def _cluster_status(state: Facts, e: ClusterStatusChanged, time_ms: int, event_id: str) -> None:
    if _latest(state.latest, ("status", e.cluster), time_ms, event_id):
        state.cluster_status[e.cluster] = e.status.value


def _profile(state: Facts, e: ResourceProfileUpdated, _: int, __: str) -> None:
    if e.node is not None:
        return
    latest = state.profiles.get(e.cluster)
    if latest is None or e.version > latest.version:
        state.profiles[e.cluster] = e


def _tenant(state: Facts, e: TenantRegistered, time_ms: int, event_id: str) -> None:
    if _latest(state.latest, ("tenant", e.tenant), time_ms, event_id):
        if e.change is not None and e.change.deleted:  # its document deleted: the tenant's defaults again
            state.tenants.pop(e.tenant, None)
        else:
            state.tenants[e.tenant] = e


def _quota(state: Facts, e: QuotaSet, time_ms: int, event_id: str) -> None:
    # Per author: governance's grants carry the log's time, which may run ahead of an operator's clock.
    if _latest(state.latest, ("quota", e.tenant, e.queue, e.set_by), time_ms, event_id):
        state.quotas[(e.tenant, e.queue)] = e


def _policy(state: Facts, e: PolicyConfigured, time_ms: int, event_id: str) -> None:
    try:
        policy_from_document(e.policy_version, e.document)
    except (ValueError, TypeError):
        return  # an invalid policy never takes effect; the intake should have refused it
    if _latest(state.latest, ("policy", e.configured_by), time_ms, event_id):
        state.policy = e


def _budget(state: Facts, e: BudgetSet, time_ms: int, event_id: str) -> None:
    if _latest(state.latest, ("budget", e.budget), time_ms, event_id):
        if e.change.deleted:
            state.budgets.pop(e.budget, None)
        else:
            state.budgets[e.budget] = e


def _budget_window(state: Facts, e: BudgetWindowOpened, _: int, __: str) -> None:
    current = state.budget_windows.get(e.budget)
    if current is None or e.start_ms > current.start_ms:  # windows only move on: a repeat changes nothing
        state.budget_windows[e.budget] = e


def _count_held(state: Facts, facts: JobFacts) -> None:
    """Each run that has both its placement and its end, once, into the budgets' ledger (whichever of
    its submission, placement and end is folded last)."""
    if facts.spec is None:
        return
    for run, ended_ms in facts.ended_at.items():
        placement = facts.placements.get(run)
        if placement is None or run in facts.held_counted:
            continue
        facts.held_counted.add(run)
        start = facts.placed_at[run]
        if placement.where:  # a spread run: each replica from when its part had it to when that part ended
            left = facts.left(run)
            for r, (cluster, since) in zip(placement.replicas, placement.where, strict=True):
                part = left.get(cluster)
                until = min(ended_ms, part.at_ms) if part is not None else ended_ms
                _count_grown(state, facts.spec.tenant, len(r.gpu_indices) * r.gpu_milli_each, max(since, start), until)
            continue
        added = sum(milli for _, milli in placement.grown)
        state.held.add(facts.spec.tenant, placement.gpu_milli() - added, start, ended_ms)
        for at, milli in placement.grown:
            _count_grown(state, facts.spec.tenant, milli, max(at, start), ended_ms)


def _count_grown(state: Facts, tenant: str, milli: int, from_ms: int, ended_ms: int) -> None:
    if milli and from_ms < ended_ms:
        state.held.add(tenant, milli, from_ms, ended_ms)


def _submitted(state: Facts, e: JobSubmitted, time_ms: int, __: str) -> None:
    facts = state.job(e.job_id)
    if facts.spec is None:
        facts.spec = job_of(e, time_ms)
        _judge_failures(facts)
        _count_held(state, facts)
        facts.submitted_ms = time_ms
        for _, asked_ms in sorted(facts.stop_requested.values()):  # preemptions folded before it
            if asked_ms >= 0:
                _count_preemption(state, e.tenant, asked_ms)


def _cancel_requested(state: Facts, e: JobCancelRequested, _: int, __: str) -> None:
    state.job(e.job_id).cancel_requested = True


def _ended(how: RunEnd) -> Callable[[Facts, RunEndEvent, int, str], None]:
    """The handler of the events that end a run ``how`` (``events.catalog.lifecycle``)."""
    final = final_status(how)  # once here, not per event

    def handle(state: Facts, e: RunEndEvent, time_ms: int, _: str) -> None:
        facts = state.job(e.job_id)
        if not ends_run(e):  # a job cancelled before it ever ran: it ends, and no run does
            facts.terminal = facts.terminal or final
            return
        run = e.run
        if run in facts.ended:
            return  # a run's first end is final: a later report (a failure while it was being stopped) is not
        if facts.spec is not None and facts.spec.spread_clusters > 1:
            _part_ended(facts, e, how, time_ms)  # the run ends with the scheduler's JobRunClosed
            return
        failed = (e.reason.value, e.node) if isinstance(e, JobFailed) else None
        _end_run(state, facts, run, how, e.cluster or "", failed, time_ms)

    return handle


def _part_ended(facts: JobFacts, e: RunEndEvent, how: RunEnd, time_ms: int) -> None:
    """A spread run's part in ``e.cluster`` ended (its first end there is final): it holds nothing there
    any more, and the run is closed by the scheduler once every part it opened has ended."""
    if facts.part_ends is None:
        facts.part_ends = {}
    ends = facts.part_ends.setdefault(e.run, {})
    if e.cluster is None or e.cluster in ends:
        return
    reason = e.reason.value if isinstance(e, JobFailed) else None
    ends[e.cluster] = PartEnd(how, reason, e.node if isinstance(e, JobFailed) else None, time_ms)


def _run_closed(state: Facts, e: JobRunClosed, time_ms: int, __: str) -> None:
    """The scheduler closed a spread run: it ends as its last part did."""
    facts = state.job(e.job_id)
    if e.run in facts.ended:
        return
    failed = (e.reason.value, e.node) if e.reason is not None else None
    _end_run(state, facts, e.run, e.outcome, e.cluster, failed, time_ms)


def _end_run(
    state: Facts,
    facts: JobFacts,
    run: int,
    how: RunEnd,
    cluster: str,
    failed: tuple[str, str | None] | None,
    time_ms: int,
) -> None:
    """Run ``run`` ended ``how`` (``failed``: the failure's reason and node): a failure that may be
    retried awaits the scheduler's verdict, unless the job asked no retries of a failure of its own
    (known once it is submitted); any other end of a final kind ends the job."""
    facts.ended[run] = how
    facts.ended_at[run] = time_ms
    kind = failure_kind(failed[0]) if failed is not None else None
    if kind is not None and failed is not None:
        if facts.failures is None:
            facts.failures = {}
        facts.failures[run] = Failure(failed[0], kind is FailureKind.INFRASTRUCTURE, cluster, failed[1], time_ms)
        _judge_failures(facts)
    else:
        final = final_status(how)
        if final is not None:
            facts.terminal = final
    _count_held(state, facts)


def _judge_failures(facts: JobFacts) -> None:
    """A failure of the workload ends a job that asked for no retries at once: nothing awaits a verdict."""
    if facts.spec is None or facts.spec.application_retries > 0:
        return
    for run, failure in (facts.failures or {}).items():
        if not failure.infrastructure and not facts.verdict(run):
            facts.terminal = facts.terminal or JobStatus.FAILED


def _retry_verdict(state: Facts, e: JobRetryScheduled | JobRetriesExhausted, _: int, __: str) -> None:
    facts = state.job(e.job_id)
    if facts.verdict(e.run):
        return  # one verdict per run: the scheduler never gives two
    if facts.verdicts is None:
        facts.verdicts = {}
    infrastructure = e.kind is FailureKind.INFRASTRUCTURE
    if isinstance(e, JobRetryScheduled):
        facts.verdicts[e.run] = (infrastructure, e.not_before_ms)
    else:
        facts.verdicts[e.run] = (infrastructure, -1)
        facts.terminal = facts.terminal or JobStatus.FAILED


def _started(state: Facts, e: JobStarted, time_ms: int, __: str) -> None:
    state.job(e.job_id).started_at.setdefault(e.run, time_ms)


def _rejected(state: Facts, e: JobRejected, _: int, __: str) -> None:
    facts = state.job(e.job_id)
    facts.terminal = facts.terminal or JobStatus.REJECTED


def _placed(state: Facts, e: JobPlaced, time_ms: int, __: str) -> None:
    facts = state.job(e.job_id)
    if e.run in facts.placements:
        return
    facts.victims = ()
    spread = facts.spec is not None and facts.spec.spread_clusters > 1
    where = ((e.cluster, time_ms),) * len(e.replicas) if spread else ()
    facts.placements[e.run] = Placement(e.cluster, e.replicas, where=where)
    facts.placed_at[e.run] = time_ms
    _count_held(state, facts)


def _replicas_added(state: Facts, e: JobReplicasAdded, time_ms: int, __: str) -> None:
    """The run grows by the event's replicas, once (a repeat names replica numbers it holds already): in
    its own cluster, or, for a spread run, in a part it opens or holds elsewhere (never one that ended, and
    never a run closed: the scheduler adds to neither, so such an event is not this state's to apply)."""
    facts = state.job(e.job_id)
    placement = facts.placements.get(e.run)
    if placement is None or e.run in facts.ended:
        return
    if e.cluster != placement.cluster and not placement.where:
        return
    if e.cluster in facts.left(e.run):
        return
    held = {r.replica for r in placement.replicas}
    if any(r.replica in held for r in e.replicas):
        return
    milli = sum(len(r.gpu_indices) * r.gpu_milli_each for r in e.replicas)
    facts.placements[e.run] = placement.added(e.cluster, e.replicas, time_ms, milli)
    ended_ms = facts.ended_at.get(e.run)
    if e.run in facts.held_counted and ended_ms is not None and facts.spec is not None:
        _count_grown(state, facts.spec.tenant, milli, max(time_ms, facts.placed_at[e.run]), ended_ms)


def _queued(state: Facts, e: JobQueued, time_ms: int, event_id: str) -> None:
    facts = state.job(e.job_id)
    wait = mark_after(facts.last_wait, e.cycle_id, event_id)
    if wait is None:
        return  # the wait applied already, or one an earlier cycle explained
    facts.last_wait = wait
    facts.last_queued = tuple(r.value for r in e.reasons)
    facts.last_queued_at = (time_ms, e.federation_position, e.tenant_queue_position, e.estimated_start_ms)


def _stop_requested(state: Facts, e: JobPreemptionRequested | JobReclaimRequested, time_ms: int, __: str) -> None:
    if e.job_id in state.settled:
        return  # over and dropped: a request to stop it (a producer's retry, read late) names no victim
    facts = state.job(e.job_id)
    preemption = isinstance(e, JobPreemptionRequested)
    preemptor_id = e.preemptor if isinstance(e, JobPreemptionRequested) else None
    asked = (preemptor_id or "", time_ms if preemption else -1)
    # Kept per run and per (run, cluster): a spread run is stopped part by part, and whether the job
    # spreads may be known only once its submission is folded.
    if facts.part_stops is None:
        facts.part_stops = {}
    new_part = (e.run, e.cluster) not in facts.part_stops
    facts.part_stops.setdefault((e.run, e.cluster), asked)
    new_run = e.run not in facts.stop_requested
    facts.stop_requested.setdefault(e.run, asked)
    if not (new_part if facts.spec is not None and facts.spec.spread_clusters > 1 else new_run):
        return  # asked once per run or part (the scheduler never asks twice): the preemptor named it already
    if preemption and facts.spec is not None:  # else counted when the submission is folded
        _count_preemption(state, facts.spec.tenant, time_ms)
    if preemptor_id is not None:
        preemptor = state.job(preemptor_id)
        if e.job_id not in preemptor.victims:
            preemptor.victims += (e.job_id,)


def _count_preemption(state: Facts, tenant: str, time_ms: int) -> None:
    """Keep when a tenant's job was asked to stop by a preemption: the hour up to its latest, sorted (any
    order of folds keeps the same times)."""
    times = state.preempted_at.setdefault(tenant, [])
    bisect.insort(times, time_ms)
    del times[: bisect.bisect_right(times, times[-1] - m.PREEMPTION_RATE_WINDOW_MS)]


def _finding(state: Facts, e: GovernanceFinding, _: int, __: str) -> None:
    if e.node is None or e.cluster is None or e.profile_penalty_milli <= 0:
        return
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    facts.suspect_until_ms = max(facts.suspect_until_ms, e.observed_ms + SUSPECT_FOR_MS)


def _cycle(state: Facts, e: SchedulingCycleCompleted, _: int, __: str) -> None:
    state.cycles = max(state.cycles, e.sequence + 1)


HANDLERS: dict[type, Any] = {
    NodeObserved: _node_observed,
    NodeRemoved: _node_removed,
    GpuHealthReported: _gpu_health,
    ClusterRegistered: _cluster_registered,
    ClusterStatusChanged: _cluster_status,
    ResourceProfileUpdated: _profile,
    TenantRegistered: _tenant,
    QuotaSet: _quota,
    PolicyConfigured: _policy,
    BudgetSet: _budget,
    BudgetWindowOpened: _budget_window,
    JobSubmitted: _submitted,
    JobCancelRequested: _cancel_requested,
    **{cls: _ended(how) for cls, how in RUN_END_OF.items()},
    JobRejected: _rejected,
    JobStarted: _started,
    JobPlaced: _placed,
    JobQueued: _queued,
    JobReplicasAdded: _replicas_added,
    JobRunClosed: _run_closed,
    JobPreemptionRequested: _stop_requested,
    JobReclaimRequested: _stop_requested,
    JobRetryScheduled: _retry_verdict,
    JobRetriesExhausted: _retry_verdict,
    SchedulingCycleCompleted: _cycle,
    GovernanceFinding: _finding,
}
