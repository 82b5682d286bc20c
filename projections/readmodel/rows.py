"""Read-model rows: each stage's entity as rows of its PostgreSQL table. Pure converters.

Called by ``projections.readmodel.writer`` (the sink). Every table has an ``entity_key`` column (the stage's
key); the sink replaces all rows of a changed entity at once, so an entity may map to several rows
(the fleet has one per GPU model). Columns are plain values or JSON text, in a fixed order.

A row says what the log says, whatever order its partitions were read in, so a rebuild equals the live
tables. How many versions of a profile were published is not such a fact (it depends on which
intermediate states a host went through): versions live in the published events, not here. (Tables made
before kept a ``version`` column; it is left empty.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from projections.stages.clusters import ClusterView
from projections.stages.fleet import FleetState
from projections.stages.jobs import JobView
from projections.stages.nodes import NodeProfile, profile_facts
from projections.stages.quota import QueueQuota, usage_facts
from projections.stages.shapes import ShapeCount
from projections.stages.usage import UsageBucket

Row = tuple[Any, ...]


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, SQL type), entity_key first
    rows: Callable[[str, Any], Sequence[Row]]
    indexes: tuple[tuple[str, str], ...] = ()
    """(name suffix, what follows ``ON table``) of the indexes the API's queries read by."""

    def ddl(self, schema: str) -> str:
        cols = ",\n    ".join(f"{name} {sql}" for name, sql in self.columns)
        return (
            f"CREATE TABLE IF NOT EXISTS {schema}.{self.name} (\n    {cols}\n);\n"
            f"CREATE INDEX IF NOT EXISTS {self.name}_entity ON {schema}.{self.name} (entity_key);"
        )

    def index_ddl(self, schema: str) -> list[tuple[str, str]]:
        """(qualified index name, its DDL) per index."""
        return [
            (
                f"{schema}.{self.name}_{suffix}",
                f"CREATE INDEX IF NOT EXISTS {self.name}_{suffix} ON {schema}.{self.name} {on}",
            )
            for suffix, on in self.indexes
        ]


# ListJobs pages by (submission time, id), newest first, over a tenant's jobs or everyone's, optionally
# of some statuses: without these, each page sorted the whole history (38 ms at 300,000 jobs, growing).
_JOB_ORDER = "(coalesce(submitted_ms, 0)) DESC, entity_key DESC"
_JOB_INDEXES = (
    ("by_time", f"({_JOB_ORDER}) WHERE NOT orphan"),
    ("by_tenant", f"(tenant, {_JOB_ORDER}) WHERE NOT orphan"),
    ("by_tenant_status", f"(tenant, status, {_JOB_ORDER}) WHERE NOT orphan"),
)


def _job_rows(key: str, job: JobView) -> Sequence[Row]:
    placement = [[s.node, list(s.gpu_indices), s.gpu_milli_each] for s in job.placement]
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
    lines, gpu_hours_milli, _ = usage_facts(quota)
    usage = [
        {"resource": r, "gpu_model": m, "used": u, "guaranteed": g, "limit": limit, "borrowed": b}
        for r, m, u, g, limit, b in lines
    ]  # what the published QuotaUsage lines say, as JSON
    return [(key, quota.tenant, quota.queue, _json(usage), gpu_hours_milli, len(quota.holdings))]


