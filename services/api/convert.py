"""Read-model rows and accepted submissions as protobuf messages. Pure.

Called by the servicers. Rows are ``services.api.queries`` dicts (JSON columns parsed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from events.catalog.jobs import JobSubmitted
from events.catalog.reasons import DESCRIPTIONS, ReasonCode
from services.api.pb import jobs_pb2, quota_pb2, resources_pb2
from services.api.store import Submission

Row = Mapping[str, Any]


def describe(reason: str) -> str:
    """Plain words for a reason, or a comma-joined list of them (``QuotaExceeded,NoFeasibleNode``)."""
    parts = []
    for code in reason.split(","):
        member = ReasonCode._value2member_map_.get(code)
        if isinstance(member, ReasonCode):
            parts.append(DESCRIPTIONS[member])
    return "; ".join(parts)


def reason_text(code: str) -> jobs_pb2.ReasonText:
    return jobs_pb2.ReasonText(code=code, description=describe(code))


def timeline_entry(entry: Sequence[Any]) -> jobs_pb2.TimelineEntry:
    time_ms, status, event, reason, message = entry
    return jobs_pb2.TimelineEntry(
        time_ms=int(time_ms),
        status=str(status),
        event=str(event),
        reason=str(reason),
        message=str(message),
        reason_description=describe(str(reason)),
    )


def slots(placement: Sequence[Sequence[Any]] | None) -> list[jobs_pb2.ReplicaSlot]:
    return [
        jobs_pb2.ReplicaSlot(replica=i, node=str(node), gpu_indices=[int(g) for g in gpus], gpu_milli_each=int(each))
        for i, (node, gpus, each) in enumerate(placement or ())
    ]


def waited_ms(row: Row, now_ms: int) -> int:
    """How long the job has waited in all: its finished waits, and for a job waiting now, the time since
    it joined the queue (the view adds a wait up only when it ends)."""
    waited = int(row.get("waiting_ms") or 0)
    since = row.get("queued_since_ms")
    if since is not None and row.get("status") in ("submitted", "queued"):
        waited += max(0, now_ms - int(since))
    return waited


def job(row: Row, *, now_ms: int, with_timeline: bool = False) -> jobs_pb2.Job:
    message = jobs_pb2.Job(
        job_id=row["entity_key"],
        name=row["name"] or "",
        tenant=row["tenant"] or "",
        project=row["project"] or "",
        queue=row["queue"] or "",
        kind=row["kind"] or "",
        priority_class=row["priority_class"] or "",
        status=row["status"] or "",
        cluster=row["cluster"] or "",
        replicas=row["replicas"] or 0,
        gpu_milli=row["gpu_milli"] or 0,
        waiting_ms=waited_ms(row, now_ms),
        run=row["run"] or 0,
        runs=row["runs"] or 0,
        preemptions=row["preemptions"] or 0,
        last_reason=row["last_reason"] or "",
        last_message=row["last_message"] or "",
        placement=slots(row.get("placement")),
        last_decision_type=row.get("last_decision_type") or "",
    )
    for name in ("submitted_ms", "placed_ms", "started_ms", "ended_ms"):
        if row.get(name) is not None:
            setattr(message, name, int(row[name]))
    if with_timeline:
        message.timeline.extend(timeline_entry(e) for e in row.get("timeline") or ())
    return message


def accepted_job(entry: Submission, *, with_timeline: bool = False) -> jobs_pb2.Job:
    """A job the API accepted that the job view has not folded yet: status ``submitted``."""
    event = JobSubmitted.model_validate_json(entry.event_json)
    message = jobs_pb2.Job(
        job_id=event.job_id,
        name=event.name,
        tenant=event.tenant,
        project=event.project,
        queue=event.queue,
        kind=event.kind.value,
        priority_class=event.priority_class.value,
        status="submitted",
        replicas=event.replicas,
        gpu_milli=event.resources.total_gpu_milli(),
        submitted_ms=entry.created_ms,
        last_reason="Submitted",
    )
    if with_timeline:
        message.timeline.append(timeline_entry([entry.created_ms, "submitted", "JobSubmitted", "Submitted", ""]))
    return message


def cluster(row: Row) -> resources_pb2.Cluster:
    return resources_pb2.Cluster(**{k: row[k] for k in resources_pb2.Cluster.DESCRIPTOR.fields_by_name if k in row})


def node(row: Row) -> resources_pb2.Node:
    fields = resources_pb2.Node.DESCRIPTOR.fields_by_name
    return resources_pb2.Node(**{k: (row[k] if row[k] is not None else _zero(k)) for k in fields if k in row})


def _zero(name: str) -> Any:
    field = resources_pb2.Node.DESCRIPTOR.fields_by_name[name]
    return "" if field.type == field.TYPE_STRING else False if field.type == field.TYPE_BOOL else 0


def capacity(per_cluster: Sequence[Row], fleet: Sequence[Row]) -> resources_pb2.Capacity:
    out = resources_pb2.Capacity()
    models: dict[str, list[int]] = {}
    for row in per_cluster:
        out.clusters.append(
            resources_pb2.ClusterModelCapacity(
                cluster=row["cluster"],
                gpu_model=row["gpu_model"],
                total_milli=row["total_milli"],
                healthy_milli=row["healthy_milli"],
                free_milli=row["free_milli"],
                allocated_milli=row["allocated_milli"],
                nodes=row["nodes"],
            )
        )
        sums = models.setdefault(row["gpu_model"], [0, 0, 0])
        for i, name in enumerate(("total_milli", "healthy_milli", "free_milli")):
            sums[i] += int(row[name])
    by_model = {row["gpu_model"]: row for row in fleet}
    for model in sorted(set(models) | set(by_model)):
        total, healthy, free = models.get(model, [0, 0, 0])
        f = by_model.get(model, {})
        out.models.append(
            resources_pb2.ModelCapacity(
                gpu_model=model,
                total_milli=total,
                healthy_milli=healthy,
                free_milli=free,
                pending_milli=f.get("pending_milli") or 0,
                congestion_milli=f.get("congestion_milli") or 0,
                hot=bool(f.get("hot")),
            )
        )
    return out


def queue_quota(row: Row) -> quota_pb2.QueueQuota:
    lines = []
    for u in row.get("usage") or ():
        line = quota_pb2.QuotaUsageLine(
            resource=u["resource"],
            gpu_model=u.get("gpu_model") or "",
            used=u.get("used", 0),
            guaranteed=u.get("guaranteed", 0),
            borrowed=u.get("borrowed", 0),
        )
        if u.get("limit") is not None:
            line.limit = u["limit"]
        lines.append(line)
    return quota_pb2.QueueQuota(
        tenant=row["tenant"],
        queue=row["queue"],
        lines=lines,
        gpu_hours_milli=row["gpu_hours_milli"] or 0,
        running_jobs=row["running_jobs"] or 0,
    )
