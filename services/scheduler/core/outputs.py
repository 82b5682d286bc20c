"""A cycle's decisions as events: what the scheduler publishes, with ids derived from the cycle.

Called by the scheduler host (to publish) and by ``fedsched audit verify`` (to re-derive and compare).
Pure. Ids are ``<cycle id>:<kind>:<job id>`` and the envelope time is the cycle's logical time, so a
replay of a cycle produces byte-identical events.

What is not repeated: a job still waiting for the same reasons gets no new ``JobQueued`` (its last one
still explains it) unless its place in its own queue or in the federation's order, or its estimated
start, moved materially (``moved_materially``), and then not more than once every ``REQUEUE_EVERY_MS``,
so the log does not grow with every cycle; a run already asked to stop gets no second
``JobPreemptionRequested``. A ``JobQueued`` carries the category of its binding reason, by the
catalogue's one mapping (``events.catalog.pending_reasons``).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Sequence

from events.catalog.base import Event
from events.catalog.decisions import (
    BindingConstraint,
    ClusterWhyNot,
    FailureKind,
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReplicasAdded,
    JobRetriesExhausted,
    JobRetryScheduled,
    JobRunClosed,
    RunPartEnd,
    SchedulingCycleCompleted,
    SuggestedChange,
    TopicOffset,
)
from events.catalog.jobs import JobCancelled
from events.catalog.pending_reasons import pending_reason_of
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, CycleId, JobId, NodeId, ResourceKind
from events.wire.codec import encode
from events.wire.envelope import Envelope
from services.scheduler.core.policy import decisions as core
from services.scheduler.core.policy.model import ReplicaPlacement
from services.scheduler.core.state import SchedulerState, event_node
from services.scheduler.core.state.facts import JobFacts

SOURCE = "urn:fedsched:scheduler"
_SHORT = 256
_TEXT = 4096
_VICTIMS = 256


DECISION_ENGINE = "fedsched-decisions-9"
"""The name of this code's decisions, recorded with every cycle. Change it in the same commit as anything
that makes the same inputs give other decision events: a choice of the policy core, a reason, a message's
words or figures, how an event is built. ``tests/scheduler/test_decision_engine.py`` holds the digest of
a fixed scenario's decisions under this name and fails when they change under an unchanged name; ``audit
verify`` then tells the cycles recorded by other code (which may differ for that reason alone) apart.

