"""Why a job waits, why it was preempted, why it went where it is: the answer, with the numbers. Pure.

Called by ``ExplainJob``. Reads the job view's row: ``last_decision`` (the scheduler's latest decision
about the job, its JSON body as published) and the timeline (for earlier preemptions). The decision is
read back through the catalogue's own model, so every field means what the catalogue says; a body this
code cannot read (a newer schema) is still returned raw in ``decision_json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from events.catalog.decisions import (
    CandidateScore,
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReclaimRequested,
    JobReplicasAdded,
    JobRetriesExhausted,
    JobRetryScheduled,
    JobRunClosed,
)
from events.catalog.lifecycle import FINAL_STATUSES
from events.catalog.pending_reasons import DESCRIPTIONS as CATEGORIES
from events.catalog.reasons import ReasonCode
from events.catalog.types import ResourceKind
from events.wire.envelope import format_time
from services.api.convert import describe, reason_text, slots, timeline_entry, waited_ms
from services.api.pb import jobs_pb2

Decision = (
    JobQueued
    | JobPlaced
    | JobReplicasAdded
    | JobPreemptionRequested
    | JobReclaimRequested
    | JobRetryScheduled
    | JobRetriesExhausted
    | JobRunClosed
)
_DECISIONS: dict[str, type[Decision]] = {
    "JobQueued": JobQueued,
    "JobPlaced": JobPlaced,
    "JobReplicasAdded": JobReplicasAdded,
    "JobPreemptionRequested": JobPreemptionRequested,
    "JobReclaimRequested": JobReclaimRequested,
    "JobRetryScheduled": JobRetryScheduled,
    "JobRetriesExhausted": JobRetriesExhausted,
    "JobRunClosed": JobRunClosed,
}
_PREEMPTION_EVENTS = ("JobPreemptionRequested", "JobPreempted", "JobReclaimRequested", "JobReclaimed")
_STOP_REQUESTS = ("JobPreemptionRequested", "JobReclaimRequested")
UNITS = {
    ResourceKind.CPU: "milli-CPU",
    ResourceKind.MEMORY: "MiB",
    ResourceKind.GPU: "milli-GPU",
    ResourceKind.NPU: "NPUs",
}


def explain(row: Mapping[str, Any], now_ms: int) -> jobs_pb2.Explanation:
    status = row.get("status") or "unknown"
    out = jobs_pb2.Explanation(
        job_id=row["entity_key"],
        status=status,
        waiting_ms=waited_ms(row, now_ms),
        runs=row.get("runs") or 0,
        decision_type=row.get("last_decision_type") or "",
    )
    out.preemptions.extend(timeline_entry(e) for e in row.get("timeline") or () if e[2] in _PREEMPTION_EVENTS)
    body = row.get("last_decision")
    decision = _decision(out.decision_type, body)
    if body is not None:
        out.decision_json = json.dumps(body, sort_keys=True)
    summary: list[str] = []
    if isinstance(decision, JobQueued):
        out.question = "finished" if status in FINAL_STATUSES else "waiting"
        out.cycle_id = decision.cycle_id
        out.wait.CopyFrom(_wait(decision))
        summary += _wait_lines(decision, row)
    elif isinstance(decision, JobPlaced):
        out.question = "finished" if status in FINAL_STATUSES else "placed"
        out.cycle_id = decision.cycle_id
        out.placement.CopyFrom(_placement(decision))
        summary += _placement_lines(decision)
    elif isinstance(decision, JobReplicasAdded):
        out.question = "finished" if status in FINAL_STATUSES else "placed"
        out.cycle_id = decision.cycle_id
        out.placement.CopyFrom(_growth(decision))
        summary += _growth_lines(decision)
    elif isinstance(decision, JobPreemptionRequested | JobReclaimRequested):
        out.question = "finished" if status in FINAL_STATUSES else "preempted"
        out.cycle_id = decision.cycle_id
        out.preemption.CopyFrom(_preemption(decision))
        summary += _preemption_lines(decision)
    elif isinstance(decision, JobRetryScheduled | JobRetriesExhausted):
        # A failed run's verdict: the job waits out its backoff (then its next wait explains it), or ended.
        out.question = "finished" if status in FINAL_STATUSES else "waiting"
        out.cycle_id = decision.cycle_id
        summary.append(_retry_line(decision))
    elif isinstance(decision, JobRunClosed):
        # A spread service's run closed as its last part ended: its story; a queued job's next wait says more.
        out.question = "finished" if status in FINAL_STATUSES else "waiting"
        out.cycle_id = decision.cycle_id
        summary += _closed_lines(decision)
    else:
        out.question = "finished" if status in FINAL_STATUSES else "unknown"
        summary.append(_no_decision(status, body is not None))
    summary += _where_lines(row)
    summary += _history_lines(out.preemptions)
    if status in FINAL_STATUSES:
        summary.insert(0, f"The job has ended: {status} ({row.get('last_reason') or 'no reason given'}).")
    out.summary.extend(summary)
    return out


def _retry_line(d: JobRetryScheduled | JobRetriesExhausted) -> str:
    """The verdict in the scheduler's words, with when the retry may start."""
    line = d.message[:1].upper() + d.message[1:] + "."
    if isinstance(d, JobRetryScheduled):
        line += f" It may be placed again from {format_time(d.not_before_ms)}."
    return line


