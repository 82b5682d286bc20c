"""Read-model rows and accepted submissions as protobuf messages. Pure.

Called by the servicers. Rows are the reader's typed rows (``projections.readmodel.rows.typed``);
``as_mapping`` gives a job row as the column mapping ``watch.history`` and ``explain`` read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from events.catalog.jobs import JobSubmitted
from events.catalog.profiles import is_hot, pressure_milli
from events.catalog.reasons import DESCRIPTIONS, ReasonCode
from projections.readmodel.rows.typed import (
    ClusterSummary,
    FleetModel,
    JobRow,
    JobSummary,
    ModelCapacity,
    NodeRow,
    NpuCapacity,
    PendingNpus,
    QueueQuota,
)
from services.api.pb import jobs_pb2, quota_pb2, resources_pb2
from services.api.store import Submission


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


def slots(placement: Sequence[Sequence[Any]] | None, cluster: str = "") -> list[jobs_pb2.ReplicaSlot]:
    """A placement's replicas, as the job row keeps them: ``[node, gpu indices, milli each, npu indices,
    cluster, replica]`` (rows from before NPUs were kept have three entries, from before replicas said their
    cluster and number four: theirs is ``cluster``, the run's, and their place in the placement)."""
    return [
        jobs_pb2.ReplicaSlot(
            replica=int(rest[2]) if len(rest) > 2 and rest[2] is not None else i,
            node=str(node),
            gpu_indices=[int(g) for g in gpus],
            gpu_milli_each=int(each),
            npu_indices=[int(u) for u in (rest[0] if rest else ())],
            cluster=str(rest[1] or cluster) if len(rest) > 1 else cluster,
        )
        for i, (node, gpus, each, *rest) in enumerate(placement or ())
    ]


def run_part(part: Sequence[Any]) -> jobs_pb2.RunPart:
    """A spread run's part as the job row keeps it: ``[cluster, replicas, opened ms, ended, reason, ended ms]``."""
    cluster, replicas, opened_ms, ended, reason, ended_ms = part
    message = jobs_pb2.RunPart(
        cluster=str(cluster), replicas=int(replicas), opened_ms=int(opened_ms), ended=str(ended), reason=str(reason)
    )
    if ended_ms is not None:
        message.ended_ms = int(ended_ms)
    return message


def waited_ms(row: Mapping[str, Any], now_ms: int) -> int:
    """How long a job has waited in all, from its row as a column mapping (``explain``'s)."""
    since = row.get("queued_since_ms")
    return _waited(int(row.get("waiting_ms") or 0), None if since is None else int(since), row.get("status"), now_ms)


def _waited(waiting_ms: int, queued_since_ms: int | None, status: object, now_ms: int) -> int:
    """A job's finished waits, and for a job waiting now, the time since it joined the queue (the view
    adds a wait up only when it ends)."""
    if queued_since_ms is not None and status in ("submitted", "queued"):
        return waiting_ms + max(0, now_ms - queued_since_ms)
    return waiting_ms


def as_mapping(row: JobRow) -> dict[str, Any]:
    """A job row as the mapping of its table's columns (``entity_key`` the job id) that ``watch.history``
    and ``explain`` read."""
    out = {field.name: getattr(row, field.name) for field in dataclasses.fields(row)}
    out["entity_key"] = out.pop("job_id")
    return out


def job(row: JobSummary, *, now_ms: int, with_timeline: bool = False) -> jobs_pb2.Job:
    """A job message; its timeline only if asked (and ``row`` is a whole ``JobRow``)."""
    message = jobs_pb2.Job(
        job_id=row.job_id,
        name=row.name,
        tenant=row.tenant,
        project=row.project,
        queue=row.queue,
        kind=row.kind,
        priority_class=row.priority_class,
        status=row.status,
        cluster=row.cluster or "",
        replicas=row.replicas,
        gpu_milli=row.gpu_milli,
        npus=row.npus,
        waiting_ms=_waited(row.waiting_ms, row.queued_since_ms, row.status, now_ms),
        run=row.run,
        runs=row.runs,
        preemptions=row.preemptions,
        retries=row.retries,
        last_reason=row.last_reason,
        last_message=row.last_message,
        placement=slots(row.placement, row.cluster or ""),
        clusters=list(row.clusters),
        parts=[run_part(p) for p in row.parts],
        last_decision_type=row.last_decision_type,
        pending_reason=row.pending_reason or "",
    )
    optional = ("submitted_ms", "placed_ms", "started_ms", "ended_ms", "estimated_start_ms")
    for name in (*optional, "federation_position", "tenant_queue_position"):
        value = getattr(row, name)
        if value is not None:
            setattr(message, name, value)
    if with_timeline and isinstance(row, JobRow):
        message.timeline.extend(timeline_entry(e) for e in row.timeline)
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
        npus=event.resources.npus,
        submitted_ms=entry.created_ms,
        last_reason="Submitted",
    )
    if with_timeline:
        message.timeline.append(timeline_entry([entry.created_ms, "submitted", "JobSubmitted", "Submitted", ""]))
    return message