def _usage_rows(key: str, bucket: UsageBucket) -> Sequence[Row]:
    return [
        (
            key,
            bucket.tenant,
            bucket.cluster,
            bucket.gpu_model,
            bucket.hour_ms,
            bucket.allocated_milli_ms,
            bucket.used_milli_ms,
            bucket.idle_milli_ms,
            bucket.cost_micro,
            bucket.currency,
            _json([list(p) for p in bucket.projects]),
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


TABLES: dict[str, Table] = {
    "jobs": Table(
        "read_jobs",
        (
            ("entity_key", "text NOT NULL"),
            ("tenant", "text"),
            ("project", "text"),
            ("queue", "text"),
            ("name", "text"),
            ("kind", "text"),
            ("priority_class", "text"),
            ("status", "text"),
            ("orphan", "boolean"),
            ("cluster", "text"),
            ("replicas", "int"),
            ("gpu_milli", "bigint"),
            ("submitted_ms", "bigint"),
            ("placed_ms", "bigint"),
            ("started_ms", "bigint"),
            ("ended_ms", "bigint"),
            ("waiting_ms", "bigint"),
            ("run", "int"),
            ("runs", "int"),
            ("preemptions", "int"),
            ("last_reason", "text"),
            ("last_message", "text"),
            ("placement", "jsonb"),
            ("timeline", "jsonb"),
            ("last_decision_type", "text"),
            ("last_decision", "jsonb"),
            ("queued_since_ms", "bigint"),  # a waiting job's wait so far is ``waiting_ms`` plus the time since
        ),
        _job_rows,
        _JOB_INDEXES,
    ),
    "nodes": Table(
        "read_nodes",
        (
            ("entity_key", "text NOT NULL"),
            ("cluster", "text"),
            ("node", "text"),
            ("present", "boolean"),
            ("schedulable", "boolean"),
            ("generation", "bigint"),
            ("gpu_model", "text"),
            ("gpus", "int"),
            ("cpu_milli", "bigint"),
            ("memory_mib", "bigint"),
            ("gpu_capacity_milli", "bigint"),
            ("gpu_allocated_milli", "bigint"),
            ("gpu_free_milli", "bigint"),
            ("health_milli", "int"),
            ("failures", "int"),
            ("failures_per_kgpu_hour_milli", "bigint"),
            ("fit_training", "boolean"),
            ("fit_inference", "boolean"),
            ("gpu_utilisation_pct", "int"),
            ("jobs", "int"),
            ("last_seen_ms", "bigint"),
        ),
        _node_rows,
    ),
    "clusters": Table(
        "read_clusters",
        (
            ("entity_key", "text NOT NULL"),
            ("registered", "boolean"),
            ("kind", "text"),
            ("site", "text"),
            ("region", "text"),
            ("status", "text"),
            ("status_reason", "text"),
            ("currency", "text"),
            ("rates", "jsonb"),
            ("datasets", "jsonb"),
        ),
        _cluster_rows,
    ),
    "quota": Table(
        "read_quota",
        (
            ("entity_key", "text NOT NULL"),
            ("tenant", "text"),
            ("queue", "text"),
            ("usage", "jsonb"),
            ("gpu_hours_milli", "bigint"),
            ("running_jobs", "int"),
        ),
        _quota_rows,
    ),
    "usage": Table(
        "read_usage",
        (
            ("entity_key", "text NOT NULL"),
            ("tenant", "text"),
            ("cluster", "text"),
            ("gpu_model", "text"),
            ("hour_ms", "bigint"),
            ("allocated_milli_ms", "bigint"),
            ("used_milli_ms", "bigint"),
            ("idle_milli_ms", "bigint"),
            ("cost_micro", "bigint"),
            ("currency", "text"),
            ("projects", "jsonb"),
        ),
        _usage_rows,
    ),
    "shapes": Table(
        "read_shapes",
        (
            ("entity_key", "text NOT NULL"),
            ("cpu_milli", "bigint"),
            ("memory_mib", "bigint"),
            ("gpu_milli", "bigint"),
            ("gpu_model", "text"),
            ("count", "bigint"),
            ("replicas", "bigint"),
        ),
        _shape_rows,
    ),
    "fleet": Table(
        "read_fleet_models",
        (
            ("entity_key", "text NOT NULL"),
            ("gpu_model", "text"),
            ("capacity_milli", "bigint"),
            ("free_milli", "bigint"),
            ("pending_milli", "bigint"),
            ("congestion_milli", "bigint"),
            ("hot", "boolean"),
        ),
        _fleet_rows,
    ),
}