def _decision(kind: str, body: object) -> Decision | None:
    cls = _DECISIONS.get(kind)
    if cls is None or body is None:
        return None
    try:
        return cls.model_validate_json(json.dumps(body))
    except ValidationError:
        return None


def _no_decision(status: str, unreadable: bool) -> str:
    if unreadable:
        return "The scheduler's latest decision is in a form this server cannot read; see decision_json."
    return f"The scheduler has made no decision about this job yet (status {status})."


def _wait(d: JobQueued) -> jobs_pb2.WaitExplanation:
    wait = jobs_pb2.WaitExplanation(reasons=[reason_text(r.value) for r in d.reasons], message=d.message)
    for w in d.why_not:
        wait.why_not.append(
            jobs_pb2.ClusterWhyNot(
                cluster=w.cluster, reasons=[reason_text(r.value) for r in w.reasons], detail=w.detail
            )
        )
    if d.binding is not None:
        b = d.binding
        wait.binding.CopyFrom(
            jobs_pb2.BindingConstraint(
                reason=reason_text(b.reason.value),
                resource=b.resource.value if b.resource else "",
                gpu_model=b.gpu_model or "",
                cluster=b.cluster or "",
                requested=b.requested,
                available=b.available,
            )
        )
    if d.smallest_change is not None:
        c = d.smallest_change
        wait.smallest_change.CopyFrom(
            jobs_pb2.SuggestedChange(field=c.field, current=c.current, suggested=c.suggested, message=c.message)
        )
    for name in ("federation_position", "tenant_queue_position", "estimated_start_ms"):
        value = getattr(d, name)
        if value is not None:
            setattr(wait, name, value)
    if d.pending_reason is not None:
        wait.pending_reason.CopyFrom(
            jobs_pb2.ReasonText(code=d.pending_reason.value, description=CATEGORIES[d.pending_reason])
        )
    return wait


def _wait_lines(d: JobQueued, row: Mapping[str, Any]) -> list[str]:
    reasons = ", ".join(f"{r.value} ({describe(r.value)})" for r in d.reasons)
    lines = [f"Waiting: {reasons}.", d.message] if d.message else [f"Waiting: {reasons}."]
    if d.pending_reason is not None:
        lines.append(f"Pending reason: {d.pending_reason.value} ({CATEGORIES[d.pending_reason]}).")
    places = _places(d, row)
    if places:
        lines.append(places)
    if d.binding is not None:
        b = d.binding
        where = f"in cluster {b.cluster}" if b.cluster else "across the federation"
        line = f"Binding constraint: {b.reason.value} ({describe(b.reason.value)}) {where}"
        if b.resource is not None:
            what = b.resource.value + (f" of model {b.gpu_model}" if b.gpu_model else "")
            # A cluster's numbers are one replica's on one node; a quota's, the job's and what it has left.
            per = " for one replica on one node" if b.cluster else ""
            line += (
                f": {what} requested {amount(b.resource, b.requested)}{per}, "
                f"available {amount(b.resource, b.available)}"
            )
        lines.append(line + ".")
    if d.smallest_change is not None:
        c = d.smallest_change
        tail = f" ({c.message})" if c.message else ""
        lines.append(f"Smallest change that would help: {c.field} from {c.current} to {c.suggested}{tail}.")
    if d.estimated_start_ms is not None:
        lines.append(f"Estimated start: {format_time(d.estimated_start_ms)}.")
    for w in d.why_not:
        detail = f" - {w.detail}" if w.detail else ""
        lines.append(f"  {w.cluster}: " + ", ".join(r.value for r in w.reasons) + detail)
    return lines


