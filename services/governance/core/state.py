"""What governance knows: jobs and their runs, usage samples, lost nodes and clusters, quota requests.

Called by the governance host (``fold`` every record of the inventory, jobs, decisions and governance
topics) and by the pure rules, which read it. A job's run events (placement, additions, start, ends, a
spread run's close, reclaim requests) are folded by ``services.governance.core.runs`` into the job's facts
(``services.governance.core.facts``). Pure: no I/O, no clock; time is the log's (``now_ms`` is the
latest event time folded, a monotone log clock). Governance's own outputs are folded too (``emitted``
holds their ids), so a restarted host that re-reads the log never emits an action twice.

An event appended again at a later offset, after any number of other records, changes nothing (the
table of every event type is in ``events.log.reading``): a report keeps the latest of its entity (a
node's generation; by time, then the order read, with the envelope id telling a repeat:
``events.wire.envelope.Latest``, for a cluster's status, a node's usage and, per author, a queue's
quota); a step of a job's lifecycle is taken once (a run's first placement, start and end, and the
job's final status with it, as the scheduler takes them; a fact held for a run not placed yet is held
once); a wait keeps the latest cycle's reasons.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from events.catalog.base import Event, has_field
from events.catalog.budget_windows import DAY_MS, HeldLedger
from events.catalog.decisions import (
    JobPlaced,
    JobQueued,
    JobReclaimRequested,
    JobReplicasAdded,
    JobRetriesExhausted,
    JobRunClosed,
)
from events.catalog.governance import (
    BudgetSet,
    BudgetWindowOpened,
    GovernanceClockTicked,
    QuotaLine,
    QuotaRequestApproved,
    QuotaRequestRejected,
    QuotaRequestSubmitted,
    QuotaSet,
    TenantRegistered,
)
from events.catalog.inventory import (
    ClusterStatus,
    ClusterStatusChanged,
    NodeObserved,
    NodeRemoved,
    NodeUsageReported,
)
from events.catalog.jobs import JobCancelRequested, JobStarted, JobSubmitted
from events.catalog.lifecycle import (
    RUN_END_EVENTS,
    JobStatus,
    RunEnd,
)
from events.wire.envelope import Envelope, Latest, mark_after
from services.governance.core import runs
from services.governance.core.facts import JobFacts, RunFacts, Sample, Spec, Stamp
from services.governance.core.failures import Entry, FailureIndex

SOURCE = "urn:fedsched:governance"
#: Usage samples kept per run (the idle rule needs the recent stretch only).
MAX_SAMPLES = 64


def derived_id(*parts: object) -> str:
    """An identifier (lowercase, at most 128 characters) derived from facts: readable when short, hashed
    when long."""
    text = ".".join(str(p) for p in parts)
    if len(text) <= 128:
        return text
    return f"{text[:60].rstrip('.-_')}.{hashlib.sha256(text.encode()).hexdigest()[:40]}"


@dataclass(frozen=True, slots=True)
class Output:
    """An event governance publishes, under an id derived from what caused it, at a log time."""

    id: str
    time_ms: int
    event: Event


@dataclass(slots=True)
class Request:
    submitted: QuotaRequestSubmitted
    submitted_ms: int
    decision: QuotaRequestApproved | QuotaRequestRejected | None = None


@dataclass(slots=True)
class GovState:
    now_ms: int = 0
    jobs: dict[str, JobFacts] = field(default_factory=dict)
    lost_nodes: dict[tuple[str, str], int] = field(default_factory=dict)
    """(cluster, node) -> when it was removed (cleared when it is observed again)."""
    unreachable: dict[str, int] = field(default_factory=dict)
    """cluster -> since when it is unreachable."""
    requests: dict[str, Request] = field(default_factory=dict)
    early_decisions: dict[str, QuotaRequestApproved | QuotaRequestRejected] = field(default_factory=dict)
    """A decision read before the request it decides (by request id): it applies when the request comes."""
    base_quota: dict[tuple[str, str], tuple[QuotaLine, ...]] = field(default_factory=dict)
    """(tenant, queue) -> the quota an operator set (not one governance derived from a request)."""
    base_versions: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    """(tenant, queue) -> (how many base quotas were set, log time of the latest)."""
    granted_ms: dict[tuple[str, str], int] = field(default_factory=dict)
    """(tenant, queue) -> log time of the latest quota governance derived from grants."""
    emitted: set[str] = field(default_factory=set)
    active: set[str] = field(default_factory=set)
    """Jobs the job rules can still act on: not ended, or holding a live run. The rules run every step
    over these, not over every job ever seen (which made a step grow with the history)."""
    workload_failures: FailureIndex = field(default_factory=FailureIndex)
    """Failed runs by (tenant, job name): (ended, job, run, cluster, node); the crash-loop rule's input."""
    node_failures: FailureIndex = field(default_factory=FailureIndex)
    """Failed runs by (cluster, node): (ended, tenant/name, run, cluster, node, ran for, job); the
    suspect-node rule's input."""
    settled: set[str] = field(default_factory=set)
    """Jobs whose facts were dropped once settled (a service that runs for months keeps what is open);
    what still comes for them is ignored."""
    keep_settled: bool = False
    latest: dict[tuple[str, ...], Latest] = field(default_factory=dict)
    """The latest report applied of each cluster's status, node's usage and, per author, queue's quota,
    by (kind, key..., author): an older one, or the same one again, changes nothing."""
    generations: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    """(cluster, node) -> (highest generation observed, highest removed): lost while removed is the later."""
    budgets: dict[str, BudgetSet] = field(default_factory=dict)
    """The budgets in force, by name."""
    budget_windows: dict[str, BudgetWindowOpened] = field(default_factory=dict)
    """Each budget's latest window opened (by start)."""
    cohorts: dict[str, str] = field(default_factory=dict)
    """tenant -> its cohort (a cohort's budget counts its members)."""
    held: HeldLedger = field(default_factory=HeldLedger)
    """The GPU time runs that ended held, per tenant (``events.catalog.budget_windows``)."""
    held_pruned_ms: int = 0

    def waits_for_time(self) -> bool:
        """Could time passing alone make a rule act: an open job (its runtime limit, idle stretch, lease,
        wait) or a quota grant still to start or to expire."""
        if self.active or self.budgets:  # a budget's next window opens with time alone
            return True
        for request in self.requests.values():
            grant = request.decision
            if isinstance(grant, QuotaRequestApproved) and (
                grant.effective_from_ms > self.now_ms or (grant.expires_ms or 0) > self.now_ms
            ):
                return True
        return False

    def job(self, job_id: str) -> JobFacts:
        facts = self.jobs.get(job_id)
        if facts is None:
            if job_id in self.settled:
                return JobFacts(job_id)  # folded into nothing: no rule reads a settled job
            facts = self.jobs[job_id] = JobFacts(job_id)
        return facts

    def fold(self, envelope: Envelope) -> None:
        self.now_ms = max(self.now_ms, envelope.time_ms)
        if self.now_ms - self.held_pruned_ms > DAY_MS:
            self.held.forget_before(self.now_ms)
            self.held_pruned_ms = self.now_ms
        if envelope.source == SOURCE and not isinstance(envelope.data, GovernanceClockTicked):
            self.emitted.add(envelope.id)  # (a tick is no action: nothing to keep from doing twice)
        # Handlers get the log clock (the latest event time so far), not the event's own time: producers
        # on different clocks (a simulated fleet runs ahead of the scheduler) then never make a fact
        # look older than what was already seen.
        data = envelope.data
        handler = _HANDLERS.get(type(data))
        if handler is not None:
            handler(self, data, self.now_ms, (envelope.time_ms, envelope.id))
        if has_field(type(data), "job_id"):
            job_id = data.job_id  # type: ignore[attr-defined]
            self._classify(job_id)
            facts = self.jobs.get(job_id)
            if facts is not None and not self.keep_settled and facts.settled():
                del self.jobs[job_id]
                self.settled.add(job_id)

    def _classify(self, job_id: str) -> None:
        facts = self.jobs.get(job_id)
        if facts is None:
            return
        if facts.terminal is None or any(run.holding() for run in facts.runs.values()):
            self.active.add(job_id)
        else:
            self.active.discard(job_id)
        spec = facts.spec
        if spec is None or not (facts.runs or job_id in self.workload_failures.of_job):
            return
        workload: list[tuple[Hashable, Entry]] = []
        nodes: list[tuple[Hashable, Entry]] = []
        for run in sorted(facts.runs.values(), key=lambda r: r.run):
            if run.ended_how == RunEnd.FAILED and run.ended_ms is not None:
                cluster = run.closed_in or run.cluster
                entry = (run.ended_ms, job_id, run.run, cluster, run.fail_node or "")
                workload.append(((spec.tenant, spec.name), entry))
            # A node is suspected by the parts that failed on it: a spread run's, each in its own cluster.
            for failed in run.holdings():
                node = failed.fail_node or ""
                if failed.ended_how != RunEnd.FAILED or failed.ended_ms is None or not node:
                    continue
                ran = failed.ended_ms - (failed.started_ms or failed.placed_ms)
                name = f"{spec.tenant}/{spec.name}"
                nodes.append(
                    ((failed.cluster, node), (failed.ended_ms, name, run.run, failed.cluster, node, ran, job_id))
                )
        self.workload_failures.set_job(job_id, workload)
        self.node_failures.set_job(job_id, nodes)


