"""Read-model rows: each stage's entity as rows of its PostgreSQL table. Pure converters.

Called by the sinks (``projections.readmodel.writer``, the faust host's). Calls nothing with I/O; the
tables themselves (names, columns, indexes) are ``projections.readmodel.rows.tables``. Every table has an
``entity_key`` column (the stage's key); the sink replaces all rows of a changed entity at once, so an
entity may map to several rows (the fleet has one per GPU model). Columns are plain values or JSON text,
in the table's column order.

A row says what the log says, whatever order its partitions were read in, so a rebuild equals the live
tables. How many versions of a profile were published is not such a fact (it depends on which
intermediate states a host went through): versions live in the published events, not here. (Tables made
before kept a ``version`` column; it is left empty.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from projections.readmodel.rows import tables
from projections.stages.clusters import ClusterView
from projections.stages.documents import DocumentView
from projections.stages.fleet import FleetState
from projections.stages.jobs import JobView
from projections.stages.nodes import NodeProfile, degraded_npus, healthy_npus, profile_facts
from projections.stages.quota import QueueQuota, running_jobs, usage_facts
from projections.stages.shapes import ShapeCount
from projections.stages.usage import UsageBucket

Row = tuple[Any, ...]


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Table(tables.Table):
    """A read-model table with the pure converter of its stage's entities to rows, in column order."""

    rows: Callable[[str, Any], Sequence[Row]] = field(kw_only=True)


def _converted(table: tables.Table, rows: Callable[[str, Any], Sequence[Row]]) -> Table:
    return Table(table.name, table.columns, table.indexes, rows=rows)


def _job_rows(key: str, job: JobView) -> Sequence[Row]:
    placement = [
        [s.node, list(s.gpu_indices), s.gpu_milli_each, list(s.npu_indices), s.cluster or job.cluster, s.replica]
        for s in job.placement
    ]
    parts = [[p.cluster, p.replicas, p.opened_ms, p.ended, p.reason, p.ended_ms] for p in job.parts]
    timeline = [[e.time_ms, e.status, e.event, e.reason, e.message] for e in job.timeline]
    return [
        (
            key,
            job.tenant,
            job.project,
            job.queue,
            job.name,
            job.kind,
            job.priority_class,
            job.status,
            job.orphan,
            job.cluster,
            job.replicas,
            job.gpu_milli,
            job.submitted_ms,
            job.placed_ms,
            job.started_ms,
            job.ended_ms,
            job.waiting_ms,
            job.run,
            job.runs,
            job.preemptions,
            job.last_reason,
            job.last_message,
            _json(placement),
            _json(timeline),
            job.last_decision_type,
            job.last_decision or None,
            job.queued_since_ms,
            job.wait.pending_reason,
            job.wait.federation_position,
            job.wait.tenant_queue_position,
            job.wait.estimated_start_ms,
            job.expected_runtime_s,
            job.max_runtime_s,
            job.retries,
            job.npus,
            ",".join(job.npu_models),
            list(job.clusters),
            _json(parts),
            job.spread_clusters,
        )
    ]


def _node_rows(key: str, node: NodeProfile) -> Sequence[Row]:
    capacity, allocated, free, _, health, stability, fit_training, fit_inference, _ = profile_facts(node)
    model = node.gpus[0].model if node.gpus else None
    return [
        (
            key,
            node.cluster,
            node.node,
            node.present,
            node.schedulable,
            node.generation,
            model,
            len(node.gpus),
            node.cpu_milli,
            node.memory_mib,
            capacity[2],
            allocated[2],
            free[2],
            health,
            node.failures,
            stability,
            fit_training,
            fit_inference,
            node.gpu_utilisation_pct,
            len(node.allocations),
            node.last_seen_ms,
            capacity[3],
            node.npu_model or None,
            free[3],
            healthy_npus(node),
            degraded_npus(node),
            node.npu_utilisation_pct if node.npus_measured else None,
        )
    ]


def _cluster_rows(key: str, cluster: ClusterView) -> Sequence[Row]:
    return [
        (
            key,
            cluster.registered,
            cluster.kind,
            cluster.site,
            cluster.region,
            cluster.status,
            cluster.status_reason,
            cluster.currency,
            _json([list(rate) for rate in cluster.rates]),
            _json(list(cluster.datasets)),
        )
    ]


def _quota_rows(key: str, quota: QueueQuota) -> Sequence[Row]:
    lines, gpu_hours_milli, _, npu_hours_milli = usage_facts(quota)
    usage = [
        {"resource": r, "gpu_model": m, "used": u, "guaranteed": g, "limit": limit, "borrowed": b}
        for r, m, u, g, limit, b in lines
    ]  # what the published QuotaUsage lines say, as JSON
    return [(key, quota.tenant, quota.queue, _json(usage), gpu_hours_milli, running_jobs(quota), npu_hours_milli)]


def _usage_rows(key: str, bucket: UsageBucket) -> Sequence[Row]:
    return [
        (
            key,
            bucket.tenant,
            bucket.cluster,
            bucket.gpu_model,
            bucket.hour_ms,
            bucket.kind,
            bucket.allocated_milli_ms,
            bucket.used_milli_ms,
            bucket.idle_milli_ms,
            bucket.cost_micro,
            bucket.currency,
            _json([list(p) for p in bucket.projects]),
            bucket.samples,
        )
    ]


def _shape_rows(key: str, shape: ShapeCount) -> Sequence[Row]:
    return [(key, shape.cpu_milli, shape.memory_mib, shape.gpu_milli, shape.gpu_model, shape.count, shape.replicas)]


def _fleet_rows(key: str, fleet: FleetState) -> Sequence[Row]:
    congestion = fleet.congestion()
    hot = set(fleet.hot_models())
    return [
        (key, model, capacity, free, fleet.demand(model), congestion[model], model in hot)
        for model, (capacity, free) in sorted(fleet.per_model().items())
    ]


def _document_rows(key: str, view: DocumentView) -> Sequence[Row]:
    body = view.body or None
    return [(key, view.kind, view.name, view.tenant, view.generation, body, view.author, view.changed_ms, view.deleted)]


TABLES: dict[str, Table] = {
    "jobs": _converted(tables.JOBS, _job_rows),
    "nodes": _converted(tables.NODES, _node_rows),
    "clusters": _converted(tables.CLUSTERS, _cluster_rows),
    "quota": _converted(tables.QUOTA, _quota_rows),
    "usage": _converted(tables.USAGE, _usage_rows),
    "shapes": _converted(tables.SHAPES, _shape_rows),
    "fleet": _converted(tables.FLEET, _fleet_rows),
    "documents": _converted(tables.DOCUMENTS, _document_rows),
}
"""Each stage's table, by stage name."""
