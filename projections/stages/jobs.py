"""The job view: each job's status, timeline with reasons, placement, waiting time, runs, preemptions,
and while it waits, where it stands (``Wait``: its wait's category, its places, its estimated start).

A run that failed for a cause that may be retried (``events.catalog.lifecycle.awaits_verdict``) leaves
the job queued, not failed: the scheduler's verdict decides, ``JobRetryScheduled`` (a timeline entry
"retry 1 of 3 after node n-17 failed", one more in ``retries``) or ``JobRetriesExhausted`` (failed, with
the reason ``RetriesExhausted`` and the scheduler's words).

A spread inference service (``events.catalog.lifecycle.spreads``) runs in parts, one per cluster
(``RunPart``): its placement opens the first, a ``JobReplicasAdded`` naming another cluster opens that
cluster's part (or grows it), and every replica says its cluster. A run-end event of such a job ends only
its cluster's part: that part's replicas stop holding (their nodes, their queue hold, their device time
until then), the timeline says where the service runs on, and the status stays. The run ends with the
scheduler's ``JobRunClosed``, as its last part did; a failure then awaits the retry verdict as any run's.
A report about a part sorted before the addition that opens it waits for it (as a run's reports wait for
its placement), and the close waits for the ends of the parts it closes.

Called by the projection hosts; its entities are keyed by job id. Pure. Besides the view, this stage
derives the deltas the other stages need: a placement becomes allocations on its nodes and on its
tenant's queue; the end of a run releases them and reports the GPU time used; a queued job is
pending demand for its GPU models.

Order. A job's events come from two partitions, read at their own paces: its requests and lifecycle
reports from its partition of ``fedsched.jobs``, the scheduler's decisions from ``fedsched.decisions``.
The view is what folding them in *job order* gives, whatever order they are read in: event time, then
a fixed rank per kind of transition (causes first: a submission before its decisions, a placement
before the start it enables, a stop request before the stop), then where the event was read. An
event never sorts before one read earlier from its own partition (the log order of a partition
stays the order: its sort time and rank are raised to the previous one's when they are lower).

So the view keeps each event as a compact ``Fact`` (what the view is made of), in job order. An event
that comes last in that order is folded onto the view; one that comes before facts already folded
(its cause was read after its effect) makes the view be folded again from its facts: from the start,
or from ``base`` once more than ``FACTS_LIMIT`` facts were kept (the oldest are folded into ``base``;
an event older than those is folded where it would have come among the kept ones).

What the stage emits follows job order too: the deltas of the facts in job order, each with the
time of its fact, as far as no fact waits for a cause not read yet (``_waits``: the job's submission,
the end of the run it holds before a new placement or wait, the placement of the run a report is
about). The facts after one that waits wait with it; the fact that completes them emits their deltas
at once. So the other stages get the same deltas in the same order whichever partition is read first.
Only a fact read after facts later in job order whose deltas are out already (facts of different
partitions that do not cause each other, such as a cancellation and a wait, or clocks so far apart
that an effect is stamped before its cause) is different: it emits what takes the other stages from
what was emitted to what the facts now say (``_net``: the runs it releases anew, the job's
allocations, queue hold and pending demand as they now stand). The states are then exact (the deltas
are stated per job and run, see ``projections.stages.deltas``), but an aggregate (a queue, a node, a
cluster's roll-up) may count another number of versions than a fold in job order would. A run's GPU
time is released by its own end only: a placement that replaces a run still held (its end comes later
in job order, or was lost) frees its nodes at once and releases the run's GPU time when its end is
folded. Nothing is emitted for a job before its submission is folded (the scheduler ignores a
placement of a job it has not seen submitted, too).

An event for a job never submitted (an orphan: its JobSubmitted was lost or is still in flight on
another partition) creates a view marked ``orphan`` rather than failing.

Duplicates. An event appended again at a later offset (a producer that retried, a connector that
re-published after a restart), however many records later, changes nothing, by the lifecycle
(``events.catalog.lifecycle``): each step a job takes once is kept as a key in ``seen`` (its
submission, its rejection, the request to cancel it; per run: its start, its end, the scheduler's request
to stop it), and a step already taken is not taken again. A run's first end is final, as the scheduler
takes it; a ``JobCancelled`` that names no run is taken once, and ends the run the job holds if it
holds one. A placement of a run no later
than the latest placed (decisions come in turn on one partition) is one already made. A wait
(``JobQueued``) is repeated when it comes from an earlier cycle than the latest applied, or is one of
those applied of that cycle (``events.wire.envelope.mark_after``).
The keys of facts folded into ``base`` stay in it, so ``seen`` covers the job's whole history, in memory
that grows with its runs only.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import field
from operator import attrgetter
from typing import Any

from events.catalog.base import Event
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
)
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobPreempted,
    JobReclaimed,
    JobRejected,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
)
from events.catalog.lifecycle import FINAL_STATUSES, RUN_END_OF, STATUS_AFTER, failure_kind
from events.catalog.reasons import DESCRIPTIONS, ReasonCode
from events.wire.envelope import Envelope, mark_after
from projections.stages.core import Applied, Emitted, Input, Routed, Silent, evolve, record
from projections.stages.deltas import NodeAllocation, PendingDemand, QueueAllocation, ShapeSeen, UsageInterval
from projections.stages.shapes import shape_of

STAGE = "jobs"
TIMELINE_LIMIT = 200
FACTS_LIMIT = 64

"""Statuses a job view ends in: the catalogue's final statuses (``projections.readmodel.writer`` reads it)."""
_RUN_ENDS: dict[str, tuple[str, str]] = {
    cls.event_type.rsplit(".", 1)[-1]: (STATUS_AFTER[cls].value, how.value.capitalize())
    for cls, how in RUN_END_OF.items()
}
"""Each event that ends a run (by its name, as facts keep it) -> the status the view is then in and the
timeline's reason (``Preempted``). Plain strings: the view is stored as it is."""
_HOW: dict[str, str] = {cls.event_type.rsplit(".", 1)[-1]: how.value for cls, how in RUN_END_OF.items()}
"""Each event that ends a run (or a spread run's part) -> how (``RunEnd``'s word)."""
_STATUS_AFTER_OUTCOME: dict[str, str] = {how.value: STATUS_AFTER[cls].value for cls, how in RUN_END_OF.items()}
"""How a run ended (``RunEnd``'s word, a ``JobRunClosed.outcome``) -> the status its end leaves the job in
(before a failure's verdict)."""
_CLOSE = "JobRunClosed"
_RUN_FACTS = frozenset({"JobStarted", "JobReplicasAdded", *_RUN_ENDS, _CLOSE})
_PART_FACTS = frozenset({"JobStarted", "JobPreemptionRequested", "JobReclaimRequested", *_RUN_ENDS})
"""What a spread run's cluster reports or is asked of its own part only: a step taken once per part."""
_REPORTS = frozenset({"JobStarted", *_RUN_ENDS})
"""What a cluster reports of its part of a spread run (a part not opened yet waits for its opening)."""
_REQUESTS = frozenset({"JobPreemptionRequested", "JobReclaimRequested", "JobCancelRequested"})
_RANK = {
    "JobSubmitted": 0,
    "JobRejected": 1,
    "JobQueued": 2,
    "JobPlaced": 3,
    "JobStarted": 4,
    "JobReplicasAdded": 4,
    "JobPreemptionRequested": 5,
    "JobReclaimRequested": 5,
    "JobCancelRequested": 6,
    "JobSucceeded": 7,
    "JobFailed": 7,
    "JobPreempted": 7,
    "JobReclaimed": 7,
    "JobCancelled": 7,
    "JobRunClosed": 8,
    "JobRetryScheduled": 9,
    "JobRetriesExhausted": 9,
}
"""Within one millisecond, what enables comes before what it enables."""

