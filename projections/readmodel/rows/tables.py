"""The read models' tables: the schema they live in by default, each table's name, columns and indexes,
and their DDL. Plain data, no I/O, cheap to import (the CLI takes ``SCHEMA`` for its flags' defaults).

Called by ``projections.readmodel.rows.entities`` (the column order its converters fill), the writer
(the DDL it runs, the tables it replaces rows in), the reader (the tables it queries) and the
composition roots (``SCHEMA``). No module outside ``projections.readmodel`` names a table or the schema:
``tests/unit/test_sql_lives_in_stores.py`` keeps it so.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA = "fedsched_rm"
"""The schema of the read models unless a host or a reader is given another."""
REBUILD_SCHEMA = f"{SCHEMA}_rebuild"
"""Where ``fedsched projections rebuild`` replays the log by default, to compare with ``SCHEMA``."""

POSITIONS = "projection_positions"
"""The log positions the rows cover (topic, partition, next offset), written with them."""
STATE = "projection_state"
"""The entities behind the rows (in the stage codec's format, by stage and key), so a restarted host resumes."""


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, SQL type), entity_key first
    indexes: tuple[tuple[str, str], ...] = ()
    """(name suffix, what follows ``ON table``) of the indexes the reader's queries read by."""

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


def bookkeeping_ddl(schema: str) -> str:
    """The positions and entity-state tables of a schema."""
    return f"""
        CREATE TABLE IF NOT EXISTS {schema}.{POSITIONS} (
            topic text NOT NULL, partition int NOT NULL, next_offset bigint NOT NULL,
            PRIMARY KEY (topic, partition));
        CREATE TABLE IF NOT EXISTS {schema}.{STATE} (
            stage text NOT NULL, entity_key text NOT NULL, state bytea NOT NULL,
            PRIMARY KEY (stage, entity_key));
        """


# ListJobs pages by (submission time, id), newest first, over a tenant's jobs or everyone's, optionally
# of some statuses: without these, each page sorted the whole history (38 ms at 300,000 jobs, growing).
JOB_ORDER = "(coalesce(submitted_ms, 0)) DESC, entity_key DESC"
_JOB_INDEXES = (
    ("by_time", f"({JOB_ORDER}) WHERE NOT orphan"),
    ("by_tenant", f"(tenant, {JOB_ORDER}) WHERE NOT orphan"),
    ("by_tenant_status", f"(tenant, status, {JOB_ORDER}) WHERE NOT orphan"),
    # Only waiting jobs have a pending reason: a small index, for the listing of one category of waits.
    ("by_pending_reason", f"(pending_reason, {JOB_ORDER}) WHERE NOT orphan AND pending_reason IS NOT NULL"),
)

JOBS = Table(
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
        # While it waits (NULL otherwise): its wait's category, its places and when it may start.
        ("pending_reason", "text"),
        ("federation_position", "int"),
        ("tenant_queue_position", "int"),
        ("estimated_start_ms", "bigint"),
        # The runtime it was submitted with, expected and at most (seconds; NULL: none given).
        ("expected_runtime_s", "bigint"),
        ("max_runtime_s", "bigint"),
        ("retries", "int"),  # runs that failed and were retried (``runs`` counts every attempt)
        ("npus", "int"),  # whole NPUs per replica, as gpu_milli is GPU per replica
        ("npu_models", "text"),  # the NPU models it accepts, comma-separated ('': any)
        # A spread inference service (spread_clusters above 1): the clusters its run holds replicas in now,
        # in the order its parts opened, and each part as [cluster, replicas, opened, ended, reason, ended at].
        ("clusters", "text[]"),
        ("parts", "jsonb"),
        ("spread_clusters", "int"),
    ),
    _JOB_INDEXES,
)
NODES = Table(
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
        ("npus", "int"),
        ("npu_model", "text"),
        ("npus_free", "int"),
        ("npus_healthy", "int"),
        ("npus_degraded", "int"),
        ("npu_utilisation_pct", "int"),
    ),
)
CLUSTERS = Table(
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
)
QUOTA = Table(
    "read_quota",
    (
        ("entity_key", "text NOT NULL"),
        ("tenant", "text"),
        ("queue", "text"),
        ("usage", "jsonb"),
        ("gpu_hours_milli", "bigint"),
        ("running_jobs", "int"),
        ("npu_hours_milli", "bigint"),
    ),
)
USAGE = Table(
    "read_usage",
    (
        ("entity_key", "text NOT NULL"),
        ("tenant", "text"),
        ("cluster", "text"),
        ("gpu_model", "text"),
        ("hour_ms", "bigint"),
        ("kind", "text"),
        ("allocated_milli_ms", "bigint"),
        ("used_milli_ms", "bigint"),
        ("idle_milli_ms", "bigint"),
        ("cost_micro", "bigint"),
        ("currency", "text"),
        ("projects", "jsonb"),
        ("samples", "int"),
    ),
)
SHAPES = Table(
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
)
FLEET = Table(
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
)

DOCUMENTS = Table(
    "read_documents",
    (
        ("entity_key", "text NOT NULL"),
        ("kind", "text"),
        ("name", "text"),
        ("tenant", "text"),
        ("generation", "bigint"),
        ("body", "jsonb"),
        ("author", "text"),
        ("changed_ms", "bigint"),
        ("deleted", "boolean"),
    ),
)

ALL = (JOBS, NODES, CLUSTERS, QUOTA, USAGE, SHAPES, FLEET, DOCUMENTS)
"""Every read-model table (the bookkeeping ones aside), in the order their checksums are listed."""