def _submitted(state: GovState, e: Event, t: int, _at: Stamp) -> None:
    assert isinstance(e, JobSubmitted)
    facts = state.job(e.job_id)
    if facts.spec is None:
        facts.spec, facts.submitted_ms = Spec.of(e), t
        runs.submitted(facts)  # placed before the submission was read: whether it spreads is known now


def _queued(state: GovState, e: Event, _: int, at: Stamp) -> None:
    assert isinstance(e, JobQueued)
    facts = state.job(e.job_id)
    wait = mark_after(facts.last_wait, e.cycle_id, at[1])
    if wait is None:
        return  # the wait applied already, or one an earlier cycle explained
    facts.last_wait = wait
    facts.queued_reasons, facts.queued_message = tuple(r.value for r in e.reasons), e.message


RunFold = Callable[[JobFacts, HeldLedger, Event, int, Stamp], None]


def _about_run(fold: RunFold) -> Callable[[GovState, Event, int, Stamp], None]:
    """The handler of a job's run event: ``fold`` (``services.governance.core.runs``) on the job's facts."""

    def handle(state: GovState, e: Event, t: int, at: Stamp) -> None:
        fold(state.job(e.job_id), state.held, e, t, at)  # type: ignore[attr-defined]

    return handle


def _exhausted(state: GovState, e: Event, _: int, _at: Stamp) -> None:
    facts = state.job(e.job_id)  # type: ignore[attr-defined]
    facts.terminal = facts.terminal or JobStatus.FAILED


