"""End to end on the embedded default: ``fedsched up``'s components in one process on real PostgreSQL.

A job is submitted, the scheduler places it, a simulated cluster runs it to completion, the job view
shows it done with its reason, and ``audit verify`` re-executes every cycle identically.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from events.catalog.jobs import JobSubmitted
from events.catalog.types import Resources
from events.envelope import format_time
from events.publisher import Publisher
from services.audit.verify import verify
from services.runtime import up
from tests.cli import fedsched

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]

NODES = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "proj_nodes.csv"


async def wait_for(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def test_a_submitted_job_runs_to_completion_and_every_cycle_verifies(fresh_database: str, tmp_path: Path) -> None:
    config = up.UpConfig(
        data_dir=tmp_path,
        dsn=fresh_database,
        metrics_listen="127.0.0.1:0",
        sim_nodes=NODES,
        sim_speed=200.0,
        with_api=False,
    )
    running = await up.start(config)
    try:
        publisher = Publisher(running.log, "urn:test:portal")
        await publisher.start()
        jobs = [
            JobSubmitted(
                job_id=f"e2e-{i}",
                name=f"train-{i}",
                tenant="team-a",
                resources=Resources(cpu_milli=4000, memory_mib=8192, gpus=1),
                expected_runtime_s=60,
            )
            for i in range(5)
        ] + [
            JobSubmitted(
                job_id="e2e-huge",
                name="too-big",
                tenant="team-b",
                resources=Resources(cpu_milli=4000, memory_mib=8192, gpus=64),
            )
        ]
        await publisher.publish(jobs)
        await publisher.close()

        async def done() -> bool:
            rows = await running.pool.fetch(
                "SELECT entity_key, status FROM fedsched_rm.read_jobs WHERE entity_key LIKE 'e2e-%'"
            )
            statuses = {r["entity_key"]: r["status"] for r in rows}
            return (
                all(statuses.get(f"e2e-{i}") == "succeeded" for i in range(5)) and statuses.get("e2e-huge") == "queued"
            )

        await wait_for(done, timeout_s=90)
        row = await running.pool.fetchrow(
            "SELECT last_decision_type, last_decision->>'message' AS message, last_reason FROM fedsched_rm.read_jobs"
            " WHERE entity_key = 'e2e-huge'"
        )
        assert row["last_decision_type"] == "JobQueued"
        assert "64" in row["message"]
        timeline = await running.pool.fetchval("SELECT timeline FROM fedsched_rm.read_jobs WHERE entity_key = 'e2e-0'")
        assert '"succeeded"' in timeline and '"placed"' in timeline and '"running"' in timeline
    finally:
        await up.stop(running)

    from events.log.postgres import PostgresEventLog

    log = PostgresEventLog(fresh_database)
    await log.start()
    try:
        report = await verify(log)
    finally:
        await log.close()
    assert report.cycles >= 1
    assert report.identical_pct == 100.0, report.differences

    # What a compliance team runs afterwards, from the command line.
    code, out = await fedsched("audit", "archive", "--once", dsn=fresh_database)
    assert code == 0, out
    code, out = await fedsched("audit", "timeline", "e2e-0", "--json", dsn=fresh_database)
    assert code == 0, out
    kinds = [e["type"] for e in json.loads(out)["events"]]
    assert kinds[0] == "JobSubmitted" and "JobPlaced" in kinds and kinds[-1] == "JobSucceeded"
    code, out = await fedsched("audit", "export", "--format", "jsonl", dsn=fresh_database)
    assert code == 0
    exported = [json.loads(line) for line in out.splitlines()]
    assert {"JobSubmitted", "JobPlaced", "NodeObserved", "SchedulingCycleCompleted"} <= {e["type"] for e in exported}
    code, out = await fedsched("audit", "verify", "--json", dsn=fresh_database)
    assert code == 0, out
    assert json.loads(out)["identical_pct"] == 100.0
    code, out = await fedsched("audit", "at", format_time(10**13), "--json", dsn=fresh_database)
    assert code == 0, out
    state = json.loads(out)
    assert state["pending_by_priority"] == {"standard": 1}
    assert sum(row["nodes"] for row in state["fleet"]) == 40

    policy = tmp_path / "bestfit.yaml"
    policy.write_text("node_policy: bestfit\nbackfill: false\n")
    code, out = await fedsched("audit", "whatif", "--policy", str(policy), "--json", dsn=fresh_database)
    assert code == 0, out
    whatif = json.loads(out)
    assert whatif["jobs"] == 6
    recorded, *simulated = whatif["columns"].values()
    assert recorded["wait_by_priority"]["standard"]["jobs"] == 5
    for column in simulated:
        assert column["wait_by_priority"]["standard"]["jobs"] == 5 and column["never_started"] == 1
