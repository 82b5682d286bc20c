"""Retries after a lost node end to end on the embedded default (issue 21, item 5): ``fedsched up``'s
components in one process on real PostgreSQL, one simulated cluster of two 8-GPU nodes on a clock 60
times the wall's. The node under a running critical training job is lost (an operator's drill of the
simulated fleet): the run fails with ``NodeFailure``, the scheduler's verdict sends the job back to the
queue (retry 1 of 3, after its class's backoff), it runs again on the other node and completes; the job
view and the API show the retry; ``audit verify`` re-executes every cycle identically."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.catalog.decisions import JobPlaced, JobRetryScheduled
from events.catalog.jobs import JobFailed, JobSucceeded
from events.catalog.reasons import ReasonCode
from services.api.pb import jobs_pb2
from services.runtime import up
from tests.services.embedded import free_port, history, stack, verified_history, wait_for

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]


async def test_a_node_lost_under_critical_training_is_retried_on_the_other_node_and_completes(
    fresh_database: str, tmp_path: Path
) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\ngpu-a,64000,262144,8,A100\ngpu-b,64000,262144,8,A100\n")
    api = f"127.0.0.1:{free_port()}"
    config = up.UpConfig(
        data_dir=tmp_path,
        dsn=fresh_database,
        metrics_listen="127.0.0.1:0",
        sim_clusters=("sim-1",),
        sim_nodes=nodes,
        sim_speed=60.0,
        api_listen=api,
    )
    async with stack(config) as (running, client):
        spec = jobs_pb2.JobSpec(
            name="llama-pretrain",
            tenant="team-a",
            kind="training",
            priority_class="critical_training",
            expected_runtime_s=600,  # ten simulated minutes: ten seconds of the wall
            resources=jobs_pb2.Resources(cpu_milli=8000, memory_mib=65536, gpus=8),
        )
        answer = await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id="t"))
        job_id = str(answer.job_id)

        async def row() -> tuple[str, int]:
            found = await running.pool.fetchrow(
                "SELECT status, run FROM fedsched_rm.read_jobs WHERE entity_key = $1", job_id
            )
            return (str(found["status"]), int(found["run"])) if found is not None else ("", 0)

        async def first_run_running() -> bool:
            return await row() == ("running", 1)

        await wait_for(first_run_running, 60)
        placed = [e.data for e in await history(running.log) if isinstance(e.data, JobPlaced)]
        (first,) = [p for p in placed if p.job_id == job_id]
        lost = first.replicas[0].node
        assert running.fleet is not None
        running.fleet.lose_node("sim-1", lost, 3 * 3600)  # gone for longer than the job needs

        async def completed() -> bool:
            return (await row())[0] in ("succeeded", "failed")

        await wait_for(completed, 120)
        assert await row() == ("succeeded", 2)
        got = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))
        retried = [t for t in got.timeline if t.event == "JobRetryScheduled"]
        assert len(retried) == 1 and retried[0].message.startswith(f"retry 1 of 3 after node {lost} failed"), got

    report, every = await verified_history(fresh_database)
    events = [e.data for e in every if getattr(e.data, "job_id", None) == job_id]
    assert report.identical_pct == 100.0, report.differences
    failed = [e for e in events if isinstance(e, JobFailed)]
    assert [(f.run, f.reason, f.node) for f in failed] == [(1, ReasonCode.NODE_FAILURE, lost)]
    (verdict,) = [e for e in events if isinstance(e, JobRetryScheduled)]
    assert (verdict.run, verdict.attempt, verdict.allowed, verdict.node) == (1, 1, 3, lost)
    second = [e for e in events if isinstance(e, JobPlaced) and e.run == 2]
    assert len(second) == 1 and second[0].replicas[0].node != lost  # elsewhere: the lost node is gone
    assert [e.run for e in events if isinstance(e, JobSucceeded)] == [2]