def _cancel_requested(state: GovState, e: Event, _: int, _at: Stamp) -> None:
    state.job(e.job_id).cancel_requested = True  # type: ignore[attr-defined]


def _usage(state: GovState, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, NodeUsageReported)
    if not _latest(state, ("usage", e.cluster, e.node), at):
        return
    for usage in e.jobs:
        facts = state.jobs.get(usage.job_id)
        run = facts.live_run() if facts is not None else None
        if run is None or usage.run not in (None, run.run):
            continue  # not a run the rules watch (a report that names an earlier run is about that one)
        holding = run.parts.get(e.cluster) if run.parts else run
        if holding is None or holding.cluster != e.cluster or holding.ended_ms is not None:
            continue  # measured in a cluster where the run holds nothing (now)
        holding.samples.append(Sample(t, e.window_ms, e.node, holding.busy_pct(usage)))
        del holding.samples[:-MAX_SAMPLES]


def _node_observed(state: GovState, e: Event, _: int, _at: Stamp) -> None:
    assert isinstance(e, NodeObserved)
    key = (e.cluster, e.node)
    observed, removed = state.generations.get(key, (-1, -1))
    state.generations[key] = (max(observed, e.generation), removed)
    if e.generation > removed:
        state.lost_nodes.pop(key, None)


def _node_removed(state: GovState, e: Event, t: int, _at: Stamp) -> None:
    assert isinstance(e, NodeRemoved)
    key = (e.cluster, e.node)
    observed, removed = state.generations.get(key, (-1, -1))
    state.generations[key] = (observed, max(removed, e.generation))
    if e.generation >= observed:  # an observation of a later generation brought it back already
        state.lost_nodes.setdefault(key, t)


