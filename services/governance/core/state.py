"""What governance knows: jobs and their runs, usage samples, lost nodes and clusters, quota requests.

Called by the governance host (``fold`` every record of the inventory, jobs, decisions and governance
topics) and by the pure rules, which read it. Pure: no I/O, no clock; time is the log's (``now_ms`` is the
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
from events.catalog.jobs import JobCancelRequested, JobFailed, JobKind, JobStarted, JobSubmitted
from events.catalog.lifecycle import (
    RUN_END_EVENTS,
    RUN_END_OF,
    JobStatus,
    RunEnd,
    RunEndEvent,
    awaits_verdict,
    ends_part,
    ends_run,
    final_status,
    spreads,
)
from events.wire.envelope import Envelope, Latest, mark_after
from services.governance.core.failures import Entry, FailureIndex
from services.governance.core.runs import RunFacts, Sample, grow, opened, split

SOURCE = "urn:fedsched:governance"
#: Usage samples kept per run (the idle rule needs the recent stretch only).
MAX_SAMPLES = 64

Stamp = tuple[int, str]
"""An event's own time and its envelope id (what ``Latest`` orders reports by)."""


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


@dataclass(frozen=True, slots=True)
class Spec:
    """What the rules read of a job's request (the whole ``JobSubmitted``, kept for every job ever
    submitted, cost more memory than the rest of the job's facts together)."""

    tenant: str
    name: str
    kind: JobKind
    gang: bool
    max_runtime_s: int | None
    application_retries: int = 0
    spread: bool = False
    """Whether its runs live in parts, one per cluster (``events.catalog.lifecycle.spreads``)."""

    @classmethod
    def of(cls, e: JobSubmitted) -> Spec:
        retries = e.retry.on_application_failure
        return cls(e.tenant, e.name, e.kind, e.is_gang(), e.max_runtime_s, retries, spreads(e))


@dataclass(slots=True)
class JobFacts:
    job_id: str
    spec: Spec | None = None
    submitted_ms: int = 0
    queued_reasons: tuple[str, ...] = ()
    queued_message: str = ""
    last_wait: tuple[str, tuple[str, ...]] = ("", ())
    """The cycle of the latest ``JobQueued`` applied and the envelope ids applied of that cycle."""
    runs: dict[int, RunFacts] = field(default_factory=dict)
    cancel_requested: bool = False
    terminal: JobStatus | None = None
    """The job's final status, once it has ended for good."""
    early: dict[int, list[tuple[Event, int, Stamp]]] = field(default_factory=dict)
    """Facts about a run read before its placement (topics are read one after another), or about a spread
    run's part read before the addition that opened it, kept for it (with the log's time and their own)."""

    def settled(self) -> bool:
        """Ended for good, every run placed (and every part of one) has ended and no fact waits for a run's
        placement: no rule reads it again (its failures stay in the indexes)."""
        return self.terminal is not None and not self.early and not any(run.holding() for run in self.runs.values())

    def live_run(self) -> RunFacts | None:
        live = [r for r in self.runs.values() if r.live]
        return max(live, key=lambda r: r.run) if live else None

    def pending(self) -> bool:
        return self.spec is not None and self.terminal is None and not self.cancel_requested and not self.live_run()


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
        elif isinstance(data, RUN_END_EVENTS):
            _ended(self, data, self.now_ms, (envelope.time_ms, envelope.id))
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
        for run in facts.runs.values():  # placed before the submission was read: now it is known
            if facts.spec.spread:
                split(run)
            run.undecided = ()


def _queued(state: GovState, e: Event, _: int, at: Stamp) -> None:
    assert isinstance(e, JobQueued)
    facts = state.job(e.job_id)
    wait = mark_after(facts.last_wait, e.cycle_id, at[1])
    if wait is None:
        return  # the wait applied already, or one an earlier cycle explained
    facts.last_wait = wait
    facts.queued_reasons, facts.queued_message = tuple(r.value for r in e.reasons), e.message


def _placed(state: GovState, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, JobPlaced)
    facts = state.job(e.job_id)
    if e.run in facts.runs:
        return
    spread = facts.spec is not None and facts.spec.spread
    run = facts.runs[e.run] = opened(e.run, e.cluster, e.replicas, at[0] if spread else t)
    if spread:
        split(run)
    elif facts.spec is None:
        run.undecided = ((at[0], e.replicas),)
    _replay(state, facts, e.run)


