"""A run spread over two clusters, in the read models on real PostgreSQL: the usage rows price each part at
its own cluster's rate, the governance report's cost adds them up, and the queue's stored holdings (keyed
by cluster and node) survive a restart of the host between the two parts' ends, so the second part's
release still finds its hold and its GPU time is consumed."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from projections.readmodel import writer
from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.entities import TABLES
from services.governance.core.figures import cost
from services.governance.report import usage_rows
from tests.unit.projections.builders import Fold
from tests.unit.projections.test_spread_parts import QUEUE, hold, interval, route, two_clusters

pytestmark = [pytest.mark.postgres, pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(60)]


async def written(pool: asyncpg.Pool, schema: str, fold: Fold) -> None:
    tables = fold.store.tables
    changed = [(stage, key) for stage, entities in tables.items() if stage in TABLES for key in entities]
    await writer.flush(pool, schema, changed, tables, {})


async def test_a_spread_runs_parts_are_stored_priced_and_released_across_a_restart(fresh_database: str) -> None:
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    schema = f"rm_{uuid.uuid4().hex[:8]}"
    try:
        await writer.ensure_schema(pool, schema)
        fold = two_clusters()
        route(fold, "sim-1/n1", hold("sim-1", True, 0, 0), 0)
        route(fold, "sim-2/n1", hold("sim-2", True, 600, 600), 600)
        route(fold, "sim-1/n1", hold("sim-1", False, 0, 1800), 1800)
        route(fold, "sim-1/n1", interval("sim-1", 0, 1800), 1800)
        await written(pool, schema, fold)

        # The host restarts: its entities come back from PostgreSQL, sim-2's part still held.
        loaded = await writer.load_state(pool, schema)
        assert loaded is not None
        again = Fold()
        again.store.tables = loaded
        assert list(again.get("quota", QUEUE).holdings) == ["j1@sim-2/n1"]
        route(again, "sim-2/n1", hold("sim-2", False, 600, 2400), 2400)
        route(again, "sim-2/n1", interval("sim-2", 600, 2400), 2400)
        await written(pool, schema, again)

        reads = ReadModels(pool, schema)
        (queue,) = await reads.quota(None)
        assert (queue.gpu_hours_milli, queue.running_jobs) == (2000, 0)  # two parts of one GPU-hour each
        rows = {(u.cluster, u.gpu_model): (u.allocated_milli_ms, u.cost_micro) for u in await reads.usage_hours()}
        gpu_hour = 2000 * 1_800_000
        assert rows == {("sim-1", "A100"): (gpu_hour, 2_000_000), ("sim-2", "A100"): (gpu_hour, 3_000_000)}
        by_tenant, _ = cost(await usage_rows(reads))
        assert by_tenant == [
            {"tenant": "team-a", "gpu_h": 2.0, "npu_h": 0.0, "cost_micro": 5_000_000, "cost": 5.0, "currency": "EUR"}
        ]
    finally:
        await pool.close()