Order = tuple[int, int, str, int, int]
"""A fact's place in job order: (time, rank, topic, partition, offset)."""


@record
class TimelineEntry:
    time_ms: int
    status: str
    event: str
    reason: str = ""
    message: str = ""


@record
class ReplicaSlot:
    node: str
    gpu_indices: tuple[int, ...]
    gpu_milli_each: int
    npu_indices: tuple[int, ...] = ()
    cluster: str = ""
    """The cluster of the node (a spread run holds replicas in several)."""
    replica: int = 0
    """Its number in the run (unique across a spread run's clusters)."""


@record
class Submission:
    """What a ``JobSubmitted`` says that the view shows or the other stages need."""

    name: str
    tenant: str
    project: str
    queue: str
    kind: str
    priority_class: str
    replicas: int
    cpu_milli: int
    memory_mib: int
    gpu_milli: int
    gpu_models: tuple[str, ...]
    preemptible: bool
    expected_runtime_s: int | None = None
    max_runtime_s: int | None = None
    application_retries: int = 0
    npus: int = 0
    """Per replica."""
    npu_models: tuple[str, ...] = ()
    spread_clusters: int = 1
    """The clusters its inference service may spread over (``events.catalog.lifecycle.spreads``: above 1)."""


@record
class Placement:
    cluster: str
    slots: tuple[ReplicaSlot, ...]
    first: int = 0
    """The number of its first replica (replica numbers are unique across a run's clusters)."""


@record
class RunPart:
    """A spread run's part in one cluster: opened by the run's placement or by the ``JobReplicasAdded`` that
    first named the cluster, grown by the next ones, ended by its cluster's run-end event (``ended``: how,
    ``RunEnd``'s word; "" while it holds its replicas)."""

    cluster: str
    replicas: int
    opened_ms: int
    ended: str = ""
    reason: str = ""
    ended_ms: int | None = None


@record
class Closure:
    """What a ``JobRunClosed`` says: how the run ended (its last part), and how each part ended
    (cluster, ``RunEnd`` word, failure reason or "")."""

    outcome: str
    parts: tuple[tuple[str, str, str], ...]


@record
class Wait:
    """What a ``JobQueued`` says of where the job stands: the category of its wait, its places in the
    federation's order and in its own queue, and when it may start (``None``: not said)."""

    pending_reason: str | None
    federation_position: int | None
    tenant_queue_position: int | None
    estimated_start_ms: int | None


NOT_WAITING = Wait(None, None, None, None)


@record
class Fact:
    """One event of the job as the view folds it: its kind (the event type's name, as the timeline
    shows it), its time, and what the view takes from it; ``order`` is its place in job order."""

    order: Order
    time_ms: int
    event: str
    run: int = 0
    reason: str = ""
    message: str = ""
    detail: Submission | Placement | Wait | Closure | None = None
    tenant: str = ""
    """The tenant a rejection names."""
    cluster: str = ""
    """The cluster a report or a request to stop is about (a spread run's part there)."""
    node: str = ""
    """The node a failure names."""


@record
class HeldRun:
    """A run replaced by a newer placement before its end was read: its GPU time is released when it is."""

    run: int
    cluster: str
    placement: tuple[ReplicaSlot, ...]
    placed_ms: int
    since: tuple[int, ...] = ()
    """When each replica of ``placement`` was held (empty: all from ``placed_ms``)."""


@record
class JobView:
    job_id: str
    status: str = "unknown"
    orphan: bool = True
    name: str = ""
    tenant: str = ""
    project: str = ""
    queue: str = ""
    kind: str = ""
    priority_class: str = ""
    replicas: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = 0
    """Per replica."""
    gpu_models: tuple[str, ...] = ()
    npus: int = 0
    """Whole NPUs per replica."""
    npu_models: tuple[str, ...] = ()
    """The NPU models it accepts (empty: any)."""
    preemptible: bool = True
    expected_runtime_s: int | None = None
    max_runtime_s: int | None = None
    """As submitted: what the budgets' projection expects a run to hold its GPUs for."""
    submitted_ms: int | None = None
    placed_ms: int | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    cluster: str | None = None
    placement: tuple[ReplicaSlot, ...] = ()
    """Every replica the current run holds: its placement's, then those added to it (``JobReplicasAdded``);
    ``replicas`` is what the job asks."""
    added_since: tuple[int, ...] = ()
    """When each replica added to the current run was added, in the order ``placement`` lists them (its
    last ones): a run's time is counted node by node, each replica from when it was held."""
    run: int = 0
    parts: tuple[RunPart, ...] = ()
    """A spread job's current (or last) run, cluster by cluster, in the order the parts opened (empty for a
    job that does not spread): ``placement`` holds the replicas of the parts that have not ended."""
    spread_clusters: int = 1
    """As submitted: above 1, its runs live in parts, one per cluster (``events.catalog.lifecycle``)."""
    runs: int = 0
    preemptions: int = 0
    retries: int = 0
    """Runs that failed and were retried (``JobRetryScheduled``): ``runs`` counts every attempt."""
    application_retries: int = 0
    """Retries the job asked for after its workload fails a run (``retry.on_application_failure``)."""
    waiting_ms: int = 0
    queued_since_ms: int | None = None
    last_reason: str = ""
    last_message: str = ""
    wait: Wait = NOT_WAITING
    """Where the job stands while it waits, as the scheduler's latest ``JobQueued`` said; ``NOT_WAITING``
    once it is placed or has ended (and after a preemption, until the scheduler says again)."""
    timeline: tuple[TimelineEntry, ...] = ()
    timeline_dropped: int = 0
    last_decision: str = ""
    """The scheduler's latest decision about the job (JobQueued, JobPlaced, JobPreemptionRequested or
    JobReclaimRequested) as its JSON body: what ``explain`` shows, with every number the scheduler gave."""
    last_decision_type: str = ""
    early: tuple[Fact, ...] = ()
    """Lifecycle facts of a run whose placement comes later in job order (a connector's clock behind
    the scheduler's): they are applied when the placement is."""
    superseded: tuple[HeldRun, ...] = ()
    """Runs a newer placement replaced before their end (in job order): held until their end is folded."""
    facts: tuple[Fact, ...] = ()
    """The facts folded (since ``base``), in job order."""
    emitted: int = 0
    """How many of ``facts`` have had their deltas emitted (the others wait for a cause)."""
    base: JobView | None = None
    """The view of the facts dropped from ``facts`` (the oldest, beyond ``FACTS_LIMIT``)."""
    applied: Applied = field(default_factory=Applied)
    seen: tuple[tuple[str, int], ...] = ()
    """The steps of the lifecycle folded (``_step``), sorted: a step taken once is not taken again."""
    last_wait: tuple[str, tuple[str, ...]] = ("", ())
    """The cycle of the latest ``JobQueued`` applied and the envelope ids applied of that cycle."""

    @property
    def spread(self) -> bool:
        return self.spread_clusters > 1

    @property
    def allocated(self) -> bool:
        """Whether it holds a run: placed or running, with replicas (a spread run: until it is closed, even
        once every part has ended, as the scheduler holds it)."""
        held = self.status in ("placed", "running") and self.cluster is not None
        return held and (self.spread or bool(self.placement))

    @property
    def clusters(self) -> tuple[str, ...]:
        """The clusters its current run holds replicas in, in the order they were opened."""
        if self.spread:
            return tuple(part.cluster for part in self.parts if not part.ended) if self.allocated else ()
        return (self.cluster,) if self.cluster is not None and self.allocated else ()