def _replay(state: GovState, facts: JobFacts, run: int) -> None:
    """Fold again the facts held for ``run`` (its placement, or a part's opening, came): those that still
    wait (for another part's opening) are held again."""
    for early, t, at in facts.early.pop(run, []):
        if isinstance(early, JobStarted):
            _started(state, early, t, at)
        elif isinstance(early, RUN_END_EVENTS):
            _ended(state, early, t, at)
        elif isinstance(early, JobReclaimRequested):
            _reclaim_requested(state, early, t, at)
        elif isinstance(early, JobRunClosed):
            _closed(state, early, t, at)


def _replicas_added(state: GovState, e: Event, t: int, at: Stamp) -> None:
    """The run holds more: once per addition (a repeat names replica numbers it holds), while it lives. In a
    cluster other than the run's placement (a spread run), the addition opens the run's part there, or
    grows it."""
    assert isinstance(e, JobReplicasAdded)
    facts = state.job(e.job_id)
    run = facts.runs.get(e.run)
    if run is None or run.ended_ms is not None:
        return
    # Only a spread run is added to elsewhere: before the submission is read, that says it spreads.
    elsewhere = e.cluster != run.cluster and (facts.spec is None or facts.spec.spread)
    if not (run.parts or elsewhere or (facts.spec is not None and facts.spec.spread)):
        if e.cluster == run.cluster and e.replicas[0].replica == run.replicas:
            grow(run, e.replicas, t)
            if facts.spec is None:
                run.undecided = (*run.undecided, (at[0], e.replicas))
        return
    # A spread run's replica numbers run on across its parts (those of an ended part are not reused): a
    # repeat names numbers below the next one.
    if e.replicas[0].replica < run.replicas:
        return
    split(run)
    part = run.parts.get(e.cluster)
    if part is not None and part.ended_ms is not None:
        return  # the scheduler never opens a part again where the run's part ended
    run.replicas = 1 + max(r.replica for r in e.replicas)
    if part is None:
        run.parts[e.cluster] = opened(e.run, e.cluster, e.replicas, at[0])
        _replay(state, facts, e.run)
    else:
        grow(part, e.replicas, max(at[0], part.placed_ms))


def _spread(facts: JobFacts, run: RunFacts) -> bool:
    """Whether ``run`` lives in parts (split, if its job's submission says so and it is not yet)."""
    if not run.parts and facts.spec is not None and facts.spec.spread:
        split(run)
    return bool(run.parts)


def _started(state: GovState, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, JobStarted)
    facts = state.job(e.job_id)
    run = facts.runs.get(e.run)
    if run is None:
        _hold(facts, e, t, at)
    elif _spread(facts, run):
        part = run.parts.get(e.cluster)
        if part is None:
            if run.live:
                _hold(facts, e, t, at)  # read before the addition that opened its part
            return
        if part.started_ms is None:
            part.started_ms = max(at[0], part.placed_ms)
        # The run started with its first part, whichever part's start is read first.
        run.started_ms = part.started_ms if run.started_ms is None else min(run.started_ms, part.started_ms)
    elif run.started_ms is None:
        run.started_ms = t


def _ended(state: GovState, e: RunEndEvent, t: int, at: Stamp) -> None:
    facts = state.job(e.job_id)
    run = facts.runs.get(e.run)
    spread = (facts.spec is not None and facts.spec.spread) or (run is not None and bool(run.parts))
    if ends_part(e, spread):
        if run is None:
            _hold(facts, e, t, at)  # a part's end ends no job: kept for the run's placement
        else:
            _spread(facts, run)
            _part_ended(state, facts, run, e, t, at)
        return
    how = RUN_END_OF[type(e)]
    final = final_status(how)
    if awaits_verdict(e, facts.spec.application_retries if facts.spec is not None else 0):
        final = None  # the scheduler's verdict ends the job, or queues it again (``_exhausted``)
    if not ends_run(e):  # a job cancelled before it ever ran: it ends, and no run does
        facts.terminal = facts.terminal or final
        return
    if run is None:
        if _hold(facts, e, t, at) and final is not None:
            facts.terminal = final
        return
    if run.ended_ms is not None:
        return  # a run's first end is final, as the scheduler takes it
    if final is not None:
        facts.terminal = final
    _end(state, facts, run, e, t)


