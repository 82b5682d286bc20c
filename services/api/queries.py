"""Reads of the PostgreSQL read models (written by the projections) for the API. Calls asyncpg.

Called by the servicers. Tenant scoping is applied here in SQL (``tenants``: the tenants a caller may
see, ``None`` for all), so a query never returns rows of a tenant outside the caller's scope. JSON
columns come back parsed. Lists page by keyset (the last row's sort key), never by offset.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

Row = dict[str, Any]
_JSON_COLUMNS = ("timeline", "placement", "last_decision", "usage", "rates", "datasets")


def _row(record: asyncpg.Record) -> Row:
    out = dict(record)
    for name in _JSON_COLUMNS:
        if isinstance(out.get(name), str):
            out[name] = json.loads(out[name])
    return out


@dataclass(frozen=True, slots=True)
class JobFilter:
    tenant: str | None = None
    project: str | None = None
    queue: str | None = None
    statuses: tuple[str, ...] = ()
    priority_class: str | None = None
    cluster: str | None = None

    def as_query(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "project": self.project,
            "queue": self.queue,
            "statuses": list(self.statuses),
            "priority_class": self.priority_class,
            "cluster": self.cluster,
        }


class ReadModels:
    def __init__(self, pool: asyncpg.Pool, schema: str = "fedsched_rm") -> None:
        self._pool = pool
        self.schema = schema

    async def job(self, job_id: str) -> Row | None:
        record = await self._pool.fetchrow(f"SELECT * FROM {self.schema}.read_jobs WHERE entity_key = $1", job_id)
        return None if record is None else _row(record)

    async def job_and_positions(self, job_id: str) -> tuple[Row | None, dict[tuple[str, int], int]]:
        """The job's row and the log positions it reflects, from one snapshot (the projections write both
        in one transaction): events at or after those positions are not in the row yet."""
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            record = await conn.fetchrow(f"SELECT * FROM {self.schema}.read_jobs WHERE entity_key = $1", job_id)
            rows = await conn.fetch(f"SELECT topic, partition, next_offset FROM {self.schema}.projection_positions")
        positions = {(r["topic"], r["partition"]): int(r["next_offset"]) for r in rows}
        return (None if record is None else _row(record)), positions

    async def jobs(
        self, where: JobFilter, tenants: Sequence[str] | None, limit: int, after: Sequence[Any] | None
    ) -> list[Row]:
        clauses = ["NOT orphan"]
        args: list[Any] = []

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        if tenants is not None:
            clauses.append(f"tenant = ANY({arg(list(tenants))}::text[])")
        for column in ("tenant", "project", "queue", "priority_class", "cluster"):
            value = getattr(where, column)
            if value:
                clauses.append(f"{column} = {arg(value)}")
        if where.statuses:
            clauses.append(f"status = ANY({arg(list(where.statuses))}::text[])")
        if after is not None:
            clauses.append(f"(coalesce(submitted_ms, 0), entity_key) < ({arg(int(after[0]))}, {arg(str(after[1]))})")
        sql = (
            f"SELECT entity_key, tenant, project, queue, name, kind, priority_class, status, cluster, replicas,"
            f" gpu_milli, submitted_ms, placed_ms, started_ms, ended_ms, waiting_ms, run, runs, preemptions,"
            f" last_reason, last_message, placement, last_decision_type, queued_since_ms"
            f" FROM {self.schema}.read_jobs WHERE {' AND '.join(clauses)}"
            f" ORDER BY coalesce(submitted_ms, 0) DESC, entity_key DESC LIMIT {arg(limit)}"
        )
        return [_row(r) for r in await self._pool.fetch(sql, *args)]

    async def clusters(self) -> list[Row]:
        sql = f"""
            WITH n AS (
                SELECT cluster, count(*)::int AS nodes, coalesce(sum(gpus), 0)::bigint AS gpus,
                       coalesce(sum(gpu_capacity_milli), 0)::bigint AS gpu_capacity_milli,
                       coalesce(sum(CASE WHEN schedulable THEN gpu_free_milli ELSE 0 END), 0)::bigint AS gpu_free_milli
                FROM {self.schema}.read_nodes WHERE present GROUP BY cluster)
            SELECT coalesce(c.entity_key, n.cluster) AS cluster, coalesce(c.registered, false) AS registered,
                   coalesce(c.kind, '') AS kind, coalesce(c.site, '') AS site, coalesce(c.region, '') AS region,
                   coalesce(c.status, 'unknown') AS status, coalesce(c.status_reason, '') AS status_reason,
                   coalesce(n.nodes, 0) AS nodes, coalesce(n.gpus, 0) AS gpus,
                   coalesce(n.gpu_capacity_milli, 0) AS gpu_capacity_milli,
                   coalesce(n.gpu_free_milli, 0) AS gpu_free_milli
            FROM {self.schema}.read_clusters c FULL OUTER JOIN n ON n.cluster = c.entity_key
            ORDER BY 1"""
        return [_row(r) for r in await self._pool.fetch(sql)]

    async def nodes(
        self, cluster: str | None, gpu_model: str | None, limit: int, after: Sequence[Any] | None
    ) -> list[Row]:
        clauses = ["true"]
        args: list[Any] = []
        if cluster:
            args.append(cluster)
            clauses.append(f"cluster = ${len(args)}")
        if gpu_model:
            args.append(gpu_model)
            clauses.append(f"gpu_model = ${len(args)}")
        if after is not None:
            args += [str(after[0]), str(after[1])]
            clauses.append(f"(cluster, node) > (${len(args) - 1}, ${len(args)})")
        args.append(limit)
        sql = (
            f"SELECT * FROM {self.schema}.read_nodes WHERE {' AND '.join(clauses)}"
            f" ORDER BY cluster, node LIMIT ${len(args)}"
        )
        return [_row(r) for r in await self._pool.fetch(sql, *args)]

    async def capacity(self, cluster: str | None) -> list[Row]:
        sql = f"""
            SELECT cluster, coalesce(gpu_model, '') AS gpu_model, count(*)::int AS nodes,
                   coalesce(sum(gpus), 0)::bigint * 1000 AS total_milli,
                   coalesce(sum(gpu_capacity_milli), 0)::bigint AS healthy_milli,
                   coalesce(sum(CASE WHEN schedulable THEN gpu_free_milli ELSE 0 END), 0)::bigint AS free_milli,
                   coalesce(sum(gpu_allocated_milli), 0)::bigint AS allocated_milli
            FROM {self.schema}.read_nodes
            WHERE present AND gpus > 0 AND ($1::text IS NULL OR cluster = $1)
            GROUP BY 1, 2 ORDER BY 1, 2"""
        return [_row(r) for r in await self._pool.fetch(sql, cluster)]

    async def largest_nodes(self) -> dict[str, int]:
        """GPU model -> the most GPUs a present node of it has."""
        sql = (
            f"SELECT gpu_model, max(gpus) AS gpus FROM {self.schema}.read_nodes"
            f" WHERE present AND gpus > 0 AND gpu_model <> '' GROUP BY gpu_model"
        )
        return {r["gpu_model"]: int(r["gpus"]) for r in await self._pool.fetch(sql)}

    async def fleet_models(self) -> list[Row]:
        sql = (
            f"SELECT gpu_model, capacity_milli, free_milli, pending_milli, congestion_milli, hot"
            f" FROM {self.schema}.read_fleet_models ORDER BY gpu_model"
        )
        return [_row(r) for r in await self._pool.fetch(sql)]

    async def quota(self, tenants: Sequence[str] | None, tenant: str | None, queue: str | None) -> list[Row]:
        sql = (
            f"SELECT tenant, queue, usage, gpu_hours_milli, running_jobs FROM {self.schema}.read_quota"
            f" WHERE ($1::text[] IS NULL OR tenant = ANY($1::text[])) AND ($2::text IS NULL OR tenant = $2)"
            f" AND ($3::text IS NULL OR queue = $3) ORDER BY tenant, queue"
        )
        return [_row(r) for r in await self._pool.fetch(sql, None if tenants is None else list(tenants), tenant, queue)]
