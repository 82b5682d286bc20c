"""Reads of the PostgreSQL read models: one method per question the API, governance's report, the demo
and the CLI ask, each answered with typed rows (``projections.readmodel.rows.typed``).

Called by the API's servicers and commands, ``services.governance.report``, ``services.runtime.demo``
and ``fedsched projections rebuild`` (through ``writer.checksums``). Calls asyncpg, on the tables of
``projections.readmodel.rows.tables`` that ``projections.readmodel.writer`` fills. The only SQL that reads
them lives here.

Tenant scoping is applied in SQL (``tenants``: the tenants a caller may see, ``None`` for all), so a
query never returns rows of a tenant outside the caller's scope. Lists page by keyset (the last row's
sort key, ``after``), never by offset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import asyncpg

from projections.readmodel.rows import from_records as parse
from projections.readmodel.rows.tables import (
    ALL,
    CLUSTERS,
    DOCUMENTS,
    FLEET,
    JOB_ORDER,
    JOBS,
    NODES,
    POSITIONS,
    QUOTA,
    SCHEMA,
    USAGE,
)
from projections.readmodel.rows.typed import (
    ClusterAllocation,
    ClusterSummary,
    DocumentRow,
    FleetModel,
    HeldRun,
    JobFilter,
    JobHistory,
    JobOutcome,
    JobRow,
    JobSummary,
    ModelCapacity,
    NodeRow,
    NpuCapacity,
    PendingNpus,
    Positions,
    QueueQuota,
    UsageHour,
)

_SUMMARY_COLUMNS = (
    "entity_key, tenant, project, queue, name, kind, priority_class, status, cluster, replicas, gpu_milli,"
    " submitted_ms, placed_ms, started_ms, ended_ms, waiting_ms, run, runs, preemptions, last_reason,"
    " last_message, placement, last_decision_type, queued_since_ms, pending_reason, federation_position,"
    " tenant_queue_position, estimated_start_ms, expected_runtime_s, max_runtime_s, retries, npus, npu_models,"
    " clusters, parts, spread_clusters"
)


class ReadModels:
    def __init__(self, pool: asyncpg.Pool, schema: str = SCHEMA) -> None:
        self._pool = pool
        self.schema = schema
        s = schema
        self._jobs, self._nodes, self._clusters = f"{s}.{JOBS.name}", f"{s}.{NODES.name}", f"{s}.{CLUSTERS.name}"
        self._quota, self._usage, self._fleet = f"{s}.{QUOTA.name}", f"{s}.{USAGE.name}", f"{s}.{FLEET.name}"
        self._positions = f"{s}.{POSITIONS}"
        self._documents = f"{s}.{DOCUMENTS.name}"

    async def ping(self) -> None:
        """A round trip to the database (the health probe's)."""
        await self._pool.fetchval("SELECT 1")

    # -- jobs ---------------------------------------------------------------------------------------------

    async def job(self, job_id: str) -> JobRow | None:
        record = await self._pool.fetchrow(f"SELECT * FROM {self._jobs} WHERE entity_key = $1", job_id)
        return None if record is None else parse.job_row(record)

    async def job_and_positions(self, job_id: str) -> tuple[JobRow | None, Positions]:
        """The job's row and the log positions it reflects, from one snapshot (the projections write both
        in one transaction): events at or after those positions are not in the row yet."""
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            record = await conn.fetchrow(f"SELECT * FROM {self._jobs} WHERE entity_key = $1", job_id)
            rows = await conn.fetch(f"SELECT topic, partition, next_offset FROM {self._positions}")
        positions = {(r["topic"], r["partition"]): int(r["next_offset"]) for r in rows}
        return (None if record is None else parse.job_row(record)), positions

    async def jobs(
        self, where: JobFilter, tenants: Sequence[str] | None, limit: int, after: tuple[int, str] | None
    ) -> list[JobSummary]:
        """Jobs newest first (submission time, then id), submitted ones only; ``after``: the
        (submission time or 0, id) of the previous page's last job."""
        clauses = ["NOT orphan"]
        args: list[Any] = []

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        if tenants is not None:
            clauses.append(f"tenant = ANY({arg(list(tenants))}::text[])")
        for column in ("tenant", "project", "queue", "priority_class"):
            value = getattr(where, column)
            if value:
                clauses.append(f"{column} = {arg(value)}")
        if where.cluster:  # its run's first cluster, or any other its run holds replicas in (a spread service)
            at = arg(where.cluster)
            clauses.append(f"(cluster = {at} OR {at} = ANY(clusters))")
        if where.statuses:
            clauses.append(f"status = ANY({arg(list(where.statuses))}::text[])")
        if where.pending_reasons:
            clauses.append(f"pending_reason = ANY({arg(list(where.pending_reasons))}::text[])")
        if after is not None:
            clauses.append(f"(coalesce(submitted_ms, 0), entity_key) < ({arg(after[0])}, {arg(after[1])})")
        sql = (
            f"SELECT {_SUMMARY_COLUMNS} FROM {self._jobs} WHERE {' AND '.join(clauses)}"
            f" ORDER BY {JOB_ORDER} LIMIT {arg(limit)}"  # the order of the jobs table's indexes
        )
        return [parse.job_summary(r) for r in await self._pool.fetch(sql, *args)]

    async def job_histories(self, tenants: Sequence[str] | None = None) -> list[JobHistory]:
        """Every submitted job (of ``tenants`` only, when given), with its timeline."""
        sql = (
            f"SELECT entity_key, tenant, project, kind, priority_class, status, submitted_ms, placed_ms, waiting_ms,"
            f" timeline FROM {self._jobs} WHERE NOT coalesce(orphan, false)"
            f" AND ($1::text[] IS NULL OR tenant = ANY($1::text[]))"
        )
        return [parse.job_history(r) for r in await self._pool.fetch(sql, _scope(tenants))]

    async def held_runs(self, tenants: Sequence[str] | None = None) -> list[HeldRun]:
        """Runs holding GPUs now (placed or running; of ``tenants`` only, when given), with the GPU and NPU
        models of their first replica's node and of each replica's node."""
        sql = (
            f"SELECT j.tenant, j.project, j.cluster, j.placed_ms, j.placement, n.gpu_model, n.npu_model,"
            f" j.expected_runtime_s,"
            f" j.max_runtime_s, j.parts,"
            f" (SELECT coalesce(jsonb_agg(jsonb_build_array(m.gpu_model, m.npu_model) ORDER BY s.ord), '[]'::jsonb)"
            f"  FROM jsonb_array_elements(j.placement) WITH ORDINALITY AS s(slot, ord)"
            f"  LEFT JOIN {self._nodes} m"
            f"  ON m.cluster = coalesce(s.slot ->> 4, j.cluster) AND m.node = s.slot ->> 0) AS slot_models"
            f" FROM {self._jobs} j LEFT JOIN {self._nodes} n"
            f" ON n.cluster = coalesce(j.placement -> 0 ->> 4, j.cluster) AND n.node = j.placement -> 0 ->> 0"
            f" WHERE j.status IN ('placed', 'running') AND j.placed_ms IS NOT NULL AND NOT coalesce(j.orphan, false)"
            f" AND ($1::text[] IS NULL OR j.tenant = ANY($1::text[]))"
        )
        return [parse.held_run(r) for r in await self._pool.fetch(sql, _scope(tenants))]

    async def job_outcomes(self) -> list[JobOutcome]:
        """Every job's status, runs, preemptions and last reason (orphans included)."""
        sql = f"SELECT status, runs, preemptions, last_reason, last_message FROM {self._jobs}"
        return [parse.job_outcome(r) for r in await self._pool.fetch(sql)]

    async def status_counts(self) -> dict[str, int]:
        """How many jobs have each status (orphans included)."""
        rows = await self._pool.fetch(f"SELECT status, count(*) AS n FROM {self._jobs} GROUP BY status")
        return {str(row["status"] or ""): int(row["n"]) for row in rows}

    async def latest_time_ms(self, tenants: Sequence[str] | None = None) -> int:
        """The latest event time the read models know of (of ``tenants``' jobs and usage only, when given):
        the latest job time, or just inside the latest usage hour; 0 when they know of none."""
        scoped = "($1::text[] IS NULL OR tenant = ANY($1::text[]))"
        value = await self._pool.fetchval(
            f"SELECT greatest((SELECT max(hour_ms) + 1 FROM {self._usage} WHERE {scoped}),"
            f" (SELECT max(greatest(submitted_ms, placed_ms, ended_ms)) FROM {self._jobs} WHERE {scoped}))",
            _scope(tenants),
        )
        return int(value or 0)

    # -- the fleet ----------------------------------------------------------------------------------------

    async def clusters(self) -> list[ClusterSummary]:
        """Every cluster registered or with present nodes, by name."""
        sql = f"""
            WITH n AS (
                SELECT cluster, count(*)::int AS nodes, coalesce(sum(gpus), 0)::bigint AS gpus,
                       coalesce(sum(gpu_capacity_milli), 0)::bigint AS gpu_capacity_milli,
                       coalesce(sum(CASE WHEN schedulable THEN gpu_free_milli ELSE 0 END), 0)::bigint AS gpu_free_milli
                FROM {self._nodes} WHERE present GROUP BY cluster)
            SELECT coalesce(c.entity_key, n.cluster) AS cluster, coalesce(c.registered, false) AS registered,
                   coalesce(c.kind, '') AS kind, coalesce(c.site, '') AS site, coalesce(c.region, '') AS region,
                   coalesce(c.status, 'unknown') AS status, coalesce(c.status_reason, '') AS status_reason,
                   coalesce(n.nodes, 0) AS nodes, coalesce(n.gpus, 0) AS gpus,
                   coalesce(n.gpu_capacity_milli, 0) AS gpu_capacity_milli,
                   coalesce(n.gpu_free_milli, 0) AS gpu_free_milli
            FROM {self._clusters} c FULL OUTER JOIN n ON n.cluster = c.entity_key
            ORDER BY 1"""
        return [parse.cluster_summary(r) for r in await self._pool.fetch(sql)]

    async def nodes(
        self, cluster: str | None, gpu_model: str | None, limit: int, after: tuple[str, str] | None
    ) -> list[NodeRow]:
        """Nodes by cluster and name; ``after``: the (cluster, node) of the previous page's last one."""
        clauses = ["true"]
        args: list[Any] = []
        if cluster:
            args.append(cluster)
            clauses.append(f"cluster = ${len(args)}")
        if gpu_model:
            args.append(gpu_model)
            clauses.append(f"gpu_model = ${len(args)}")
        if after is not None:
            args += [after[0], after[1]]
            clauses.append(f"(cluster, node) > (${len(args) - 1}, ${len(args)})")
        args.append(limit)
        sql = f"SELECT * FROM {self._nodes} WHERE {' AND '.join(clauses)} ORDER BY cluster, node LIMIT ${len(args)}"
        return [parse.node_row(r) for r in await self._pool.fetch(sql, *args)]

    async def capacity(self, cluster: str | None) -> list[ModelCapacity]:
        """Each cluster's capacity per GPU model (one cluster's if named)."""
        sql = f"""
            SELECT cluster, coalesce(gpu_model, '') AS gpu_model, count(*)::int AS nodes,
                   coalesce(sum(gpus), 0)::bigint * 1000 AS total_milli,
                   coalesce(sum(gpu_capacity_milli), 0)::bigint AS healthy_milli,
                   coalesce(sum(CASE WHEN schedulable THEN gpu_free_milli ELSE 0 END), 0)::bigint AS free_milli,
                   coalesce(sum(gpu_allocated_milli), 0)::bigint AS allocated_milli
            FROM {self._nodes}
            WHERE present AND gpus > 0 AND ($1::text IS NULL OR cluster = $1)
            GROUP BY 1, 2 ORDER BY 1, 2"""
        return [parse.model_capacity(r) for r in await self._pool.fetch(sql, cluster)]

    async def npu_capacity(self, cluster: str | None) -> list[NpuCapacity]:
        """Each cluster's NPUs per NPU model (one cluster's if named), by cluster and model."""
        sql = f"""
            SELECT cluster, npu_model, count(*)::int AS nodes, sum(npus)::bigint AS total,
                   coalesce(sum(npus_healthy), 0)::bigint AS healthy,
                   coalesce(sum(npus_degraded), 0)::bigint AS degraded,
                   coalesce(sum(npus - npus_healthy), 0)::bigint AS failed,
                   coalesce(sum(CASE WHEN schedulable THEN npus_free ELSE 0 END), 0)::bigint AS free,
                   coalesce(sum(npus_free), 0)::bigint AS unheld
            FROM {self._nodes}
            WHERE present AND npus > 0 AND ($1::text IS NULL OR cluster = $1)
            GROUP BY 1, 2 ORDER BY 1, 2"""
        return [parse.npu_capacity(r) for r in await self._pool.fetch(sql, cluster)]

    async def pending_npus(self) -> list[PendingNpus]:
        """The NPUs waiting jobs ask for, by the NPU models they accept and what one job asks (every
        replica's NPUs): one row per such shape, however many jobs wait."""
        sql = (
            f"SELECT coalesce(npu_models, '') AS npu_models, (npus * replicas)::bigint AS each,"
            f" count(*)::bigint AS jobs FROM {self._jobs}"
            f" WHERE status IN ('submitted', 'queued') AND NOT coalesce(orphan, false) AND npus > 0"
            f" GROUP BY 1, 2 ORDER BY 1, 2"
        )
        return [parse.pending_npus(r) for r in await self._pool.fetch(sql)]

    async def largest_nodes(self) -> dict[str, int]:
        """GPU model -> the most GPUs a present node of it has."""
        sql = (
            f"SELECT gpu_model, max(gpus) AS gpus FROM {self._nodes}"
            f" WHERE present AND gpus > 0 AND gpu_model <> '' GROUP BY gpu_model"
        )
        return {r["gpu_model"]: int(r["gpus"]) for r in await self._pool.fetch(sql)}

    async def accelerators(self) -> tuple[bool, bool]:
        """(any present node known, any present node with both GPUs and NPUs): what the API needs to
        refuse a replica asking both kinds that no node of the fleet can hold."""
        sql = (
            f"SELECT count(*) > 0 AS known, coalesce(bool_or(gpus > 0 AND coalesce(npus, 0) > 0), false) AS both"
            f" FROM {self._nodes} WHERE present"
        )
        row = await self._pool.fetchrow(sql)
        return (bool(row["known"]), bool(row["both"])) if row is not None else (False, False)

    async def allocation(self) -> list[ClusterAllocation]:
        """Each cluster's GPU capacity and allocation, over every node it has reported."""
        sql = (
            f"SELECT cluster, coalesce(sum(gpu_capacity_milli), 0) AS capacity_milli,"
            f" coalesce(sum(gpu_allocated_milli), 0) AS allocated_milli FROM {self._nodes} GROUP BY cluster"
        )
        return [parse.cluster_allocation(r) for r in await self._pool.fetch(sql)]

    async def fleet_models(self) -> list[FleetModel]:
        sql = (
            f"SELECT gpu_model, capacity_milli, free_milli, pending_milli, congestion_milli, hot"
            f" FROM {self._fleet} ORDER BY gpu_model"
        )
        return [parse.fleet_model(r) for r in await self._pool.fetch(sql)]

    # -- quota and usage ----------------------------------------------------------------------------------

    async def quota(
        self, tenants: Sequence[str] | None, tenant: str | None = None, queue: str | None = None
    ) -> list[QueueQuota]:
        """Queues' quota lines and use, by tenant and queue; ``tenant`` and ``queue`` narrow it."""
        sql = (
            f"SELECT tenant, queue, usage, gpu_hours_milli, running_jobs, npu_hours_milli FROM {self._quota}"
            f" WHERE ($1::text[] IS NULL OR tenant = ANY($1::text[])) AND ($2::text IS NULL OR tenant = $2)"
            f" AND ($3::text IS NULL OR queue = $3) ORDER BY tenant, queue"
        )
        return [parse.queue_quota(r) for r in await self._pool.fetch(sql, _scope(tenants), tenant, queue)]

    async def allocated_within(self, tenants: Sequence[str], start_ms: int, end_ms: int) -> int:
        """GPU time (milli-GPU x ms) the runs of ``tenants`` that ended held in the hours from ``start_ms``
        to ``end_ms`` (the hour buckets that start within them). NPU time is not GPU time: a GPU-hour
        budget counts GPU buckets only."""
        sql = (
            f"SELECT coalesce(sum(allocated_milli_ms), 0)::bigint FROM {self._usage}"
            f" WHERE tenant = ANY($1::text[]) AND hour_ms >= $2 AND hour_ms < $3 AND kind = 'gpu'"
        )
        return int(await self._pool.fetchval(sql, list(tenants), start_ms, end_ms) or 0)

    async def usage_hours(self, tenants: Sequence[str] | None = None) -> list[UsageHour]:
        """Every usage hour bucket (of ``tenants`` only, when given)."""
        sql = (
            f"SELECT tenant, cluster, gpu_model, hour_ms, allocated_milli_ms, used_milli_ms, idle_milli_ms,"
            f" cost_micro, currency, projects, kind, samples FROM {self._usage}"
            f" WHERE ($1::text[] IS NULL OR tenant = ANY($1::text[]))"
        )
        return [parse.usage_hour(r) for r in await self._pool.fetch(sql, _scope(tenants))]

    # -- configuration documents -----------------------------------------------------------------------

    async def documents(
        self,
        tenants: Sequence[str] | None,
        kind: str | None = None,
        name: str | None = None,
        *,
        deleted: bool = False,
    ) -> list[DocumentRow]:
        """Configuration documents by kind and name; ``kind`` and ``name`` narrow it. A scoped caller
        (``tenants``) sees its tenants' documents and the fleet's own (cohorts, the policy, a cohort's
        budget); ``deleted`` includes the ones deleted (their generation goes on when applied again)."""
        sql = (
            f"SELECT kind, name, tenant, generation, body, author, changed_ms, deleted FROM {self._documents}"
            f" WHERE ($1::text[] IS NULL OR tenant = '' OR tenant = ANY($1::text[]))"
            f" AND ($2::text IS NULL OR kind = $2) AND ($3::text IS NULL OR name = $3)"
            f" AND ($4::boolean OR NOT deleted) ORDER BY kind, name"
        )
        return [parse.document_row(r) for r in await self._pool.fetch(sql, _scope(tenants), kind, name, deleted)]

    # -- consistency --------------------------------------------------------------------------------------

    async def checksums(self) -> dict[str, str]:
        """A digest of each read-model table's content, independent of physical row order: a rebuild from
        the log equals the live tables when every digest does."""
        out: dict[str, str] = {}
        for table in ALL:
            columns = ", ".join(name for name, _ in table.columns)
            rows = await self._pool.fetch(f"SELECT ({columns})::text AS line FROM {self.schema}.{table.name}")
            digest = hashlib.sha256()
            for line in sorted(row["line"] for row in rows):
                digest.update(line.encode())
                digest.update(b"\n")
            out[table.name] = f"{len(rows)}:{digest.hexdigest()[:16]}"
        return out


def _scope(tenants: Sequence[str] | None) -> list[str] | None:
    """A tenant scope as a query argument (``None``: every tenant)."""
    return None if tenants is None else list(tenants)