def _end(state: GovState, facts: JobFacts, holding: RunFacts, e: RunEndEvent, t: int) -> None:
    """``holding`` (a run, or a spread run's part) ends at ``t``: the GPU time it held goes to the ledger."""
    holding.ended_ms, holding.ended_how = t, RUN_END_OF[type(e)]
    if facts.spec is not None:
        for milli, since in holding.held_pieces():
            if milli and since < t:
                state.held.add(facts.spec.tenant, milli, since, t)
    # The usage samples serve the rules on live runs only (idle, straggling gang); kept for every run
    # ever ended, up to MAX_SAMPLES each, they were most of what the state's history cost in memory.
    holding.samples = []
    if isinstance(e, JobFailed):
        holding.fail_reason = e.reason.value
        holding.fail_node = e.node or (holding.nodes[0] if holding.nodes else None)


def _part_ended(state: GovState, facts: JobFacts, run: RunFacts, e: RunEndEvent, t: int, at: Stamp) -> None:
    """A spread run's part in ``e.cluster`` ended (at the event's own time): its time and nothing else."""
    part = run.parts.get(e.cluster or "")  # (a cancellation names its part's cluster)
    if part is None:
        if run.live:
            _hold(facts, e, t, at)  # read before the addition that opened the part
        return
    if part.ended_ms is None:  # a part's first end is final
        _end(state, facts, part, e, max(at[0], part.placed_ms))


def _closed(state: GovState, e: Event, t: int, at: Stamp) -> None:
    """The scheduler closed a spread run: the run ends (as its last part did), and the job with it when
    that is final. A part whose end is not read yet holds on until it is (it ends at its own time)."""
    assert isinstance(e, JobRunClosed)
    facts = state.job(e.job_id)
    run = facts.runs.get(e.run)
    if run is None:
        _hold(facts, e, t, at)
        return
    split(run)
    if run.ended_ms is not None:
        return
    run.ended_ms, run.ended_how, run.closed_in = max(at[0], run.placed_ms), e.outcome, e.cluster
    if e.reason is not None:
        run.fail_reason, run.fail_node = e.reason.value, e.node
    final = final_status(e.outcome)
    if final is not None and not awaits_verdict(e, facts.spec.application_retries if facts.spec is not None else 0):
        facts.terminal = final
    facts.early.pop(e.run, None)  # no part opens in a closed run: what waited for one is about nothing


def _exhausted(state: GovState, e: Event, _: int, _at: Stamp) -> None:
    facts = state.job(e.job_id)  # type: ignore[attr-defined]
    facts.terminal = facts.terminal or JobStatus.FAILED


def _hold(facts: JobFacts, e: JobStarted | RunEndEvent | JobReclaimRequested | JobRunClosed, t: int, at: Stamp) -> bool:
    """Keep a fact about a run not placed yet (or a part not opened yet) for it, once; whether it was not
    held already."""
    held = facts.early.setdefault(e.run, [])
    if any(prior == e for prior, _, _ in held):
        return False
    held.append((e, t, at))
    return True


def _cancel_requested(state: GovState, e: Event, _: int, _at: Stamp) -> None:
    state.job(e.job_id).cancel_requested = True  # type: ignore[attr-defined]


def _reclaim_requested(state: GovState, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, JobReclaimRequested)
    facts = state.job(e.job_id)
    run = facts.runs.get(e.run)
    if run is None:
        _hold(facts, e, t, at)  # read before its run's placement: for the placement, as a start or end is
        return
    holding = run.parts.get(e.cluster) if _spread(facts, run) else run
    if holding is None:
        if run.live:
            _hold(facts, e, t, at)  # a part's reclaim read before the addition that opened it
    elif holding.reclaim_rule is None:
        holding.reclaim_rule = e.rule


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
    JobPlaced: _placed,
    JobReplicasAdded: _replicas_added,
    JobStarted: _started,
    JobCancelRequested: _cancel_requested,
    JobReclaimRequested: _reclaim_requested,
    JobRetriesExhausted: _exhausted,
    JobRunClosed: _closed,
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
