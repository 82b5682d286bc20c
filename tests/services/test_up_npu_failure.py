"""An NPU failing under a job, end to end on the embedded default: ``fedsched up``'s components in one
process on real PostgreSQL, one simulated cluster of two 8-NPU nodes on a clock 60 times the wall's. An
NPU of the node running a critical training job that takes all eight fails (an operator's drill of the
simulated fleet): the node's health report and snapshot say so, the run fails with ``NpuFailure``, the
scheduler's verdict sends the job back to the queue as the infrastructure's failure ("an NPU of node ...
failed"), it runs again on the other node (seven working NPUs are not eight) and completes; the resources
view counts the failed NPU per cluster x model and on its node; ``audit verify`` re-executes every cycle
identically."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.catalog.decisions import FailureKind, JobPlaced, JobRetryScheduled
from events.catalog.inventory import GpuHealthReported
from events.catalog.jobs import JobFailed, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.catalog.types import Health
from services.api.pb import jobs_pb2, resources_pb2
from tests.services.embedded import history, one_cluster, stack, verified_history, wait_for

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

NODES = """\
nodes:
  - {name: npu, count: 2, cpu_milli: 192000, memory_mib: 1572864, npus: 8, npu_model: Ascend910B,
     npu_memory_mib: 65536}
"""


async def test_an_npu_failing_under_a_training_job_fails_the_run_which_is_retried_on_working_npus(
    fresh_database: str, tmp_path: Path
) -> None:
    config = one_cluster(fresh_database, tmp_path, NODES, 60.0)
    async with stack(config) as (running, client):
        spec = jobs_pb2.JobSpec(
            name="pangu-pretrain",
            tenant="team-a",
            kind="training",
            priority_class="critical_training",
            expected_runtime_s=600,  # ten simulated minutes: ten seconds of the wall
            resources=jobs_pb2.Resources(cpu_milli=8000, memory_mib=65536, npus=8, npu_models=["Ascend910B"]),
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
        hit = first.replicas[0].node
        assert list(first.replicas[0].npu_indices) == list(range(8))
        assert running.fleet is not None
        running.fleet.fail_npu("sim-1", hit, 3, 3 * 3600)  # down for longer than the job needs

        async def npu_shown_failed() -> bool:
            capacity = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest())
            return [(n.cluster, n.npu_model, n.total, n.healthy, n.failed) for n in capacity.npus] == [
                ("sim-1", "Ascend910B", 16, 15, 1)
            ]

        await wait_for(npu_shown_failed, 60)
        listed = await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest(cluster="sim-1"))
        assert {n.node: (n.npus, n.npus_healthy) for n in listed.nodes}[hit] == (8, 7)

        async def completed() -> bool:
            return (await row())[0] in ("succeeded", "failed")

        await wait_for(completed, 120)
        assert await row() == ("succeeded", 2)
        got = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))
        retried = [t for t in got.timeline if t.event == "JobRetryScheduled"]
        assert len(retried) == 1 and retried[0].message.startswith(f"retry 1 of 3 after an NPU of node {hit} failed")

    report, every = await verified_history(fresh_database)
    assert report.identical_pct == 100.0, report.differences
    reports = [e.data for e in every if isinstance(e.data, GpuHealthReported) and e.data.node == hit]
    assert reports and reports[0].gpus == () and reports[0].npus[3].health is Health.FAILED
    events = [e.data for e in every if getattr(e.data, "job_id", None) == job_id]
    failed = [e for e in events if isinstance(e, JobFailed)]
    assert [(f.run, f.reason, f.node) for f in failed] == [(1, ReasonCode.NPU_FAILURE, hit)]
    assert failed[0].message.startswith(f"NPU 3 on node {hit} failed (error code 0x")
    (verdict,) = [e for e in events if isinstance(e, JobRetryScheduled)]
    assert (verdict.run, verdict.kind, verdict.attempt, verdict.allowed) == (1, FailureKind.INFRASTRUCTURE, 1, 3)
    second = [e for e in events if isinstance(e, JobPlaced) and e.run == 2]
    assert len(second) == 1 and second[0].replicas[0].node != hit  # the other node: seven NPUs are not eight
    assert [e.run for e in events if isinstance(e, JobSucceeded)] == [2]