def _places(d: JobQueued, row: Mapping[str, Any]) -> str:
    """Where it stands, as far as the decision says: "Position 3 in team-a/default, 12 in the federation's
    order (1 is next)." (a v1 decision gave the federation's only)."""
    parts = []
    if d.tenant_queue_position is not None:
        queue = f"{row.get('tenant') or 'its tenant'}/{row.get('queue') or 'default'}"
        parts.append(f"{d.tenant_queue_position} in {queue}")
    if d.federation_position is not None:
        parts.append(f"{d.federation_position} in the federation's order")
    return f"Position {', '.join(parts)} (1 is next)." if parts else ""


def amount(resource: ResourceKind, value: int) -> str:
    """A quantity in its unit, in whole GPUs or CPUs where it is one."""
    if resource in (ResourceKind.GPU, ResourceKind.CPU) and value % 1000 == 0:
        whole = value // 1000
        return f"{whole} {resource.value.upper()}{'' if whole == 1 else 's'}"
    return f"{value} {UNITS[resource]}"


def _score(c: CandidateScore) -> jobs_pb2.CandidateScore:
    return jobs_pb2.CandidateScore(
        cluster=c.cluster,
        node=c.node or "",
        total=c.total,
        components=[jobs_pb2.ScoreComponent(name=p.name, points=p.points) for p in c.components],
    )


def _placement(d: JobPlaced) -> jobs_pb2.PlacementExplanation:
    return jobs_pb2.PlacementExplanation(
        cluster=d.cluster,
        run=d.run,
        reason=reason_text(d.reason.value),
        replicas=slots(
            [[r.node, list(r.gpu_indices), r.gpu_milli_each, list(r.npu_indices)] for r in d.replicas], d.cluster
        ),
        chosen=_score(d.chosen),
        runner_up=[_score(c) for c in d.runner_up],
        explanation=d.explanation,
        victims=list(d.victims),
    )


def _score_line(c: CandidateScore) -> str:
    where = f"{c.cluster}/{c.node}" if c.node else c.cluster
    parts = " + ".join(f"{p.name} {p.points}" for p in c.components)
    return f"{where}: total {c.total}" + (f" = {parts}" if parts else "")


def _placement_lines(d: JobPlaced) -> list[str]:
    lines = [f"Placed on cluster {d.cluster} (run {d.run}, {d.reason.value}): {d.explanation}"]
    lines.append("Chosen " + _score_line(d.chosen) + " (milli-points).")
    lines += ["Runner-up " + _score_line(c) for c in d.runner_up]
    for r in d.replicas:
        gpus = f", GPUs {list(r.gpu_indices)} x {r.gpu_milli_each} milli-GPU" if r.gpu_indices else ""
        lines.append(f"  replica {r.replica} on node {r.node}{gpus}")
    if d.victims:
        lines.append(f"Room was made for it first: {len(d.victims)} job(s) asked to stop: {', '.join(d.victims)}.")
    return lines


def _growth(d: JobReplicasAdded) -> jobs_pb2.PlacementExplanation:
    """Replicas added to the run: explained as a placement of those replicas (the run's own placement
    explained the others)."""
    held = [[r.node, list(r.gpu_indices), r.gpu_milli_each, list(r.npu_indices)] for r in d.replicas]
    replicas = slots(held, d.cluster)
    for slot, r in zip(replicas, d.replicas, strict=True):
        slot.replica = r.replica  # numbered after the run's others
    return jobs_pb2.PlacementExplanation(
        cluster=d.cluster,
        run=d.run,
        reason=reason_text("Placed"),
        replicas=replicas,
        chosen=_score(d.chosen),
        explanation=d.explanation,
    )


def _growth_lines(d: JobReplicasAdded) -> list[str]:
    lines = [f"Grew on cluster {d.cluster} (run {d.run}, now {d.running_replicas} replicas): {d.explanation}"]
    for r in d.replicas:
        gpus = f", GPUs {list(r.gpu_indices)} x {r.gpu_milli_each} milli-GPU" if r.gpu_indices else ""
        lines.append(f"  replica {r.replica} on node {r.node}{gpus}")
    return lines


