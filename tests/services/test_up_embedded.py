"""End to end on the embedded default: ``fedsched up``'s components in one process on real PostgreSQL.

Jobs are submitted over gRPC, the scheduler places them, a simulated cluster runs it to completion, the job view
shows it done with its reason, and ``audit verify`` re-executes every cycle identically.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest

from events.wire.envelope import format_time
from services.api.client import Client, ClientConfig
from services.api.pb import jobs_pb2
from services.audit.verify import verify
from services.runtime import up
from tests.cli import fedsched

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.slow]

NODES = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "proj_nodes.csv"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


COMPONENTS = ("scheduler", "projections", "archiver", "governance")


async def wait_for(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


async def test_a_submitted_job_runs_to_completion_and_every_cycle_verifies(fresh_database: str, tmp_path: Path) -> None:
    api = f"127.0.0.1:{free_port()}"
    config = up.UpConfig(
        data_dir=tmp_path,
        dsn=fresh_database,
        metrics_listen="127.0.0.1:0",
        sim_nodes=NODES,
        sim_speed=200.0,
        api_listen=api,
    )
    running = await up.start(config)
    client = Client(ClientConfig(server=api, token=running.api_token))
    try:
        ids = []
        for i in range(5):
            spec = jobs_pb2.JobSpec(
                name=f"train-{i}",
                tenant="team-a",
                expected_runtime_s=60,
                resources=jobs_pb2.Resources(cpu_milli=4000, memory_mib=8192, gpus=1),
            )
            response = await client.call(
                client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=f"e2e-{i}")
            )
            ids.append(response.job_id)
        huge = jobs_pb2.JobSpec(
            name="too-big", tenant="team-b", resources=jobs_pb2.Resources(cpu_milli=4000, memory_mib=8192, gpus=64)
        )
        huge_id = (
            await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=huge, client_request_id="e2e-huge"))
        ).job_id

        async def done() -> bool:
            rows = await running.pool.fetch("SELECT entity_key, status FROM fedsched_rm.read_jobs")
            statuses = {r["entity_key"]: r["status"] for r in rows}
            return all(statuses.get(job) == "succeeded" for job in ids) and statuses.get(huge_id) == "queued"

        await wait_for(done, timeout_s=90)
        job = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=ids[0]))
        assert job.status == "succeeded"
        # A compliance team's view of the job: through the API, with a token (here the development one).
        as_admin = {"FEDSCHED_SERVER": api, "FEDSCHED_TOKEN": running.api_token or ""}
        code, out = await fedsched("audit", "timeline", ids[0], "--json", dsn=fresh_database, env=as_admin)
        assert code == 0, out
        kinds = [e["event"] for e in json.loads(out)["entries"]]
        assert kinds[0] == "JobSubmitted" and "JobPlaced" in kinds and kinds[-1] == "JobSucceeded", kinds
        explanation = await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=huge_id))
        assert "64" in str(explanation)
        row = await running.pool.fetchrow(
            "SELECT last_decision_type, timeline::text AS timeline FROM fedsched_rm.read_jobs WHERE entity_key = $1",
            huge_id,
        )
        assert row["last_decision_type"] == "JobQueued"
        timeline = await running.pool.fetchval(
            "SELECT timeline::text FROM fedsched_rm.read_jobs WHERE entity_key = $1", ids[0]
        )
        assert '"succeeded"' in timeline and '"placed"' in timeline and '"running"' in timeline

        # Operations: every component's counters and consumer lag, and placement latency quantiles.
        async def measured() -> bool:
            body = running.metrics.render()
            return all(f'fedsched_consumer_lag{{component="{c}"}}' in body for c in COMPONENTS)

        await wait_for(measured, timeout_s=30)
        body = running.metrics.render()
        for name in ("projections", "governance", "scheduler"):
            assert f'fedsched_events_folded_total{{component="{name}"}}' in body
        assert "fedsched_archived_total" in body and 'fedsched_placement_latency_seconds{quantile="0.99"}' in body
        # The API's requests by method and code, in the same process.
        assert 'fedsched_api_requests_total{code="OK",method="/fedsched.v1.JobService/SubmitJob"}' in body, body
        assert running.metrics.failing() == []
    finally:
        await client.close()
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

    # The live read models, brought up to the end of the log, equal a rebuild from offset 0.
    import asyncpg

    from projections.inprocess.runner import ProjectionRunner

    log = PostgresEventLog(fresh_database)
    await log.start()
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    live = ProjectionRunner(log, pool)
    await live.start()
    await live.catch_up()
    await live.close()
    await pool.close()
    await log.close()
    code, out = await fedsched("projections", "rebuild", "--json", dsn=fresh_database)
    assert code == 0, out
    rebuilt = json.loads(out)
    assert rebuilt["equal"] and rebuilt["events"] >= 60

    # What a compliance team runs afterwards, from the command line.
    code, out = await fedsched("audit", "archive", "--once", dsn=fresh_database)
    assert code == 0, out
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