def npu_capacity(row: NpuCapacity, hot: bool = False, demand: tuple[int, int] = (0, 0)) -> resources_pb2.NpuCapacity:
    """A cluster's NPUs of one model, with the model's federation-wide standing: hot, and ``demand``
    (pending NPUs, congestion in thousandths)."""
    return resources_pb2.NpuCapacity(
        cluster=row.cluster,
        npu_model=row.npu_model,
        nodes=row.nodes,
        total=row.total,
        healthy=row.healthy,
        degraded=row.degraded,
        failed=row.failed,
        free=row.free,
        hot=hot,
        pending=demand[0],
        congestion_milli=demand[1],
    )


def npu_demand(npus: Sequence[NpuCapacity], pending: Sequence[PendingNpus]) -> dict[str, tuple[int, int]]:
    """Per NPU model across the federation: (the NPUs waiting jobs that accept it ask for, that demand
    against its free NPUs in thousandths), as the fleet counts GPU models: a job that accepts several
    models, or any, counts for each; one that asks more than the fleet has of the models it accepts
    counts for none (it cannot run as asked whatever the queue)."""
    healthy: dict[str, int] = {}
    free: dict[str, int] = {}
    for row in npus:
        healthy[row.npu_model] = healthy.get(row.npu_model, 0) + row.healthy
        free[row.npu_model] = free.get(row.npu_model, 0) + row.free
    demand = dict.fromkeys(healthy, 0)
    for shape in pending:
        accepted = [m for m in (shape.npu_models or sorted(healthy)) if m in healthy]
        if shape.each > sum(healthy[m] for m in accepted):
            continue
        for model in accepted:
            demand[model] += shape.each * shape.jobs
    return {m: (d, min(1_000_000, d * 1000 // max(1, free[m]))) for m, d in sorted(demand.items())}


def hot_npu_models(npus: Sequence[NpuCapacity]) -> frozenset[str]:
    """The NPU models that are hot across the federation: the allocated share of their healthy NPUs
    reaches the default ``hot_pressure_milli`` (``events.catalog.profiles.is_hot``, GPU and NPU alike; a
    cordoned node's idle NPUs are not allocated, as the scheduler counts them)."""
    sums: dict[str, list[int]] = {}
    for row in npus:
        model = sums.setdefault(row.npu_model, [0, 0])
        model[0] += row.healthy
        model[1] += row.unheld
    return frozenset(m for m, (healthy, free) in sums.items() if is_hot(pressure_milli(healthy * 1000, free * 1000)))


def cluster(row: ClusterSummary, npus: Sequence[NpuCapacity] = ()) -> resources_pb2.Cluster:
    """A cluster with its NPUs per model (``npus``: its own rows of ``ReadModels.npu_capacity``)."""
    return resources_pb2.Cluster(
        cluster=row.cluster,
        registered=row.registered,
        kind=row.kind,
        site=row.site,
        region=row.region,
        status=row.status,
        status_reason=row.status_reason,
        nodes=row.nodes,
        gpus=row.gpus,
        gpu_capacity_milli=row.gpu_capacity_milli,
        gpu_free_milli=row.gpu_free_milli,
        npus=[npu_capacity(n) for n in npus],
    )


def node(row: NodeRow) -> resources_pb2.Node:
    return resources_pb2.Node(
        cluster=row.cluster,
        node=row.node,
        present=row.present,
        schedulable=row.schedulable,
        gpu_model=row.gpu_model,
        gpus=row.gpus,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        gpu_capacity_milli=row.gpu_capacity_milli,
        gpu_allocated_milli=row.gpu_allocated_milli,
        gpu_free_milli=row.gpu_free_milli,
        health_milli=row.health_milli,
        failures=row.failures,
        gpu_utilisation_pct=row.gpu_utilisation_pct,
        jobs=row.jobs,
        last_seen_ms=row.last_seen_ms,
        npus=row.npus,
        npu_model=row.npu_model,
        npus_free=row.npus_free,
        npus_healthy=row.npus_healthy,
        npus_degraded=row.npus_degraded,
        npu_utilisation_pct=row.npu_utilisation_pct,
    )


def capacity(
    per_cluster: Sequence[ModelCapacity],
    fleet: Sequence[FleetModel],
    npus: Sequence[NpuCapacity] = (),
    every_npu: Sequence[NpuCapacity] | None = None,
    pending_npus: Sequence[PendingNpus] = (),
) -> resources_pb2.Capacity:
    """The capacity answer; ``every_npu``: the federation's NPU rows, by which an NPU model is judged hot
    and congested (default: ``npus``, the federation's when no cluster is named)."""
    federation = npus if every_npu is None else every_npu
    hot, demand = hot_npu_models(federation), npu_demand(federation, pending_npus)
    out = resources_pb2.Capacity(
        npus=[npu_capacity(n, n.npu_model in hot, demand.get(n.npu_model, (0, 0))) for n in npus]
    )
    models: dict[str, list[int]] = {}
    for row in per_cluster:
        out.clusters.append(
            resources_pb2.ClusterModelCapacity(
                cluster=row.cluster,
                gpu_model=row.gpu_model,
                total_milli=row.total_milli,
                healthy_milli=row.healthy_milli,
                free_milli=row.free_milli,
                allocated_milli=row.allocated_milli,
                nodes=row.nodes,
            )
        )
        sums = models.setdefault(row.gpu_model, [0, 0, 0])
        sums[0] += row.total_milli
        sums[1] += row.healthy_milli
        sums[2] += row.free_milli
    by_model = {row.gpu_model: row for row in fleet}
    for model in sorted(set(models) | set(by_model)):
        total, healthy, free = models.get(model, [0, 0, 0])
        f = by_model.get(model)
        out.models.append(
            resources_pb2.ModelCapacity(
                gpu_model=model,
                total_milli=total,
                healthy_milli=healthy,
                free_milli=free,
                pending_milli=f.pending_milli if f else 0,
                congestion_milli=f.congestion_milli if f else 0,
                hot=f.hot if f else False,
            )
        )
    return out


def queue_quota(row: QueueQuota) -> quota_pb2.QueueQuota:
    lines = []
    for u in row.usage:
        line = quota_pb2.QuotaUsageLine(
            resource=u.resource,
            gpu_model=u.gpu_model or "",
            used=u.used,
            guaranteed=u.guaranteed,
            borrowed=u.borrowed,
        )
        if u.limit is not None:
            line.limit = u.limit
        lines.append(line)
    return quota_pb2.QueueQuota(
        tenant=row.tenant,
        queue=row.queue,
        lines=lines,
        gpu_hours_milli=row.gpu_hours_milli,
        running_jobs=row.running_jobs,
        npu_hours_milli=row.npu_hours_milli,
    )
