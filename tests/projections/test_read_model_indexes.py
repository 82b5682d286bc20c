"""Read models made by an earlier version: the job listing index and the columns added since are added to them."""

from __future__ import annotations

import asyncpg
import pytest

from projections.readmodel import writer as readmodels
from projections.readmodel.rows.entities import TABLES

pytestmark = [pytest.mark.postgres, pytest.mark.asyncio(loop_scope="session")]

ADDED = (
    "queued_since_ms",
    "pending_reason",
    "federation_position",
    "tenant_queue_position",
    "estimated_start_ms",
    "expected_runtime_s",
    "max_runtime_s",
    "retries",
    "npus",
    "npu_models",
    "clusters",
    "parts",
    "spread_clusters",
)
"""The jobs table's columns added since it was first made, in the order they were added."""
LISTING = (
    "SELECT entity_key FROM {s}.read_jobs WHERE NOT orphan AND tenant = ANY($1::text[]) AND status = ANY($2::text[])"
    " ORDER BY coalesce(submitted_ms, 0) DESC, entity_key DESC LIMIT 50"
)


async def _indexes(pool: asyncpg.Pool, schema: str) -> set[str]:
    rows = await pool.fetch(
        "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'read_jobs'", schema
    )
    return {row["indexname"] for row in rows}


async def test_the_job_indexes_are_made_and_added_to_older_read_models(fresh_database: str) -> None:
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    try:
        await readmodels.ensure_schema(pool, "fresh")
        wanted = {f"read_jobs_{suffix}" for suffix, _ in TABLES["jobs"].indexes}
        assert wanted and wanted <= await _indexes(pool, "fresh")

        # Read models made by an earlier version: the table without the indexes, rows in it.
        await pool.execute("CREATE SCHEMA older")
        await pool.execute(TABLES["jobs"].ddl("older"))
        await pool.execute(
            "INSERT INTO older.read_jobs (entity_key, tenant, status, orphan, submitted_ms)"
            " SELECT 'j' || i, 't' || (i % 7), CASE WHEN i % 5 = 0 THEN 'running' ELSE 'succeeded' END, false, i"
            " FROM generate_series(1, 20000) i"
        )
        assert not wanted & await _indexes(pool, "older")
        await readmodels.ensure_schema(pool, "older")
        assert wanted <= await _indexes(pool, "older")

        await pool.execute("ANALYZE older.read_jobs")
        plan = "\n".join(r[0] for r in await pool.fetch("EXPLAIN " + LISTING.format(s="older"), ["t3"], ["running"]))
        # One of them, whichever the planner finds cheaper; no sort of the whole history.
        assert "using read_jobs_by_" in plan and "Sort" not in plan, plan
        rows = await pool.fetch(LISTING.format(s="older"), ["t3"], ["running"])
        expected = sorted((i for i in range(1, 20001) if i % 7 == 3 and i % 5 == 0), reverse=True)[:50]
        assert [r["entity_key"] for r in rows] == [f"j{i}" for i in expected]
    finally:
        await pool.close()


async def test_columns_added_since_a_table_was_made_are_added_to_it(fresh_database: str) -> None:
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    try:
        await pool.execute("CREATE SCHEMA before")
        await pool.execute(TABLES["jobs"].ddl("before"))
        for column in ADDED:  # as an earlier version made it, before it had these
            await pool.execute(f"ALTER TABLE before.read_jobs DROP COLUMN {column}")
        await pool.execute("INSERT INTO before.read_jobs (entity_key, status) VALUES ('j1', 'queued')")
        await readmodels.ensure_schema(pool, "before")
        row = await pool.fetchrow("SELECT * FROM before.read_jobs")
        assert list(row.keys()) == [name for name, _ in TABLES["jobs"].columns]
        assert row["entity_key"] == "j1" and all(row[column] is None for column in ADDED)
    finally:
        await pool.close()


WAITS = (
    "SELECT entity_key FROM {s}.read_jobs WHERE NOT orphan AND pending_reason = ANY($1::text[])"
    " ORDER BY coalesce(submitted_ms, 0) DESC, entity_key DESC LIMIT 50"
)


async def test_a_listing_of_one_category_of_waits_reads_the_waiting_jobs_index_not_the_history(
    fresh_database: str,
) -> None:
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    try:
        await readmodels.ensure_schema(pool, "waits")
        await pool.execute(  # a long history; one job in a hundred waits, of one of three categories
            "INSERT INTO waits.read_jobs (entity_key, tenant, status, orphan, submitted_ms, pending_reason)"
            " SELECT 'j' || i, 't' || (i % 7), CASE WHEN i % 100 = 0 THEN 'queued' ELSE 'succeeded' END, false, i,"
            " CASE WHEN i % 100 = 0 THEN (ARRAY['quota', 'capacity', 'budget'])[1 + i / 100 % 3] END"
            " FROM generate_series(1, 50000) i"
        )
        await pool.execute("ANALYZE waits.read_jobs")
        plan = "\n".join(r[0] for r in await pool.fetch("EXPLAIN " + WAITS.format(s="waits"), ["quota"]))
        assert "read_jobs_by_pending_reason" in plan, plan
        rows = await pool.fetch(WAITS.format(s="waits"), ["quota"])
        expected = sorted((i for i in range(100, 50001, 100) if i // 100 % 3 == 0), reverse=True)[:50]
        assert [r["entity_key"] for r in rows] == [f"j{i}" for i in expected]
    finally:
        await pool.close()