_DECISIONS = (
    JobQueued,
    JobPlaced,
    JobReplicasAdded,
    JobPreemptionRequested,
    JobReclaimRequested,
    JobRetryScheduled,
    JobRetriesExhausted,
    JobRunClosed,
)
_HANDLED = (
    JobSubmitted,
    JobQueued,
    JobPlaced,
    JobReplicasAdded,
    JobStarted,
    JobSucceeded,
    JobFailed,
    JobPreempted,
    JobReclaimed,
    JobCancelled,
    JobPreemptionRequested,
    JobReclaimRequested,
    JobCancelRequested,
    JobRejected,
    JobRetryScheduled,
    JobRetriesExhausted,
    JobRunClosed,
)
_NAMES: dict[type, str] = {cls: cls.event_type.rsplit(".", 1)[-1] for cls in _HANDLED}
_by_order = attrgetter("order")


class JobStage(Silent[JobView]):
    name = STAGE
    event_types = _HANDLED

    def keys(self, envelope: Envelope) -> Sequence[str]:
        data = envelope.data
        job_id = getattr(data, "job_id", None)
        if isinstance(job_id, str) and isinstance(data, _HANDLED):
            return (job_id,)
        return ()

    def reduce(self, entity: JobView | None, item: Input) -> tuple[JobView | None, list[Emitted]]:
        event = item.item
        assert isinstance(event, Event)
        view = entity or JobView(job_id=item.key)
        wait = mark_after(view.last_wait, event.cycle_id, item.envelope_id) if isinstance(event, JobQueued) else None
        if view.applied.seen(item) or _repeated(view, event, wait):
            return entity, []
        kind = _NAMES[type(event)]
        fact = _fact(event, kind, _order(view, item, _RANK[kind]), item.time_ms)
        carried: dict[str, Any] = {"applied": view.applied.after(item)}
        if isinstance(event, _DECISIONS):
            carried["last_decision"] = event.model_dump_json()
            carried["last_decision_type"] = kind
        if wait is not None:
            carried["last_wait"] = wait
        facts = view.facts
        last = not facts or fact.order >= facts[-1].order
        if last and view.emitted == len(facts) and not _waits(view, fact, facts):
            # The usual case: last in job order, and nothing waits. Fold it onto the view.
            facts = (*facts, fact)
            view, emitted = _apply(view, fact, fact.time_ms, facts=facts, emitted=len(facts), **carried)
        else:
            view, emitted = _refold(view, fact, carried)
        if len(view.facts) > FACTS_LIMIT:
            oldest = view.facts[0]
            base, _ = _apply(view.base or JobView(job_id=view.job_id), oldest, oldest.time_ms)
            view = evolve(view, facts=view.facts[1:], emitted=max(0, view.emitted - 1), base=base)
        return view, emitted


_VERDICTS = frozenset({"JobRetryScheduled", "JobRetriesExhausted"})
_ONCE_PER_RUN = frozenset({"JobStarted", "JobPreemptionRequested", "JobReclaimRequested", *_VERDICTS, _CLOSE})
_ONCE_PER_JOB = frozenset({"JobSubmitted", "JobRejected", "JobCancelRequested"})


def _step(kind: str, run: int, part: str = "") -> tuple[str, int] | None:
    """The step of the lifecycle a fact takes, as ``seen`` keeps it (None: placements and waits, which
    are told apart by their run and cycle instead). ``part``: the cluster of a spread run's part the fact
    is about (its start, its end, a request to stop it: once per part), or for an addition to a spread
    run, its first replica's number (once per replica number: a part may grow, and parts end)."""
    if part and kind in _PART_FACTS:
        return ("end@" + part if kind in _RUN_ENDS else f"{kind}@{part}", run)
    if part and kind == "JobReplicasAdded":
        return (f"{kind}#{part}", run)
    if kind in _RUN_ENDS:
        return ("end", run)
    if kind in _ONCE_PER_RUN:
        return (kind, run)
    if kind in _ONCE_PER_JOB:
        return (kind, 0)
    return None


def _repeated(view: JobView, event: Event, wait: tuple[str, tuple[str, ...]] | None) -> bool:
    """Whether ``event`` is a step the job has taken already (see the module's docstring); ``wait`` is a
    ``JobQueued``'s mark once applied (None: it comes from an earlier cycle, or was applied already)."""
    if isinstance(event, JobPlaced):
        return event.run <= view.run
    if isinstance(event, JobReplicasAdded):
        if view.spread:  # parts end on their own: the replica numbers it adds tell it apart
            return (
                event.run != view.run
                or _step("JobReplicasAdded", event.run, str(event.replicas[0].replica)) in view.seen
            )
        # Decisions come in turn on one partition: an addition continues the run's replicas exactly, or
        # was folded already (or its run ended first in the order read: its replicas ended with it).
        return event.run != view.run or not view.allocated or event.replicas[0].replica != len(view.placement)
    if isinstance(event, JobQueued):
        return wait is None
    kind = _NAMES[type(event)]
    run: int = getattr(event, "run", 0)
    # A step is named with its part when it was folded while the job spreads or its submission was not
    # read yet: either name says it was taken (a fact folded while orphan is not folded again if the
    # submission comes last in job order).
    part = cluster if (cluster := getattr(event, "cluster", None) or "") and kind in _PART_FACTS and run != 0 else ""
    steps = (_step(kind, run), _step(kind, run, part)) if part else (_step(kind, run),)
    return any(step is not None and step in view.seen for step in steps)


