"""Database records as the reader's typed rows (``projections.readmodel.rows.typed``). Pure.

Called by ``projections.readmodel.reader`` with what asyncpg returns; a record has at least the columns
its row needs. JSON columns arrive as text and are parsed here; a NULL becomes the entity's default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from events.catalog.types import ClusterId, JobId, TenantId
from projections.readmodel.rows.typed import (
    ClusterAllocation,
    ClusterSummary,
    DocumentRow,
    FleetModel,
    HeldRun,
    JobHistory,
    JobOutcome,
    JobRow,
    JobSummary,
    ModelCapacity,
    NodeRow,
    NpuCapacity,
    PendingNpus,
    ProjectShare,
    QueueQuota,
    QuotaUsage,
    RunPart,
    Slot,
    TimelineEntry,
    UsageHour,
)


class Record(Protocol):
    """What a row needs of a database record: its columns by name (asyncpg's ``Record``, or a mapping)."""

    def __getitem__(self, name: str, /) -> Any: ...


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _text(r: Record, name: str) -> str:
    return str(r[name] or "")


def _int(r: Record, name: str) -> int:
    return int(r[name] or 0)


def _maybe_int(r: Record, name: str) -> int | None:
    return None if r[name] is None else int(r[name])


def slots(value: Any) -> tuple[Slot, ...]:
    """A placement's replicas: ``[node, gpu indices, milli each, npu indices, cluster, replica]`` (rows
    written before NPUs were kept have no fourth entry, before replicas said their cluster and number no
    fifth and sixth)."""
    return tuple(
        Slot(
            str(node),
            tuple(int(g) for g in gpus),
            int(each),
            tuple(int(u) for u in (rest[0] if rest else ())),
            str(rest[1] or "") if len(rest) > 1 else "",
            int(rest[2]) if len(rest) > 2 else None,
        )
        for node, gpus, each, *rest in _json(value) or ()
    )


def parts(value: Any) -> tuple[RunPart, ...]:
    """A spread run's parts: ``[cluster, replicas, opened ms, ended, reason, ended ms]`` each."""
    return tuple(
        RunPart(str(cluster), int(n), int(opened), str(ended or ""), str(reason or ""), None if at is None else int(at))
        for cluster, n, opened, ended, reason, at in _json(value) or ()
    )


def timeline(value: Any) -> tuple[TimelineEntry, ...]:
    return tuple(
        TimelineEntry(int(t), str(status), str(event), str(reason or ""), str(message or ""))
        for t, status, event, reason, message in _json(value) or ()
    )


def _summary_fields(r: Record) -> dict[str, Any]:
    cluster = r["cluster"]
    return {
        "job_id": JobId(r["entity_key"]),
        "tenant": TenantId(_text(r, "tenant")),
        "project": _text(r, "project"),
        "queue": _text(r, "queue"),
        "name": _text(r, "name"),
        "kind": _text(r, "kind"),
        "priority_class": _text(r, "priority_class"),
        "status": _text(r, "status"),
        "cluster": None if cluster is None else ClusterId(cluster),
        "replicas": _int(r, "replicas"),
        "gpu_milli": _int(r, "gpu_milli"),
        "npus": _int(r, "npus"),
        "npu_models": _text(r, "npu_models"),
        "submitted_ms": _maybe_int(r, "submitted_ms"),
        "placed_ms": _maybe_int(r, "placed_ms"),
        "started_ms": _maybe_int(r, "started_ms"),
        "ended_ms": _maybe_int(r, "ended_ms"),
        "waiting_ms": _int(r, "waiting_ms"),
        "queued_since_ms": _maybe_int(r, "queued_since_ms"),
        "run": _int(r, "run"),
        "runs": _int(r, "runs"),
        "preemptions": _int(r, "preemptions"),
        "last_reason": _text(r, "last_reason"),
        "last_message": _text(r, "last_message"),
        "placement": slots(r["placement"]),
        "last_decision_type": _text(r, "last_decision_type"),
        "pending_reason": r["pending_reason"],
        "federation_position": _maybe_int(r, "federation_position"),
        "tenant_queue_position": _maybe_int(r, "tenant_queue_position"),
        "estimated_start_ms": _maybe_int(r, "estimated_start_ms"),
        "expected_runtime_s": _maybe_int(r, "expected_runtime_s"),
        "max_runtime_s": _maybe_int(r, "max_runtime_s"),
        "retries": _int(r, "retries"),
        "clusters": tuple(str(c) for c in r["clusters"] or ()),
        "parts": parts(r["parts"]),
        "spread_clusters": _int(r, "spread_clusters") or 1,
    }


def job_summary(r: Record) -> JobSummary:
    return JobSummary(**_summary_fields(r))


def job_row(r: Record) -> JobRow:
    return JobRow(
        **_summary_fields(r),
        orphan=bool(r["orphan"]),
        timeline=timeline(r["timeline"]),
        last_decision=_json(r["last_decision"]),
    )


def job_history(r: Record) -> JobHistory:
    return JobHistory(
        JobId(r["entity_key"]),
        TenantId(_text(r, "tenant")),
        _text(r, "project"),
        _text(r, "kind"),
        _text(r, "priority_class"),
        _text(r, "status"),
        _maybe_int(r, "submitted_ms"),
        _maybe_int(r, "placed_ms"),
        _int(r, "waiting_ms"),
        timeline(r["timeline"]),
    )


def held_run(r: Record) -> HeldRun:
    return HeldRun(
        TenantId(_text(r, "tenant")),
        _text(r, "project"),
        ClusterId(_text(r, "cluster")),
        r["gpu_model"],
        int(r["placed_ms"]),
        slots(r["placement"]),
        _maybe_int(r, "expected_runtime_s"),
        _maybe_int(r, "max_runtime_s"),
        r["npu_model"] or None,
        tuple((gpu or None, npu or None) for gpu, npu in _json(r["slot_models"]) or ()),
        parts(r["parts"]),
    )


def job_outcome(r: Record) -> JobOutcome:
    return JobOutcome(
        _text(r, "status"), _int(r, "runs"), _int(r, "preemptions"), _text(r, "last_reason"), _text(r, "last_message")
    )


def cluster_summary(r: Record) -> ClusterSummary:
    return ClusterSummary(
        cluster=ClusterId(r["cluster"]),
        registered=bool(r["registered"]),
        kind=_text(r, "kind"),
        site=_text(r, "site"),
        region=_text(r, "region"),
        status=_text(r, "status"),
        status_reason=_text(r, "status_reason"),
        nodes=_int(r, "nodes"),
        gpus=_int(r, "gpus"),
        gpu_capacity_milli=_int(r, "gpu_capacity_milli"),
        gpu_free_milli=_int(r, "gpu_free_milli"),
    )


def node_row(r: Record) -> NodeRow:
    return NodeRow(
        cluster=ClusterId(_text(r, "cluster")),
        node=_text(r, "node"),
        present=bool(r["present"]),
        schedulable=bool(r["schedulable"]),
        gpu_model=_text(r, "gpu_model"),
        gpus=_int(r, "gpus"),
        cpu_milli=_int(r, "cpu_milli"),
        memory_mib=_int(r, "memory_mib"),
        gpu_capacity_milli=_int(r, "gpu_capacity_milli"),
        gpu_allocated_milli=_int(r, "gpu_allocated_milli"),
        gpu_free_milli=_int(r, "gpu_free_milli"),
        health_milli=_int(r, "health_milli"),
        failures=_int(r, "failures"),
        gpu_utilisation_pct=_int(r, "gpu_utilisation_pct"),
        jobs=_int(r, "jobs"),
        last_seen_ms=_int(r, "last_seen_ms"),
        npus=_int(r, "npus"),
        npu_model=_text(r, "npu_model"),
        npus_free=_int(r, "npus_free"),
        npus_healthy=_int(r, "npus_healthy"),
        npus_degraded=_int(r, "npus_degraded"),
        npu_utilisation_pct=_maybe_int(r, "npu_utilisation_pct"),
    )


def model_capacity(r: Record) -> ModelCapacity:
    return ModelCapacity(
        cluster=ClusterId(r["cluster"]),
        gpu_model=_text(r, "gpu_model"),
        nodes=_int(r, "nodes"),
        total_milli=_int(r, "total_milli"),
        healthy_milli=_int(r, "healthy_milli"),
        free_milli=_int(r, "free_milli"),
        allocated_milli=_int(r, "allocated_milli"),
    )


def npu_capacity(r: Record) -> NpuCapacity:
    return NpuCapacity(
        cluster=ClusterId(r["cluster"]),
        npu_model=_text(r, "npu_model"),
        nodes=_int(r, "nodes"),
        total=_int(r, "total"),
        healthy=_int(r, "healthy"),
        degraded=_int(r, "degraded"),
        failed=_int(r, "failed"),
        free=_int(r, "free"),
        unheld=_int(r, "unheld"),
    )


def pending_npus(r: Record) -> PendingNpus:
    return PendingNpus(tuple(m for m in _text(r, "npu_models").split(",") if m), _int(r, "each"), _int(r, "jobs"))


def cluster_allocation(r: Record) -> ClusterAllocation:
    return ClusterAllocation(ClusterId(_text(r, "cluster")), _int(r, "capacity_milli"), _int(r, "allocated_milli"))


def fleet_model(r: Record) -> FleetModel:
    return FleetModel(
        gpu_model=_text(r, "gpu_model"),
        capacity_milli=_int(r, "capacity_milli"),
        free_milli=_int(r, "free_milli"),
        pending_milli=_int(r, "pending_milli"),
        congestion_milli=_int(r, "congestion_milli"),
        hot=bool(r["hot"]),
    )


def _quota_usage(line: Mapping[str, Any]) -> QuotaUsage:
    limit = line.get("limit")
    return QuotaUsage(
        str(line["resource"]),
        line.get("gpu_model") or None,
        int(line.get("used") or 0),
        int(line.get("guaranteed") or 0),
        None if limit is None else int(limit),
        int(line.get("borrowed") or 0),
    )


def queue_quota(r: Record) -> QueueQuota:
    return QueueQuota(
        TenantId(_text(r, "tenant")),
        _text(r, "queue"),
        tuple(_quota_usage(line) for line in _json(r["usage"]) or ()),
        _int(r, "gpu_hours_milli"),
        _int(r, "running_jobs"),
        _int(r, "npu_hours_milli"),
    )


def usage_hour(r: Record) -> UsageHour:
    return UsageHour(
        tenant=TenantId(_text(r, "tenant")),
        cluster=ClusterId(_text(r, "cluster")),
        gpu_model=_text(r, "gpu_model"),
        hour_ms=int(r["hour_ms"]),
        allocated_milli_ms=_int(r, "allocated_milli_ms"),
        used_milli_ms=_int(r, "used_milli_ms"),
        idle_milli_ms=_int(r, "idle_milli_ms"),
        cost_micro=_int(r, "cost_micro"),
        currency=_text(r, "currency"),
        projects=tuple(ProjectShare(str(p), int(a), int(c)) for p, a, c in _json(r["projects"]) or ()),
        kind=_text(r, "kind") or "gpu",
        samples=_int(r, "samples"),
    )


def document_row(r: Record) -> DocumentRow:
    body = _json(r["body"])
    return DocumentRow(
        kind=_text(r, "kind"),
        name=_text(r, "name"),
        tenant=_text(r, "tenant"),
        generation=_int(r, "generation"),
        body=body if isinstance(body, dict) else None,
        author=_text(r, "author"),
        changed_ms=_int(r, "changed_ms"),
        deleted=bool(r["deleted"]),
    )