def _cluster_status(state: GovState, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, ClusterStatusChanged)
    if not _latest(state, ("status", e.cluster), at):
        return
    if e.status is ClusterStatus.UNREACHABLE:
        state.unreachable.setdefault(e.cluster, t)
    else:
        state.unreachable.pop(e.cluster, None)


def _budget(state: GovState, e: Event, _: int, at: Stamp) -> None:
    assert isinstance(e, BudgetSet)
    if _latest(state, ("budget", e.budget), at):
        if e.change.deleted:
            state.budgets.pop(e.budget, None)
        else:
            state.budgets[e.budget] = e


def _budget_window(state: GovState, e: Event, _: int, _at: Stamp) -> None:
    assert isinstance(e, BudgetWindowOpened)
    current = state.budget_windows.get(e.budget)
    if current is None or e.start_ms > current.start_ms:
        state.budget_windows[e.budget] = e


def _tenant(state: GovState, e: Event, _: int, at: Stamp) -> None:
    assert isinstance(e, TenantRegistered)
    if _latest(state, ("tenant", e.tenant), at):
        deleted = e.change is not None and e.change.deleted
        if e.cohort is None or deleted:
            state.cohorts.pop(e.tenant, None)
        else:
            state.cohorts[e.tenant] = e.cohort


def _quota_set(state: GovState, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, QuotaSet)
    # Per author: governance's grants carry the log's time, which may run ahead of an operator's clock.
    if not _latest(state, ("quota", e.tenant, e.queue, e.set_by), at):
        return
    if e.request_id is None:
        key = (e.tenant, e.queue)
        state.base_quota[key] = e.lines
        state.base_versions[key] = (state.base_versions.get(key, (0, 0))[0] + 1, t)
    else:
        state.granted_ms[(e.tenant, e.queue)] = t


def _request(state: GovState, e: Event, t: int, _at: Stamp) -> None:
    assert isinstance(e, QuotaRequestSubmitted)
    if e.request_id not in state.requests:
        state.requests[e.request_id] = Request(e, t, state.early_decisions.pop(e.request_id, None))


def _decided(state: GovState, e: Event, _: int, _at: Stamp) -> None:
    assert isinstance(e, QuotaRequestApproved | QuotaRequestRejected)
    request = state.requests.get(e.request_id)
    if request is None:  # read before its request (another order of the log's reads): kept for it
        state.early_decisions.setdefault(e.request_id, e)
    elif request.decision is None:
        request.decision = e


def _latest(state: GovState, key: tuple[str, ...], at: Stamp) -> bool:
    """Whether the report stamped ``at`` is the latest about ``key``: if so it is noted."""
    stamp = state.latest.get(key, _BEFORE_ALL).after(*at)
    if stamp is None:
        return False
    state.latest[key] = stamp
    return True


_BEFORE_ALL = Latest()

_HANDLERS: dict[type[Event], Callable[[GovState, Event, int, Stamp], None]] = {
    JobSubmitted: _submitted,
    JobQueued: _queued,
    JobPlaced: _about_run(runs.placed),
    JobReplicasAdded: _about_run(runs.replicas_added),
    JobStarted: _about_run(runs.started),
    **{kind: _about_run(runs.ended) for kind in RUN_END_EVENTS},
    JobRunClosed: _about_run(runs.closed),
    JobCancelRequested: _cancel_requested,
    JobReclaimRequested: _about_run(runs.reclaim_requested),
    JobRetriesExhausted: _exhausted,
    NodeUsageReported: _usage,
    NodeObserved: _node_observed,
    NodeRemoved: _node_removed,
    ClusterStatusChanged: _cluster_status,
    QuotaSet: _quota_set,
    BudgetSet: _budget,
    BudgetWindowOpened: _budget_window,
    TenantRegistered: _tenant,
    QuotaRequestSubmitted: _request,
    QuotaRequestApproved: _decided,
    QuotaRequestRejected: _decided,
}

__all__ = [
    "MAX_SAMPLES",
    "SOURCE",
    "GovState",
    "JobFacts",
    "Output",
    "Request",
    "RunFacts",
    "Spec",
    "Stamp",
    "derived_id",
]
