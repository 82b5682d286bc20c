"""The job view: each job's status, timeline with reasons, placement, waiting time, runs, preemptions.

Called by the projection hosts; its entities are keyed by job id. Pure. Besides the view, this stage
derives the deltas the other stages need: a placement becomes allocations on its nodes and on its
tenant's queue; the end of a run releases them and reports the GPU time used; a queued job is
pending demand for its GPU models.

An event for a job never submitted (an orphan: its JobSubmitted was lost or is still in flight on
another partition) creates a view marked ``orphan`` rather than failing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import Any

from events.catalog.base import Event
from events.catalog.decisions import JobPlaced, JobPreemptionRequested, JobQueued, JobReclaimRequested
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
from events.envelope import Envelope
from projections.core import Applied, Emitted, Input, Routed, Silent, evolve, record
from projections.deltas import NodeAllocation, PendingDemand, QueueAllocation, ShapeSeen, UsageInterval
from projections.shapes import shape_of

STAGE = "jobs"
TIMELINE_LIMIT = 200

_TERMINAL = frozenset({"succeeded", "failed", "cancelled", "rejected"})
_ENDS_RUN = (JobSucceeded, JobFailed, JobPreempted, JobReclaimed, JobCancelled)
_RUN_FACTS = (JobStarted, *_ENDS_RUN)
_RUN_ENDS: dict[type, tuple[str, str]] = {
    JobSucceeded: ("succeeded", "Succeeded"),
    JobFailed: ("failed", "Failed"),
    JobPreempted: ("queued", "Preempted"),
    JobReclaimed: ("queued", "Reclaimed"),
    JobCancelled: ("cancelled", "Cancelled"),
}


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
    preemptible: bool = True
    submitted_ms: int | None = None
    placed_ms: int | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    cluster: str | None = None
    placement: tuple[ReplicaSlot, ...] = ()
    run: int = 0
    runs: int = 0
    preemptions: int = 0
    waiting_ms: int = 0
    queued_since_ms: int | None = None
    last_reason: str = ""
    last_message: str = ""
    timeline: tuple[TimelineEntry, ...] = ()
    timeline_dropped: int = 0
    last_decision: str = ""
    """The scheduler's latest decision about the job (JobQueued, JobPlaced, JobPreemptionRequested or
    JobReclaimRequested) as its JSON body: what ``explain`` shows, with every number the scheduler gave."""
    last_decision_type: str = ""
    early: tuple[tuple[int, int, Event], ...] = ()
    """Lifecycle facts of a run whose placement has not been seen yet (time, run, event): the
    connector's report and the scheduler's decision travel on different topics and may be read in
    either order; they are applied when the placement arrives."""
    applied: Applied = field(default_factory=Applied)

    @property
    def allocated(self) -> bool:
        return self.cluster is not None and bool(self.placement) and self.status in ("placed", "running")


_DECISIONS = (JobQueued, JobPlaced, JobPreemptionRequested, JobReclaimRequested)
_HANDLED = (
    JobSubmitted,
    JobQueued,
    JobPlaced,
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
)


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
        if view.applied.seen(item):
            return entity, []
        extra: dict[str, Any] = {"applied": view.applied.after(item)}
        if isinstance(event, _DECISIONS):
            extra["last_decision"] = event.model_dump_json()
            extra["last_decision_type"] = event.event_type.rsplit(".", 1)[-1]
        return _apply(view, event, item.time_ms, **extra)


def _apply(view: JobView, event: Event, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    """Fold ``event``; ``extra`` are changes of the view to make in the same copy."""
    if isinstance(event, JobSubmitted):
        return _submitted(view, event, now, **extra)
    if isinstance(event, JobQueued):
        reasons = ",".join(r.value for r in event.reasons)
        if view.status in _TERMINAL or view.allocated:
            return _log(view, now, view.status, event, reasons, event.message, **extra), []
        demand = _demand(view, True)  # of fields the status does not change
        changes = {"status": "queued", "queued_since_ms": _since(view, now)}
        return _log(view, now, "queued", event, reasons, event.message, **changes, **extra), demand
    if isinstance(event, JobPlaced):
        return _placed(view, event, now, **extra)
    if isinstance(event, _RUN_FACTS) and getattr(event, "run", 0) > view.run:
        return evolve(view, early=(*view.early, (now, getattr(event, "run", 0), event)), **extra), []
    if isinstance(event, JobStarted):
        if event.run != view.run or view.status in _TERMINAL:
            stale = f"run {event.run} is not the current run"
            return _log(view, now, view.status, event, "StaleRun", stale, **extra), []
        started = view.started_ms or now
        changes = {"status": "running", "started_ms": started}
        return _log(view, now, "running", event, "", event.message, **changes, **extra), []
    if isinstance(event, _ENDS_RUN):
        return _run_ended(view, event, now, **extra)
    if isinstance(event, JobPreemptionRequested | JobReclaimRequested):
        return _log(view, now, view.status, event, event.reason.value, event.message, **extra), []
    if isinstance(event, JobCancelRequested):
        return _log(view, now, view.status, event, "CancelRequested", event.reason, **extra), []
    if isinstance(event, JobRejected):
        tenant = view.tenant or event.tenant
        reason = event.reason.value
        changes = {"status": "rejected", "tenant": tenant, "ended_ms": now}
        return _log(view, now, "rejected", event, reason, event.message, **changes, **extra), []
    return (evolve(view, **extra) if extra else view), []


def _submitted(view: JobView, event: JobSubmitted, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    r = event.resources
    emitted: list[Emitted] = []
    if view.orphan:
        shape = ShapeSeen(
            view.job_id, r.cpu_milli, r.memory_mib, r.total_gpu_milli(), tuple(r.gpu_models), event.replicas
        )
        emitted.append(Routed("shapes", shape_key(shape), shape))
    if view.orphan and view.allocated:
        # Its placement was read first and held quota of an unknown queue: give that back.
        emitted.append(_via_node(view, _queue_delta(view, False, view.placed_ms or now)))
    first = view.status == "unknown"  # neither placed nor read before: it waits from now
    status = "submitted" if first else view.status
    view = _log(
        view,
        now,
        status,
        event,
        "Submitted",
        "",
        orphan=False,
        name=event.name,
        tenant=event.tenant,
        project=event.project,
        queue=event.queue,
        kind=event.kind.value,
        priority_class=event.priority_class.value,
        replicas=event.replicas,
        cpu_milli=r.cpu_milli,
        memory_mib=r.memory_mib,
        gpu_milli=r.total_gpu_milli(),
        gpu_models=tuple(r.gpu_models),
        preemptible=event.preemptible,
        submitted_ms=now,
        status=status,
        queued_since_ms=now if first else view.queued_since_ms,
        **extra,
    )
    if view.allocated and len(emitted) > 1:
        emitted += _hold(view, view.placed_ms or now)
    if first:
        emitted += _demand(view, True)
    return view, emitted


def _placed(view: JobView, event: JobPlaced, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    emitted: list[Emitted] = []
    if view.allocated:  # a new placement replaces an older one still held (should not happen; stay exact)
        emitted += _release(view, now)
    waited = view.waiting_ms + (now - view.queued_since_ms if view.queued_since_ms is not None else 0)
    slots = tuple(ReplicaSlot(r.node, tuple(r.gpu_indices), r.gpu_milli_each) for r in event.replicas)
    view = _log(
        view,
        now,
        "placed",
        event,
        event.reason.value,
        event.explanation,
        status="placed",
        cluster=event.cluster,
        placement=slots,
        run=event.run,
        runs=view.runs + 1,
        placed_ms=now,
        waiting_ms=max(0, waited),
        queued_since_ms=None,
        **extra,
    )
    emitted += _demand(view, False)
    emitted += _hold(view, now)
    due = [fact for fact in view.early if fact[1] == event.run]
    if view.early:
        view = evolve(view, early=tuple(fact for fact in view.early if fact[1] > event.run))
    for when, _, fact in due:
        view, more = _apply(view, fact, max(when, now))
        emitted += more
    return view, emitted


def _run_ended(view: JobView, event: Event, now: int, **extra: Any) -> tuple[JobView, list[Emitted]]:
    run = getattr(event, "run", 0)
    if isinstance(event, JobCancelled) and run == 0:
        run = view.run
    if run != view.run and view.run != 0:
        stale = f"run {run} is not the current run {view.run}"
        return _log(view, now, view.status, event, "StaleRun", stale, **extra), []
    emitted = _release(view, now) if view.allocated else []
    status, reason = _RUN_ENDS[type(event)]
    if isinstance(event, JobFailed):
        reason = event.reason.value
    message = getattr(event, "message", "")
    emitted += _demand(view, status == "queued")  # of fields the end of a run does not change
    changes: dict[str, int | None]
    if status == "queued":
        changes = {"preemptions": view.preemptions + 1, "queued_since_ms": now}
    else:
        changes = {"ended_ms": now, "queued_since_ms": None}
    return _log(view, now, status, event, reason, message, status=status, placement=(), **changes, **extra), emitted


def _since(view: JobView, now: int) -> int:
    return now if view.queued_since_ms is None else view.queued_since_ms


def _log(view: JobView, now: int, logged: str, event: Event, reason: str, message: str, **changes: Any) -> JobView:
    """Add a timeline entry (the job is ``logged`` there), with any ``changes`` of the view at once."""
    entry = TimelineEntry(now, logged, event.event_type.rsplit(".", 1)[-1], reason, message[:512])
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


def _hold(view: JobView, now: int) -> list[Emitted]:
    assert view.cluster is not None
    emitted: list[Emitted] = []
    for slot in view.placement:
        gpu = tuple((index, slot.gpu_milli_each) for index in slot.gpu_indices)
        delta = NodeAllocation(view.job_id, view.run, True, view.tenant, view.cpu_milli, view.memory_mib, gpu)
        emitted.append(Routed("nodes", f"{view.cluster}/{slot.node}", delta))
    emitted.append(_via_node(view, _queue_delta(view, True, now)))
    return emitted


def _release(view: JobView, now: int) -> list[Emitted]:
    assert view.cluster is not None
    emitted: list[Emitted] = [
        Routed("nodes", f"{view.cluster}/{slot.node}", NodeAllocation(view.job_id, view.run, False))
        for slot in view.placement
    ]
    emitted.append(_via_node(view, _queue_delta(view, False, now)))
    total = sum(len(slot.gpu_indices) * slot.gpu_milli_each for slot in view.placement)
    if total and view.placed_ms is not None:
        interval = UsageInterval(
            view.job_id, view.run, view.tenant, view.project, view.cluster, "", total, view.placed_ms, now
        )
        emitted.append(_via_node(view, interval))
    return emitted


def _via_node(view: JobView, delta: QueueAllocation | UsageInterval) -> Routed:
    """The GPU model lives with the node: the first replica's node fills it in and passes it on."""
    return Routed("nodes", f"{view.cluster}/{view.placement[0].node}", delta)


def _queue_delta(view: JobView, held: bool, now: int) -> QueueAllocation:
    assert view.cluster is not None
    return QueueAllocation(
        view.job_id,
        view.run,
        held,
        queue_key(view.tenant, view.queue),
        view.cluster,
        view.cpu_milli * view.replicas,
        view.memory_mib * view.replicas,
        view.gpu_milli * view.replicas,
        None,
        view.placed_ms if view.placed_ms is not None else now,
        now,
    )