def _part_of(view: JobView, kind: str, run: int, cluster: str) -> str:
    """The part a fact about ``cluster`` is about, as its step names it: its cluster, for a report or request
    about a run (not a cancellation of a job that never ran) of a spread job, or of a job whose submission
    is not read yet (it may spread: its facts are folded again, and ``seen`` with them, once it is); ""
    otherwise."""
    return cluster if (view.spread or view.orphan) and kind in _PART_FACTS and run != 0 else ""


def _taken(seen: tuple[tuple[str, int], ...], *steps: tuple[str, int] | None) -> tuple[tuple[str, int], ...]:
    new = [step for step in steps if step is not None and step not in seen]
    return tuple(sorted((*seen, *new))) if new else seen


def _order(view: JobView, item: Input, rank: int) -> Order:
    """The fact's place in job order, no earlier than the previous fact read from its partition."""
    time_ms = item.time_ms
    topic, partition, offset = item.position if item.position is not None else ("", 0, 0)
    for fact in reversed(view.facts):
        before = fact.order
        if before[3] == partition and before[2] == topic:
            if (before[0], before[1]) > (time_ms, rank):
                time_ms, rank = before[0], before[1]
            break
    return (time_ms, rank, topic, partition, offset)


def _fact(event: Event, kind: str, order: Order, now: int) -> Fact:
    if isinstance(event, JobSubmitted):
        r = event.resources
        submission = Submission(
            event.name,
            event.tenant,
            event.project,
            event.queue,
            event.kind.value,
            event.priority_class.value,
            event.replicas,
            r.cpu_milli,
            r.memory_mib,
            r.total_gpu_milli(),
            tuple(r.gpu_models),
            event.preemptible,
            event.expected_runtime_s,
            event.max_runtime_s,
            event.retry.on_application_failure,
            r.npus,
            tuple(r.npu_models),
            event.inference.spread_clusters if event.inference is not None else 1,
        )
        return Fact(order, now, kind, 0, "Submitted", "", submission)
    if isinstance(event, JobQueued):
        reason = event.pending_reason.value if event.pending_reason is not None else None
        wait = Wait(reason, event.federation_position, event.tenant_queue_position, event.estimated_start_ms)
        return Fact(order, now, kind, 0, ",".join(r.value for r in event.reasons), event.message[:512], wait)
    if isinstance(event, JobReplicasAdded | JobPlaced):
        slots = tuple(
            ReplicaSlot(r.node, tuple(r.gpu_indices), r.gpu_milli_each, tuple(r.npu_indices), event.cluster, r.replica)
            for r in event.replicas
        )
        placement = Placement(event.cluster, slots, event.replicas[0].replica)
        reason = "ReplicasAdded" if isinstance(event, JobReplicasAdded) else event.reason.value
        return Fact(order, now, kind, event.run, reason, event.explanation[:512], placement, cluster=event.cluster)
    if isinstance(event, JobRunClosed):
        parts = tuple((p.cluster, p.outcome.value, p.reason.value if p.reason else "") for p in event.parts)
        reason = event.reason.value if event.reason is not None else event.outcome.value.capitalize()
        closure = Closure(event.outcome.value, parts)
        return Fact(order, now, kind, event.run, reason, event.message[:512], closure, cluster=event.cluster)
    if isinstance(event, JobCancelRequested):
        return Fact(order, now, kind, 0, "CancelRequested", event.reason[:512])
    if isinstance(event, JobRejected):
        return Fact(order, now, kind, 0, event.reason.value, event.message[:512], tenant=event.tenant)
    cluster: str = getattr(event, "cluster", None) or ""
    if isinstance(event, JobFailed):
        message = event.message[:512]
        return Fact(order, now, kind, event.run, event.reason.value, message, cluster=cluster, node=event.node or "")
    if isinstance(event, JobPreemptionRequested | JobReclaimRequested | JobRetryScheduled | JobRetriesExhausted):
        return Fact(order, now, kind, event.run, event.reason.value, event.message[:512], cluster=cluster)
    run: int = getattr(event, "run", 0)
    message = str(getattr(event, "message", ""))
    reason = _RUN_ENDS[kind][1] if kind in _RUN_ENDS else ""
    return Fact(order, now, kind, run, reason, message[:512], cluster=cluster)


def _refold(view: JobView, fact: Fact, carried: dict[str, Any]) -> tuple[JobView, list[Emitted]]:
    """Fold the facts again with ``fact`` in its place, and emit the deltas of the facts that no longer
    wait. If ``fact`` comes before facts whose deltas are out already, emit instead what takes the other
    stages from what those deltas left to what the facts now say (``_net``)."""
    at = bisect_right(view.facts, fact.order, key=_by_order)
    facts = (*view.facts[:at], fact, *view.facts[at:])
    late = at < view.emitted
    begin = 0 if late else view.emitted
    current = view.base or JobView(job_id=view.job_id)
    emitted: list[Emitted] = []
    done = len(facts)
    cut = 0  # with ``late``: where the deltas of the facts that waited begin
    for index, each in enumerate(facts):
        if index >= begin and done == len(facts) and _waits(current, each, facts):
            done = index
        current, more = _apply(current, each, each.time_ms)
        if begin <= index < done:
            emitted += [out._replace(time_ms=each.time_ms) if isinstance(out, Routed) else out for out in more]
        if index == view.emitted:  # the facts whose deltas were out, and ``fact``
            cut = len(emitted)
    if late:
        before: list[Emitted] = []
        old = view.base or JobView(job_id=view.job_id)
        for each in view.facts[: view.emitted]:
            old, more = _apply(old, each, each.time_ms)
            before += more
        emitted = _net(before, emitted[:cut]) + emitted[cut:]
    carried.setdefault("last_decision", view.last_decision)
    carried.setdefault("last_decision_type", view.last_decision_type)
    carried.setdefault("last_wait", view.last_wait)
    return evolve(current, facts=facts, emitted=done, base=view.base, **carried), emitted