def _where_lines(row: Mapping[str, Any]) -> list[str]:
    """Where a spread service's run holds its replicas, cluster by cluster, and which of its parts ended
    how: "The service runs 3 replicas: 2 in sim-1, 1 in sim-2 (sim-3's part failed: NodeFailure)."."""
    parts = row.get("parts") or ()
    if not parts or row.get("status") not in ("placed", "running"):
        return []
    per_cluster: dict[str, int] = {}
    for slot in row.get("placement") or ():
        where = str(slot[4]) if len(slot) > 4 and slot[4] else str(row.get("cluster") or "")
        per_cluster[where] = per_cluster.get(where, 0) + 1
    held = sum(per_cluster.values())
    where = ", ".join(f"{n} in {cluster}" for cluster, n in per_cluster.items())
    ended = [
        f"{p[0]}'s part {p[3]}" + (f": {p[4]}" if p[4] else "")
        for p in parts
        if p[3]  # cluster, replicas, opened, ended, reason, ended at
    ]
    line = f"The service runs {held} replica{'' if held == 1 else 's'}" + (f": {where}" if where else "")
    return [line + (f" ({'; '.join(ended)})" if ended else "") + "."]


def _closed_lines(d: JobRunClosed) -> list[str]:
    """A spread run's close: how it ended (as its last part), its story, how each part ended."""
    how = d.outcome.value + (f", {d.reason.value}" if d.reason is not None else "")
    ends = "; ".join(f"{p.cluster}: {p.outcome.value}" + (f" ({p.reason.value})" if p.reason else "") for p in d.parts)
    return [f"Run {d.run} closed ({how} in {d.cluster}): {d.message}", f"  {ends}"]


def _preemption(d: JobPreemptionRequested | JobReclaimRequested) -> jobs_pb2.PreemptionExplanation:
    out = jobs_pb2.PreemptionExplanation(
        cluster=d.cluster,
        run=d.run,
        reason=reason_text(d.reason.value),
        rule=d.rule,
        grace_period_s=d.grace_period_s,
        message=d.message,
    )
    if isinstance(d, JobPreemptionRequested):
        out.preemptor = d.preemptor or ""
    else:
        out.preemptor = d.figures.lender
        out.figures_json = d.figures.model_dump_json()
    return out


def _preemption_lines(d: JobPreemptionRequested | JobReclaimRequested) -> list[str]:
    what = "Preemption" if isinstance(d, JobPreemptionRequested) else "Reclaim"
    lines = [
        f"{what} requested on cluster {d.cluster} (run {d.run}) under rule {d.rule}: "
        f"{d.reason.value} ({describe(d.reason.value)}); grace period {d.grace_period_s} s."
    ]
    if isinstance(d, JobPreemptionRequested) and d.preemptor:
        lines.append(f"To make room for job {d.preemptor}.")
    # An idle reclaim gives nothing back to a lender: its message says what stayed idle and for how long.
    if isinstance(d, JobReclaimRequested) and d.reason not in (ReasonCode.IDLE_GPU, ReasonCode.IDLE_NPU):
        f = d.figures
        model = f" of {f.gpu_model}" if f.gpu_model else ""
        lines.append(
            f"Borrowed quota{model}: this tenant uses {f.borrower_used_milli} of {f.borrower_guaranteed_milli} "
            f"milli-GPU guaranteed; lender {f.lender} uses {f.lender_used_milli} of {f.lender_guaranteed_milli} "
            f"and waits for {f.lender_pending_milli}; stopping this job gives back {f.reclaimed_milli}."
        )
    if d.message:
        lines.append(d.message)
    return lines


def _history_lines(entries: Sequence[jobs_pb2.TimelineEntry]) -> list[str]:
    stopped = [e for e in entries if e.event in ("JobPreempted", "JobReclaimed")]
    if not stopped:
        return []
    last = stopped[-1]
    # The request before the stop says why and for whom (the rule, the job it made room for); the stop
    # itself only that it happened.
    asked = [e for e in entries if e.event in _STOP_REQUESTS and e.time_ms <= last.time_ms]
    why = asked[-1] if asked else last
    return [
        f"Stopped {len(stopped)} time(s) to make room; the latest at {format_time(last.time_ms)}: "
        f"{why.reason}" + (f" - {why.message}" if why.message else "")
    ]