History: ``-2`` takes a run's first reported end and first placement as final (``-1`` took the last
ones, so a second, conflicting report of a run's end changed the tenant's usage); a ``JobPlaced`` (v2)
names the jobs stopped to make room for it; between clusters, preemption stops the least important
jobs (``-1`` compared the GPUs taken away, then the cluster names); a job of several replicas each of
which fits on a node, though not all of them, is not given one replica's numbers as what binds.
``-3`` keeps a job off nodes whose NoSchedule or NoExecute taints it does not tolerate (``-2`` placed it
there and the cluster refused it), and says so when it waits (``TaintNotTolerated``); an inference
service that is not a gang starts with as many replicas as fit, down to its ``inference.min_replicas``,
when neither free room nor preemption gives it all (``-2`` ignored ``min_replicas``); a job held by its
quota (or a hot-model cap) is not said to lack room in clusters that have it, and is told the GPUs per
replica its quota would allow; a wait no cluster can take now binds on the cluster that holds most when
empty; a replica asking more CPU or memory than any suitable node has free is told the most there is;
a cluster its connector reports unreachable or draining is said to be so (``-2``: "every node is
cordoned"). ``-4`` takes a running job's start as its run's reported start, not its submission, and
publishes a wait again when its position or estimated start moved materially. ``-5`` applies the
policy's preemption rules per priority class of the victim (interruption budget, grace period, minimum
runtime; ``-4`` allowed every job 3 preemptions and gave every victim 30 s), its per-cycle and
per-tenant hourly limits, counts the jobs already stopping for a job as its room (``-4`` could ask more
victims while the first ones were stopping) and counts room only on the nodes the job may use; a wait
(``JobQueued`` v2) gives its place in its own tenant's queue beside its place in the federation's order,
and the category of its binding reason; a cluster with room for a job its quota or budget holds says
"room for its N replica(s) now (M would fit)". ``-6`` keeps every replica of a job that requires its
interconnect (``interconnect_required``) inside one NVLink domain or RDMA fabric, in placement,
preemption, reservations and explanations (``InterconnectUnavailable``, ``InterconnectDomainTooSmall``);
a preferred interconnect is counted on the domain of the kind the job asks for (``-5`` took a node's
NVLink domain, else its RDMA fabric, for either) and a node on none shares it with no node (``-5``: all
such nodes shared the empty one). It also reads each cluster's stability (its roll-up's
health: ``-5`` never set it, so the health term was always 0), its fit for training and inference, and
its congestion as its own (``-5``: the fleet's figure for its worst model) from the log; prices a cluster
by its rate for the GPU model the job would use there (``-5``: the average of its rates); and a
placement names the term that put it ahead of the runner-up ("sim-2 over sim-1: stability ...").
It schedules NPUs (``-5`` dropped them: an NPU job waited as asking nothing, or was placed where no NPU
was): NPU devices in ``JobPlaced.npu_indices``,
quota lines ``npu`` and ``npu:<MODEL>``, NPUs in fair share's dominant share, waits that name NPUs
(once: "would borrow 8 NPUs", not "8 NPUs npu");
work asking no NPU keeps off nodes with free NPUs unless nothing else fits; on a node whose GPUs differ,
a job naming models or a memory floor takes only the cards that meet them (``-5`` read the first card's).
It gives a verdict on each run the infrastructure
failed (or the workload, for a job that asked for retries): ``JobRetryScheduled`` within the retry budget
of the job's priority class (the policy's ``retry_classes``), after a backoff, else ``JobRetriesExhausted``
(``-5`` let such a failure end the job); a job that waited the policy's ``class_aging_step_ms`` is ordered
one class up per step, up to its ``class_aging_ceiling`` (standard), and its placement or wait says it was
promoted by aging (``-5`` aged jobs only within their class, so a stream of standard jobs starved best
effort). ``-7`` makes work that is not a gang elastic: a job of several replicas with ``gang: false``
starts with what fits in one cluster (at least one replica, or an inference service's
``inference.min_replicas``; ``-6`` started only inference services smaller, and kept them so) and its run
grows there as room appears, in queue order and under its quota and budgets, never by preempting
(``JobReplicasAdded``); the placement says "running N of M replicas; K wait for room". ``-8`` says of a
placement with no runner-up that its cluster was the only one of the federation's with room for it now
(``-7`` said nothing of the others). ``-9`` spreads an inference service with ``inference.spread_clusters``
k > 1 over up to k clusters, at most ceil(replicas / k) in any one (``-8`` placed all its replicas in one
cluster): it opens with one part, is topped up in other clusters (``JobReplicasAdded`` v2 naming another
cluster), loses only a cluster's part when that part ends or is preempted there (preemption and quota
see each part where it is), and its run is closed by ``JobRunClosed`` once every part has ended. It also
scores policy ``fgd`` against one filler shape per GPU-share size smaller than every typical shape's (the
95% coverage left those rare small shares out, so every hole below the smallest typical share looked
equally useless; ``-8`` could strand a hole only they fit), which changes which GPU a share takes."""


def cycle_id(sequence: int) -> CycleId:
    return CycleId(f"cycle-{sequence:09d}")


def decision_events(state: SchedulerState, result: core.CycleResult, sequence: int) -> list[Envelope]:
    """The events of one cycle, in the order they are published (the cycle record not included)."""
    cid = cycle_id(sequence)
    out: list[Event] = []
    ids: list[str] = []
    for job_id in state.open_cancellations():
        facts = state.jobs[job_id]
        if facts.running_placement() is None and not facts.closable():  # a spread run closes first
            out.append(JobCancelled(job_id=JobId(job_id), run=0, message="cancelled while waiting in the queue"))
            ids.append(f"{cid}:cancel:{job_id}")
    for job_id in state.closing_runs():
        out.append(_run_closed(state, job_id, cid))
        ids.append(f"{cid}:close:{job_id}")
    for decision in result.decisions:
        event = _event(state, decision, cid, result.now_ms)
        if event is not None:
            out.append(event)
            ids.append(f"{cid}:{decision.kind}:{getattr(decision, 'job_id', getattr(decision, 'victim', ''))}")
    return [
        Envelope(id=i, time_ms=result.now_ms, data=e, source=SOURCE, subject=e.partition_key())
        for i, e in zip(ids, out, strict=True)
    ]


def cycle_record(
    sequence: int, offsets: Sequence[tuple[str, int, int]], result: core.CycleResult, events: Sequence[Envelope]
) -> Envelope:
    record = SchedulingCycleCompleted(
        cycle_id=cycle_id(sequence),
        sequence=sequence,
        input_offsets=tuple(TopicOffset(topic=t, partition=p, offset=o) for t, p, o in sorted(offsets)),
        logical_time_ms=result.now_ms,
        policy_version=result.policy_version,
        decision_count=len(events),
        decisions_digest=digest(events),
        engine=DECISION_ENGINE,
    )
    return Envelope(
        id=f"{cycle_id(sequence)}:completed",
        time_ms=result.now_ms,
        data=record,
        source=SOURCE,
        subject=record.partition_key(),
    )


def digest(events: Sequence[Envelope]) -> str:
    return digest_of_bodies(encode(envelope).value for envelope in events)


def digest_of_bodies(bodies: Iterable[bytes]) -> str:
    """The digest a cycle record stores, over its decision events' encoded bodies in publishing order
    (``audit verify`` computes it over the bodies it has encoded, and over the bodies the log holds)."""
    h = hashlib.sha256()
    for body in bodies:
        h.update(body)
        h.update(b"\n")
    return h.hexdigest()


def _reason(code: ReasonCode | str) -> ReasonCode:
    return ReasonCode(code)


def _score(candidate: core.CandidateScore) -> dict[str, object]:
    """A ``CandidateScore``'s fields, validated with the event that holds them (one validation of the
    whole tree costs about two thirds of one per component; a decision has a dozen)."""
    # The core's breakdown may carry its own "total": the event's total is the sum of the terms.
    terms = [(name, points) for name, points in candidate.breakdown if name != "total"]
    return {
        "cluster": ClusterId(candidate.cluster),
        "node": event_node(candidate.nodes[0]) if candidate.nodes else None,
        "total": sum(points for _, points in terms),
        "components": tuple({"name": _id(name), "points": points} for name, points in terms),
    }


@functools.lru_cache(maxsize=4096)  # a handful of score names, cleaned for every event of every cycle
def _id(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name.lower()).strip("-._")
    return cleaned[:128] or "term"


def _binding(decision: core.Queue) -> BindingConstraint:
    """The binding constraint with its numbers; the reason alone where the core gave none (or a resource
    the catalogue does not know)."""
    c = decision.constraint
    if c is None or c.reason != decision.binding:
        return BindingConstraint(reason=_reason(decision.binding))
    resource = _RESOURCES.get(c.resource or "")
    return BindingConstraint(
        reason=_reason(c.reason),
        resource=resource,
        gpu_model=c.gpu_model if resource in (ResourceKind.GPU, ResourceKind.NPU) else None,
        cluster=ClusterId(c.cluster) if c.cluster else None,
        requested=c.requested if resource is not None else 0,
        available=c.available if resource is not None else 0,
    )


_RESOURCES = {kind.value: kind for kind in ResourceKind}


REQUEUE_EVERY_MS = 60_000
"""A waiting job whose reasons are unchanged gets a new ``JobQueued`` at most this often."""


def moved_materially(facts: JobFacts, wait: core.Queue, now_ms: int) -> bool:
    """Whether a wait with unchanged reasons is worth a new ``JobQueued``: a minute or more since the last
    one, and its place in its own queue or in the federation's order moved by a fifth (at least one
    place), or its estimated start came or went or moved by a fifth of the time still to wait (at least
    five minutes)."""
    at, federation, own, estimate = facts.last_queued_at
    if now_ms - at < REQUEUE_EVERY_MS:
        return False
    if _moved(federation, wait.federation_position) or _moved(own, wait.tenant_queue_position):
        return True
    new = wait.estimated_start_ms
    if (new is None) != (estimate is None):
        return True
    if new is None or estimate is None:
        return False
    return abs(new - estimate) >= max(300_000, max(0, estimate - now_ms) // 5)


def _moved(before: int | None, now: int) -> bool:
    """Whether a place in a queue moved by a fifth of what it was (at least one place)."""
    return before is not None and abs(max(1, now) - before) >= max(1, before // 5)


def _verdict(state: SchedulerState, decision: core.Retry | core.GiveUp, cid: CycleId) -> Event | None:
    """The verdict on a failed run, unless one was given already (the core sees only runs without one)."""
    facts = state.jobs.get(decision.job_id)
    if facts is None or facts.verdict(decision.run):
        return None
    common: dict[str, object] = {
        "job_id": decision.job_id,
        "cycle_id": cid,
        "run": decision.run,
        "cluster": decision.cluster,
        "node": event_node(decision.node) if decision.node else None,
        "failure": _reason(decision.failure),
        "kind": FailureKind.INFRASTRUCTURE if decision.infrastructure else FailureKind.APPLICATION,
        "allowed": decision.allowed,
        "message": decision.message[:_TEXT],
    }
    if isinstance(decision, core.Retry):
        return JobRetryScheduled.model_validate(
            {**common, "attempt": decision.attempt, "not_before_ms": decision.not_before_ms}
        )
    return JobRetriesExhausted.model_validate({**common, "used": decision.used})


def _replica(number: int, r: ReplicaPlacement) -> dict[str, object]:
    return {
        "replica": number,
        "node": event_node(r.node_id),
        "gpu_indices": tuple(r.gpu_indices),
        "gpu_milli_each": r.gpu_milli_each,
        "npu_indices": tuple(r.npu_indices),
    }


def _run_closed(state: SchedulerState, job_id: str, cid: CycleId) -> JobRunClosed:
    """A spread run every part of which ended: closed as its last part ended, its story in words."""
    facts = state.jobs[job_id]
    run = facts.current_run()
    placed = facts.placements[run]
    counts: dict[str, int] = {}
    for index in range(len(placed.replicas)):
        cluster = placed.cluster_of(index)
        counts[cluster] = counts.get(cluster, 0) + 1
    left = facts.left(run)
    parts = tuple(
        RunPartEnd(cluster=ClusterId(c), outcome=end.how, reason=_reason(end.reason) if end.reason else None)
        for c, end in left.items()
    )
    cluster, last = next(reversed(left.items()))

    def said(cluster: str) -> str:
        end = left[cluster]
        why = f" ({end.reason}{f' on {end.node}' if end.node else ''})" if end.reason else ""
        return f"{counts.get(cluster, 0)} in {cluster}: {end.how.value}{why}"

    message = (
        f"run {run} of {job_id} closed: every part has ended ({'; '.join(said(c) for c in left)}); "
        f"it ends as its last part did, {last.how.value}"
    )
    return JobRunClosed(
        job_id=JobId(job_id),
        cycle_id=cid,
        run=run,
        cluster=ClusterId(cluster),
        outcome=last.how,
        reason=parts[-1].reason,
        node=NodeId(last.node) if last.reason and last.node else None,
        parts=parts,
        message=message[:_TEXT],
    )


def _replicas_added(state: SchedulerState, decision: core.AddReplicas, cid: CycleId) -> JobReplicasAdded:
    """A top-up: the new replicas numbered after every replica the run ever held (in any of its clusters),
    and the count it holds with them."""
    facts = state.jobs[decision.job_id]
    run = facts.current_run()
    first = facts.placements[run].next_replica()
    live = facts.running_placement()
    held = len(live.replicas) if live is not None else 0
    return JobReplicasAdded.model_validate(
        {
            "job_id": decision.job_id,
            "cycle_id": cid,
            "cluster": decision.cluster,
            "run": run,
            "replicas": tuple(_replica(first + i, r) for i, r in enumerate(decision.replicas)),
            "running_replicas": held + len(decision.replicas),
            "chosen": _score(decision.chosen),
            "explanation": decision.message[:_TEXT],
        }
    )


def _event(state: SchedulerState, decision: core.Decision, cid: CycleId, now_ms: int) -> Event | None:
    if isinstance(decision, core.Place):
        facts = state.jobs[decision.job_id]
        reason = ReasonCode.BACKFILLED if ReasonCode.BACKFILLED in decision.reasons else ReasonCode.PLACED
        # Nested parts as plain fields: the event validates its whole tree in one call.
        return JobPlaced.model_validate(
            {
                "job_id": decision.job_id,
                "cycle_id": cid,
                "cluster": decision.cluster,
                "run": facts.current_run() + 1,
                "reason": reason,
                "replicas": tuple(_replica(i, r) for i, r in enumerate(decision.replicas)),
                "chosen": _score(decision.chosen),
                "runner_up": (_score(decision.runner_up),) if decision.runner_up is not None else (),
                "explanation": decision.message[:_TEXT],
                "victims": facts.victims[:_VICTIMS],
            }
        )
    if isinstance(decision, core.AddReplicas):
        return _replicas_added(state, decision, cid)
    if isinstance(decision, core.Queue):
        facts = state.jobs[decision.job_id]
        reasons = tuple(dict.fromkeys(_reason(r) for r in decision.reasons)) or (_reason(decision.binding),)
        if tuple(r.value for r in reasons) == facts.last_queued and not moved_materially(facts, decision, now_ms):
            return None
        why_not = tuple(
            ClusterWhyNot(cluster=w.cluster, reasons=(_reason(w.reason),), detail=w.detail[:_SHORT])
            for w in sorted(decision.per_cluster, key=lambda w: w.cluster)
        )
        c = decision.change
        change = (
            SuggestedChange(
                field=c.field, current=c.current[:_SHORT], suggested=c.suggested[:_SHORT], message=c.message[:_SHORT]
            )
            if c is not None
            else None
        )
        return JobQueued(
            job_id=decision.job_id,
            cycle_id=cid,
            reasons=reasons[:16],
            message=decision.message[:_TEXT],
            why_not=why_not[:256],
            binding=_binding(decision),
            smallest_change=change,
            federation_position=max(1, decision.federation_position),
            tenant_queue_position=max(1, decision.tenant_queue_position),
            estimated_start_ms=decision.estimated_start_ms,
            pending_reason=pending_reason_of(decision.binding),
        )
    if isinstance(decision, core.Preempt):
        victim = state.jobs.get(decision.victim)
        run = victim.current_run() if victim is not None else 1
        if victim is None or victim.running_placement() is None:
            return None
        spread = victim.spec is not None and victim.spec.spread_clusters > 1
        if (run, decision.cluster) in (victim.part_stops or {}) if spread else run in victim.stop_requested:
            return None
        return JobPreemptionRequested(
            job_id=decision.victim,
            cycle_id=cid,
            cluster=decision.cluster,
            run=max(1, run),
            preemptor=decision.preemptor,
            rule=_id(decision.rule.value),
            reason=_reason(decision.rule),
            grace_period_s=decision.grace_period_s,
            message=decision.message[:_TEXT],
        )
    if isinstance(decision, core.Retry | core.GiveUp):
        return _verdict(state, decision, cid)
    return None  # Reserve: visible in the reserved job's JobQueued (ReservedForGang) and explanation