def _net(before: list[Emitted], after: list[Emitted]) -> list[Emitted]:
    """The deltas that take the other stages from what the deltas ``before`` left them with to what
    the deltas ``after`` would (both a job's deltas from the same point on): the GPU time of the runs
    ``after`` releases and ``before`` did not, the job's allocation on each node and its queue hold as
    ``after`` leaves them, its pending demand, its shape. A run released in ``before`` stays released."""
    was, now = _Effect(before), _Effect(after)
    out: list[Emitted] = [
        delta for part, deltas in sorted(now.released.items()) if part not in was.released for delta in deltas
    ]
    for key in sorted(set(was.nodes) | set(now.nodes)):
        old, new = was.nodes.get(key), now.nodes.get(key)
        if old == new:
            continue
        if new is not None and new.held:
            out.append(Routed("nodes", key, new))
        elif old is not None and old.held:
            out.append(Routed("nodes", key, NodeAllocation(old.job_id, old.run, False)))
    for then, latest in ((was.queue, now.queue), (was.demand, now.demand)):
        if latest is not None and (then is None or then.delta != latest.delta):
            out.append(latest)
    if was.demand is not None and now.demand is None and isinstance(was.demand.delta, PendingDemand):
        out.append(Routed("fleet", "fleet", evolve(was.demand.delta, pending=False)))
    if not was.shapes:
        out += now.shapes
    return out


class _Effect:
    """What a job's deltas leave the other stages with (see ``_net``)."""

    def __init__(self, emitted: list[Emitted]) -> None:
        self.nodes: dict[str, NodeAllocation] = {}
        self.released: dict[tuple[int, str], list[Emitted]] = {}
        """By run and cluster: a spread run is released part by part."""
        self.queue: Routed | None = None
        self.demand: Routed | None = None
        self.shapes: list[Emitted] = []
        for out in emitted:
            if not isinstance(out, Routed):
                continue
            delta = out.delta
            if isinstance(delta, NodeAllocation):
                self.nodes[out.key] = delta
            elif isinstance(delta, QueueAllocation):
                if delta.held:
                    self.queue = out
                else:
                    self.released.setdefault((delta.run, delta.cluster), []).append(out)
                    if self.queue is not None and isinstance(self.queue.delta, QueueAllocation):
                        self.queue = None if self.queue.delta.run == delta.run else self.queue
            elif isinstance(delta, UsageInterval):
                self.released.setdefault((delta.run, delta.cluster), []).append(out)
            elif isinstance(delta, PendingDemand):
                self.demand = out
            elif isinstance(delta, ShapeSeen):
                self.shapes.append(out)


def _waits(view: JobView, fact: Fact, facts: Sequence[Fact]) -> bool:
    """Whether the deltas of ``fact``, folded onto ``view``, wait for a cause not read yet (not in
    ``facts``): the job's submission; the end of the run it holds, before a new placement or a new
    wait; the placement of the run a report is about. A cause read already waits for nothing, even
    one later in job order (clocks apart): the fold then does what job order says. A spread run: a report
    about a part waits for the addition that opens it, and the close for its open parts' ends."""
    kind = fact.event
    if view.orphan:
        return kind != "JobSubmitted" and not any(f.event == "JobSubmitted" for f in facts)
    if kind == "JobPlaced" or kind == "JobQueued":
        if not view.allocated or (kind == "JobPlaced" and fact.run == view.run):
            return False
        run = view.run  # ended by its own end (a spread run: by its close), or a cancellation that names no run
        ends = {_CLOSE} if view.spread else _RUN_ENDS
        return not any((f.event in ends and f.run == run) or (f.run == 0 and f.event == "JobCancelled") for f in facts)
    if kind in _RUN_FACTS and fact.run > view.run:
        return not any(f.event == "JobPlaced" and f.run == fact.run for f in facts)
    if view.spread and kind in _REPORTS and fact.run != 0 and _awaits_part(view, fact):
        return not any(_opens(f, fact.run, fact.cluster) for f in facts)
    if kind == _CLOSE and view.spread and fact.run == view.run and view.allocated:
        # The close follows every part's end: its parts' ends not read yet would release their replicas
        # at their own times, so the close waits for them (a part's end sorted after it ends nothing more).
        ended = {f.cluster for f in facts if f.event in _RUN_ENDS and f.run == fact.run}
        return any(not part.ended and part.cluster not in ended for part in view.parts)
    return False


def _opens(fact: Fact, run: int, cluster: str) -> bool:
    """Whether ``fact`` places or adds replicas of ``run`` in ``cluster``."""
    placement = fact.detail
    return fact.run == run and isinstance(placement, Placement) and placement.cluster == cluster


def _apply(view: JobView, fact: Fact, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    """Fold ``fact`` as if it happened at ``now``; ``extra`` are changes of the view to make in the same copy."""
    kind = fact.event
    # The step it takes (and, for a cancellation that names no run, the end of the run the job holds).
    held = ("end", view.run) if kind == "JobCancelled" and fact.run == 0 and view.allocated else None
    part = _part_of(view, kind, fact.run, fact.cluster)
    if kind == "JobReplicasAdded" and view.spread and isinstance(fact.detail, Placement):
        part = str(fact.detail.first)
    seen = _taken(view.seen, _step(kind, fact.run, part), held)
    if seen is not view.seen:
        extra["seen"] = seen
    if kind == "JobSubmitted":
        return _submitted(view, fact, now, **extra)
    if kind == "JobQueued":
        if view.status in FINAL_STATUSES or view.allocated:
            return _log(view, now, view.status, fact, **extra), []
        demand = _demand(view, True)  # of fields the status does not change
        wait = fact.detail if isinstance(fact.detail, Wait) else NOT_WAITING
        changes = {"status": "queued", "queued_since_ms": _since(view, now), "wait": wait}
        return _log(view, now, "queued", fact, **changes, **extra), demand
    if kind == "JobPlaced":
        return _placed(view, fact, now, **extra)
    if kind == "JobReplicasAdded" and fact.run <= view.run:
        return _added(view, fact, now, **extra)
    if kind in _RUN_FACTS and fact.run > view.run:
        return evolve(view, early=(*view.early, fact), **extra), []
    of_part = view.spread and kind in _PART_FACTS and fact.run != 0  # a spread run's part, not the run
    if of_part and kind in _REPORTS and _awaits_part(view, fact):
        # A report about a part whose opening (a JobReplicasAdded) comes later in job order: applied then.
        return evolve(view, early=(*view.early, fact), **extra), []
    if kind == "JobStarted":
        if fact.run != view.run or view.status in FINAL_STATUSES:
            stale = f"run {fact.run} is not the current run"
            return _log(view, now, view.status, fact, "StaleRun", stale, **extra), []
        changes = {"status": "running", "started_ms": view.started_ms or now}
        said = f"{fact.cluster}'s part started" if of_part else None
        return _log(view, now, "running", fact, None, fact.message or said, **changes, **extra), []
    if kind in _RUN_ENDS:
        if of_part and fact.run == view.run:
            return _part_ended(view, fact, now, **extra)
        return _run_ended(view, fact, now, **extra)
    if kind == _CLOSE:
        return _closed(view, fact, now, **extra)
    if kind in _REQUESTS:
        return _log(view, now, view.status, fact, **extra), []
    if kind in _VERDICTS:
        return _verdict(view, fact, now, **extra)
    if kind == "JobRejected":
        changes = {"status": "rejected", "tenant": view.tenant or fact.tenant, "ended_ms": now, "wait": NOT_WAITING}
        return _log(view, now, "rejected", fact, **changes, **extra), []
    return (evolve(view, **extra) if extra else view), []


def _submitted(view: JobView, fact: Fact, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    s = fact.detail
    assert isinstance(s, Submission)
    was_orphan = view.orphan
    first = view.status == "unknown"  # no decision came before it: it waits from now
    status = "submitted" if first else view.status
    view = _log(
        view,
        now,
        status,
        fact,
        orphan=False,
        name=s.name,
        tenant=s.tenant,
        project=s.project,
        queue=s.queue,
        kind=s.kind,
        priority_class=s.priority_class,
        replicas=s.replicas,
        cpu_milli=s.cpu_milli,
        memory_mib=s.memory_mib,
        gpu_milli=s.gpu_milli,
        gpu_models=s.gpu_models,
        npus=s.npus,
        npu_models=s.npu_models,
        preemptible=s.preemptible,
        expected_runtime_s=s.expected_runtime_s,
        max_runtime_s=s.max_runtime_s,
        application_retries=s.application_retries,
        spread_clusters=s.spread_clusters,
        submitted_ms=now,
        status=status,
        queued_since_ms=now if first else view.queued_since_ms,
        **extra,
    )
    if not was_orphan:
        return view, []
    seen = ShapeSeen(view.job_id, s.cpu_milli, s.memory_mib, s.gpu_milli, s.gpu_models, s.replicas)
    emitted: list[Emitted] = [Routed("shapes", shape_key(seen), seen)]
    if view.allocated:  # placed earlier in job order (the scheduler's clock ahead of the intake's)
        emitted += _hold(view, view.placed_ms if view.placed_ms is not None else now)
    elif status in ("submitted", "queued"):
        emitted += _demand(view, True)
    return view, emitted


def _placed(view: JobView, fact: Fact, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    placement = fact.detail
    assert isinstance(placement, Placement)
    emitted: list[Emitted] = []
    superseded = view.superseded
    if view.allocated:
        # A newer placement while a run is still held: its end comes later in job order (or was lost).
        # Free its nodes now (the queue hold is replaced by the new one); its GPU time waits for its end.
        emitted += _release_nodes(view)
        if fact.run != view.run and view.cluster is not None and view.placed_ms is not None and view.placement:
            # A spread run's parts opened at their own times (a run in one cluster: as before, from its placement).
            since = tuple(at for at, _ in _held_since(view)) if view.spread else ()
            superseded = (*superseded, HeldRun(view.run, view.cluster, view.placement, view.placed_ms, since))
    waited = view.waiting_ms + (now - view.queued_since_ms if view.queued_since_ms is not None else 0)
    view = _log(
        view,
        now,
        "placed",
        fact,
        status="placed",
        cluster=placement.cluster,
        placement=placement.slots,
        added_since=(),
        parts=(RunPart(placement.cluster, len(placement.slots), now),) if view.spread else (),
        run=fact.run,
        runs=view.runs + 1,
        placed_ms=now,
        started_ms=None,  # this run's start, when its cluster reports it (as ``placed_ms`` is this run's)
        waiting_ms=max(0, waited),
        queued_since_ms=None,
        wait=NOT_WAITING,
        superseded=superseded,
        **extra,
    )
    emitted += _demand(view, False)
    emitted += _hold(view, now)
    due = [early for early in view.early if early.run == fact.run]
    if view.early:
        view = evolve(view, early=tuple(early for early in view.early if early.run > fact.run))
    for early in due:
        view, more = _apply(view, early, max(early.time_ms, now))
        emitted += more
    return view, emitted


def _added(view: JobView, fact: Fact, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    """Replicas added to the run the job holds: its placement grows, its nodes and its queue hold say so.
    A spread run's addition may name another cluster: it opens the run's part there (or grows it)."""
    added = fact.detail
    assert isinstance(added, Placement)
    if fact.run != view.run or not view.allocated or (added.cluster != view.cluster and not view.spread):
        return _log(view, now, view.status, fact, **extra), []
    part = next((p for p in view.parts if p.cluster == added.cluster), None)
    if part is not None and part.ended:  # the scheduler never re-opens a part: say so, hold nothing
        ended = f"not added: {added.cluster}'s part of run {fact.run} has ended ({part.ended})"
        return _log(view, now, view.status, fact, "StaleRun", ended, **extra), []
    parts = view.parts
    if view.spread:
        grown = RunPart(added.cluster, len(added.slots), now) if part is None else None
        parts = (
            (*parts, grown)
            if grown is not None
            else tuple(evolve(p, replicas=p.replicas + len(added.slots)) if p is part else p for p in parts)
        )
    view = _log(
        view,
        now,
        view.status,
        fact,
        placement=(*view.placement, *added.slots),
        added_since=(*view.added_since, *(now,) * len(added.slots)),
        parts=parts,
        **extra,
    )
    # A spread run's part holds its queue from when it was opened; a run in one cluster, from its placement.
    since = now if view.spread else (view.placed_ms if view.placed_ms is not None else now)
    emitted = _hold(view, since, {(added.cluster, s.node) for s in added.slots})
    if view.spread and part is None:  # its cluster's reports read before it, in job order
        due = [e for e in view.early if e.run == fact.run and e.cluster == added.cluster]
        if due:
            view = evolve(view, early=tuple(e for e in view.early if e not in due))
        for early in due:
            view, more = _apply(view, early, max(early.time_ms, now))
            emitted += more
    return view, emitted


def _awaits_part(view: JobView, fact: Fact) -> bool:
    """Whether ``fact`` reports on a part of the spread run the job holds that has not opened yet (the
    addition that opens it comes later in job order: a connector's clock behind the scheduler's)."""
    return fact.run == view.run and view.allocated and all(p.cluster != fact.cluster for p in view.parts)


def _part_ended(view: JobView, fact: Fact, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    """A spread run's part ended in its cluster: its replicas stop holding (their nodes, their queue hold,
    their device time until now); the job's status stays, the service lives on in the other parts, and
    the run ends with the scheduler's ``JobRunClosed``."""
    part = next((p for p in view.parts if p.cluster == fact.cluster), None)
    if not view.allocated or part is None or part.ended:
        after = "the run was closed" if not view.allocated else "its end" if part is not None else "no opening"
        said = f"{fact.cluster}'s part of run {fact.run} ended after {after}: nothing more to release"
        return _log(view, now, view.status, fact, None, said, **extra), []
    how = _HOW[fact.event]
    held = _held_since(view)
    ending = [(at, s) for at, s in held if s.cluster == fact.cluster]
    assert view.placed_ms is not None
    emitted = _release_nodes(view, [s for _, s in ending])
    emitted += _release_accounting(view, view.run, fact.cluster, ending, view.placed_ms, now)
    reason = fact.reason if fact.event == "JobFailed" else ""
    parts = tuple(evolve(p, ended=how, reason=reason, ended_ms=now) if p is part else p for p in view.parts)
    base = len(view.placement) - len(view.added_since)
    others = [p.cluster for p in parts if not p.ended]
    detail = _part_detail(fact)
    if detail == how:  # a connector's plain "cancelled": said once
        detail = ""
    on = f"the service runs on in {' and '.join(others)}" if others else "no part holds replicas: the run closes"
    message = f"{fact.cluster}'s part {how}" + (f": {detail}" if detail else "") + f"; {on}"
    view = _log(
        view,
        now,
        view.status,
        fact,
        None,
        message[:512],
        placement=tuple(s for _, s in held if s.cluster != fact.cluster),
        added_since=tuple(at for at, s in held[base:] if s.cluster != fact.cluster),
        parts=parts,
        **extra,
    )
    return view, emitted


def _part_detail(fact: Fact) -> str:
    """What its cluster said of a part's end: its message, or the reason's words (a failed node named)."""
    if fact.message:
        return fact.message
    if fact.event != "JobFailed":
        return ""
    member = ReasonCode._value2member_map_.get(fact.reason)
    words = DESCRIPTIONS[member] if isinstance(member, ReasonCode) else fact.reason
    return f"{words} (node {fact.node})" if fact.node else words


def _closed(view: JobView, fact: Fact, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    """The scheduler closed the spread run: it ends as its last part did (``JobRunClosed.outcome``), as any
    run's end would (a failure may await the retry verdict)."""
    closure = fact.detail
    assert isinstance(closure, Closure)
    if fact.run != view.run and view.run != 0:
        return _stale_end(view, fact, now, **extra)
    if not view.allocated:
        return _log(view, now, view.status, fact, **extra), []
    # A part whose end was not read (lost, or later in job order) ended as the close says it did.
    ends = {cluster: (how, reason) for cluster, how, reason in closure.parts}
    parts = []
    for p in view.parts:
        how, reason = ends.get(p.cluster, (closure.outcome, ""))
        parts.append(p if p.ended else evolve(p, ended=how, reason=reason, ended_ms=now))
    early = tuple(e for e in view.early if e.run > fact.run)  # reports of a part that never opened
    status = _STATUS_AFTER_OUTCOME[closure.outcome]
    return _end_run(view, fact, now, status, parts=tuple(parts), early=early, **extra)


def _run_ended(view: JobView, fact: Fact, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    run = fact.run
    if fact.event == "JobCancelled" and run == 0:
        run = view.run
    if run != view.run and view.run != 0:
        return _stale_end(view, fact, now, **extra)
    status, _ = _RUN_ENDS[fact.event]
    if view.parts:  # a spread job cancelled before any part said so: every part that held ended with it
        extra["parts"] = tuple(p if p.ended else evolve(p, ended="cancelled", ended_ms=now) for p in view.parts)
    return _end_run(view, fact, now, status, **extra)


def _stale_end(view: JobView, fact: Fact, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    """The end of a run that is not the current one: of a run a newer placement replaced, its GPU time
    until now (a spread run's part end: of that part's replicas; its close: of the rest)."""
    stale = f"run {fact.run} is not the current run {view.run}"
    held = next((h for h in view.superseded if h.run == fact.run), None)
    if held is None:
        return _log(view, now, view.status, fact, "StaleRun", stale, **extra), []
    part = view.spread and fact.event != _CLOSE
    since = held.since or (held.placed_ms,) * len(held.placement)
    pairs = list(zip(since, held.placement, strict=True))
    ending = [(at, s) for at, s in pairs if not part or s.cluster == fact.cluster]
    kept = [(at, s) for at, s in pairs if part and s.cluster != fact.cluster]
    rest = tuple(h for h in view.superseded if h.run != fact.run)
    if kept:
        left = evolve(held, placement=tuple(s for _, s in kept), since=tuple(at for at, _ in kept))
        rest = tuple(sorted((*rest, left), key=attrgetter("run")))
    logged = _log(view, now, view.status, fact, "StaleRun", stale, superseded=rest, **extra)
    return logged, _release_accounting(view, held.run, held.cluster, ending, held.placed_ms, now)


def _end_run(view: JobView, fact: Fact, now: int, status: str, **extra: Any) -> tuple[JobView, list[Emitted]]:
    """The run the job holds ended so (``status``: what its end leaves the job in, before a failure's
    verdict): what it holds goes, and it waits for the verdict, is queued again, or has ended."""
    run = view.run
    emitted = _release(view, now) if view.allocated else []
    awaits = False
    if status == "failed":
        awaits = _awaits_verdict(view, fact.reason) and ("JobRetriesExhausted", run) not in view.seen
        status = "queued" if awaits else status
    emitted += _demand(view, status == "queued")  # of fields the end of a run does not change
    changes: dict[str, int | str | None]
    if awaits:  # the scheduler's verdict ends the job or queues it again: until then it waits for it
        changes = {"queued_since_ms": now, "cluster": None}
    elif status == "queued":  # back in the queue: no cluster holds it until it is placed again
        changes = {"preemptions": view.preemptions + 1, "queued_since_ms": now, "cluster": None}
    else:
        changes = {"ended_ms": now, "queued_since_ms": None}
    logged = _log(
        view, now, status, fact, None, None, status=status, placement=(), wait=NOT_WAITING, **changes, **extra
    )
    return logged, emitted


def _awaits_verdict(view: JobView, reason: str) -> bool:
    """Whether a run that failed for ``reason`` awaits the scheduler's retry verdict
    (``events.catalog.lifecycle.awaits_verdict``, with what the job asked)."""
    kind = failure_kind(reason)
    return kind is FailureKind.INFRASTRUCTURE or (kind is FailureKind.APPLICATION and view.application_retries > 0)


def _verdict(view: JobView, fact: Fact, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    """The scheduler's verdict on a failed run: queued again (one more retry) or failed for good."""
    if view.status in FINAL_STATUSES or fact.run != view.run:
        return _log(view, now, view.status, fact, **extra), []
    if fact.event == "JobRetryScheduled":
        changes = {"status": "queued", "retries": view.retries + 1, "queued_since_ms": _since(view, now)}
        return _log(view, now, "queued", fact, **changes, **extra), []
    changes = {"status": "failed", "ended_ms": now, "queued_since_ms": None, "wait": NOT_WAITING}
    return _log(view, now, "failed", fact, **changes, **extra), _demand(view, False)


def _since(view: JobView, now: int) -> int:
    return now if view.queued_since_ms is None else view.queued_since_ms


def _log(
    view: JobView,
    now: int,
    logged: str,
    fact: Fact,
    reason: str | None = None,
    message: str | None = None,
    /,
    **changes: Any,
) -> JobView:
    """Add a timeline entry (the job is ``logged`` there; the fact's reason and message unless others
    are given), with any ``changes`` of the view at once."""
    reason = fact.reason if reason is None else reason
    message = fact.message if message is None else message
    entry = TimelineEntry(now, logged, fact.event, reason, message)
    timeline = (*view.timeline, entry)
    dropped = view.timeline_dropped
    if len(timeline) > TIMELINE_LIMIT:
        # Keep the first entries (how it started) and the latest ones (where it is now).
        timeline = timeline[:20] + timeline[-(TIMELINE_LIMIT - 20) :]
        dropped += 1
    return evolve(
        view,
        timeline=timeline,
        timeline_dropped=dropped,
        last_reason=reason or view.last_reason,
        last_message=message or view.last_message,
        **changes,
    )


def shape_key(seen: ShapeSeen) -> str:
    return shape_of(seen)[0]


def queue_key(tenant: str, queue: str) -> str:
    return f"{tenant or 'unknown'}/{queue or 'default'}"


def _demand(view: JobView, pending: bool) -> list[Emitted]:
    if view.orphan or view.gpu_milli == 0:
        return []
    demand = PendingDemand(view.job_id, pending, view.gpu_milli * view.replicas, view.gpu_models)
    return [Routed("fleet", "fleet", demand)]


def _hold(view: JobView, now: int, only: set[tuple[str, str]] | None = None) -> list[Emitted]:
    """The job's allocation on each node of its placement (``only``: on these (cluster, node), after an
    addition) and its queue hold (what it holds: a run that grows holds more)."""
    if view.orphan:  # nothing is held before the submission says who holds it, and how much
        return []
    assert view.cluster is not None
    # One allocation per node and job: replicas that share a node add up there (a node keeps one entry
    # per job, so an entry per replica counted only the last one).
    per_node: dict[tuple[str, str], list[ReplicaSlot]] = {}
    for slot in view.placement:
        per_node.setdefault((slot.cluster or view.cluster, slot.node), []).append(slot)
    emitted: list[Emitted] = []
    for (cluster, node), slots in per_node.items():
        if only is not None and (cluster, node) not in only:
            continue
        gpu = tuple((index, slot.gpu_milli_each) for slot in slots for index in slot.gpu_indices)
        npus = tuple(index for slot in slots for index in slot.npu_indices)
        n = len(slots)
        delta = NodeAllocation(
            view.job_id, view.run, True, view.tenant, view.cpu_milli * n, view.memory_mib * n, gpu, npus
        )
        emitted.append(Routed("nodes", f"{cluster}/{node}", delta))
        # The queue holds the run node by node, each part of the model of its own node.
        hold = _queue_delta(view, view.run, True, now, now, cluster, slots)
        emitted.append(Routed("nodes", f"{cluster}/{node}", hold))
    return emitted


def _release_nodes(view: JobView, slots: Sequence[ReplicaSlot] | None = None) -> list[Emitted]:
    """The run gives back its nodes (``slots``: those of these replicas only, a spread run's part)."""
    if view.orphan:
        return []
    held = view.placement if slots is None else slots
    return [
        Routed("nodes", key, NodeAllocation(view.job_id, view.run, False))
        for key in dict.fromkeys(f"{slot.cluster or view.cluster}/{slot.node}" for slot in held)
    ]


def _release(view: JobView, now: int) -> list[Emitted]:
    assert view.cluster is not None and view.placed_ms is not None
    accounting = _release_accounting(view, view.run, view.cluster, _held_since(view), view.placed_ms, now)
    return _release_nodes(view) + accounting


def _held_since(view: JobView) -> list[tuple[int, ReplicaSlot]]:
    """Each replica the current run holds, with when it was held: its placement's from ``placed_ms``, an
    added one from when it was added (``added_since`` lists the last ones of ``placement``)."""
    placed = view.placed_ms if view.placed_ms is not None else 0
    since = (placed,) * (len(view.placement) - len(view.added_since)) + view.added_since
    return list(zip(since, view.placement, strict=True))


def _release_accounting(
    view: JobView, run: int, cluster: str, held: Sequence[tuple[int, ReplicaSlot]], placed_ms: int, now: int
) -> list[Emitted]:
    """The run gives its queue hold back and reports the GPU and NPU time it held (``held``: its replicas,
    each with when it was held; the run's in ``cluster`` unless a replica names its own), from
    ``placed_ms`` (an added replica: from when it was added) to ``now``: one interval per node and device
    kind, so each node's model prices its own replicas' time and NPU time is never counted as GPU time. A
    spread run's part holds its queue from when the part opened."""
    if view.orphan:
        return []
    emitted: list[Emitted] = []
    per_node: dict[tuple[str, str], list[tuple[int, ReplicaSlot]]] = {}
    for at, slot in held:
        per_node.setdefault((slot.cluster or cluster, slot.node), []).append((at, slot))
    for (where, node), on_node in per_node.items():
        since = min(at for at, _ in on_node) if view.spread else placed_ms
        release = _queue_delta(view, run, False, since, now, where, [slot for _, slot in on_node])
        emitted.append(Routed("nodes", f"{where}/{node}", release))
        for kind, each in (("gpu", _gpu_milli), ("npu", _npu_milli)):
            base = sum(each(slot) for at, slot in on_node if at <= placed_ms)
            grown = tuple((at, each(slot)) for at, slot in on_node if at > placed_ms and each(slot))
            if base or grown:
                interval = UsageInterval(
                    view.job_id,
                    run,
                    view.tenant,
                    view.project,
                    where,
                    "",
                    base,
                    placed_ms,
                    now,
                    kind,
                    grown,
                    node,  # a part: named by its node, counted in its cluster's buckets
                )
                emitted.append(Routed("nodes", f"{where}/{node}", interval))
    return emitted


def _gpu_milli(slot: ReplicaSlot) -> int:
    return len(slot.gpu_indices) * slot.gpu_milli_each


def _npu_milli(slot: ReplicaSlot) -> int:
    return 1000 * len(slot.npu_indices)


def _npus(placement: tuple[ReplicaSlot, ...]) -> int:
    return sum(len(slot.npu_indices) for slot in placement)


def _queue_delta(
    view: JobView, run: int, held: bool, since: int, now: int, cluster: str, slots: Sequence[ReplicaSlot]
) -> QueueAllocation:
    """What a run holds of its queue on one node (``slots``: its replicas there): one part of the run, of
    the model of that node (a run that grows holds more there, or holds on more nodes)."""
    replicas = len(slots)
    return QueueAllocation(
        view.job_id,
        run,
        held,
        queue_key(view.tenant, view.queue),
        cluster,
        view.cpu_milli * replicas,
        view.memory_mib * replicas,
        sum(_gpu_milli(slot) for slot in slots),
        None,
        since,
        now,
        _npus(tuple(slots)),
        part=slots[0].node,  # the quota stage keys the hold by cluster and node
    )
