"""NPUs end to end on the embedded default (issue 21): ``fedsched up``'s components in one process on
real PostgreSQL and a simulated cluster whose node list has a GPU node, an NPU node and a CPU node. An
NPU job submitted through the API is placed on the NPU node with the NPUs the scheduler chose, the
simulated cluster binds and runs them, the job view and the node listing show them; CPU work keeps off
the NPU node; a replica asking GPUs and NPUs, which no node of this fleet can hold, is refused naming
the field; ``audit verify`` re-executes every cycle identically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from events.catalog.decisions import JobPlaced
from services.api.client import CallError
from services.api.pb import jobs_pb2, resources_pb2
from services.runtime import up
from tests.services.embedded import free_port, one_cluster, stack, verified_history, wait_for

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

NODES = """\
cluster:
  display_name: NPU test
nodes:
  - {name: gpu-1, cpu_milli: 64000, memory_mib: 262144, gpus: 8, model: A100-SXM4-80GB}
  - {name: npu-1, cpu_milli: 64000, memory_mib: 262144, npus: 8, npu_model: Ascend910B, npu_memory_mib: 65536}
  - {name: cpu-1, cpu_milli: 16000, memory_mib: 65536}
"""


async def test_an_npu_job_is_placed_on_npus_run_and_shown_and_a_gpu_and_npu_replica_is_refused(
    fresh_database: str, tmp_path: Path
) -> None:
    # A run of an hour lasts six minutes of wall time: running throughout the test.
    config = one_cluster(fresh_database, tmp_path, NODES, 10.0)
    async with stack(config) as (_running, client):

        async def submit(name: str, **resources: Any) -> str:
            spec = jobs_pb2.JobSpec(
                name=name, tenant="team-a", expected_runtime_s=3600, resources=jobs_pb2.Resources(**resources)
            )
            answer = await client.call(
                client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=name)
            )
            return str(answer.job_id)

        async def listed() -> dict[str, Any]:
            answer = await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest())
            return {n.node: n for n in answer.nodes}

        async def fleet_known() -> bool:
            return set(await listed()) == {"gpu-1", "npu-1", "cpu-1"}

        await wait_for(fleet_known, 60)
        assert (await listed())["npu-1"].npus == 8

        npu_job = await submit("npu-train", cpu_milli=4000, memory_mib=8192, npus=4, npu_models=["Ascend910B"])
        cpu_job = await submit("cpu-etl", cpu_milli=2000, memory_mib=4096)

        async def job(job_id: str) -> jobs_pb2.Job:
            return await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))

        async def both_running() -> bool:
            return [(await job(j)).status for j in (npu_job, cpu_job)] == ["running", "running"]

        await wait_for(both_running, 90)
        shown = await job(npu_job)
        (slot,) = shown.placement
        assert (slot.node, list(slot.npu_indices), list(slot.gpu_indices)) == ("npu-1", [0, 1, 2, 3], [])
        (cpu_slot,) = (await job(cpu_job)).placement
        assert cpu_slot.node != "npu-1" and not cpu_slot.npu_indices

        async def npus_taken() -> bool:  # the node's profile counts the NPUs the run holds
            return (await listed())["npu-1"].npus_free == 4

        await wait_for(npus_taken, 60)

        with pytest.raises(CallError) as refused:
            await submit("both-kinds", cpu_milli=1000, memory_mib=1024, gpus=1, npus=1)
        assert (refused.value.code, refused.value.field) == ("INVALID_ARGUMENT", "resources.npus")
        assert "no node of the fleet has both GPUs and NPUs" in refused.value.message

    report, events = await verified_history(fresh_database)
    assert report.identical_pct == 100.0, report.differences
    assert report.cycles > 0
    (placed,) = [e.data for e in events if isinstance(e.data, JobPlaced) and e.data.job_id == npu_job]
    assert [tuple(r.npu_indices) for r in placed.replicas] == [(0, 1, 2, 3)]


async def test_the_default_fleet_shows_its_npu_pool_runs_an_npu_job_and_counts_its_npu_hours_apart(
    fresh_database: str, tmp_path: Path
) -> None:
    """``fedsched up`` as a newcomer runs it (the default node list, no flags): sim-3 has the NPU pool, the
    API shows it per cluster x NPU model, an NPU job runs there, and its time is counted and priced as
    NPU time, not GPU time."""
    api = f"127.0.0.1:{free_port()}"
    config = up.UpConfig(
        data_dir=tmp_path / "data", dsn=fresh_database, metrics_listen="127.0.0.1:0", sim_speed=600.0, api_listen=api
    )
    async with stack(config) as (running, client):

        async def pool_shown() -> bool:
            answer = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest())
            return [(n.cluster, n.npu_model, n.nodes, n.total, n.free) for n in answer.npus] == [
                ("sim-3", "Ascend910B", 4, 32, 32)
            ]

        await wait_for(pool_shown, 90)
        clusters = await client.call(client.resources.ListClusters, resources_pb2.ListClustersRequest())
        assert {c.cluster: [n.total for n in c.npus] for c in clusters.clusters} == {
            "sim-1": [],
            "sim-2": [],
            "sim-3": [32],
        }
        spec = jobs_pb2.JobSpec(
            name="npu-train",
            tenant="team-a",
            expected_runtime_s=1800,
            # No model named: the pool's is the fleet's only NPU model.
            resources=jobs_pb2.Resources(cpu_milli=4000, memory_mib=8192, npus=8),
        )
        answer = await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id="n"))
        job_id = str(answer.job_id)

        async def usage() -> list[Any]:
            return list(
                await running.pool.fetch(
                    "SELECT kind, cluster, gpu_model, allocated_milli_ms, cost_micro FROM fedsched_rm.read_usage"
                    " WHERE tenant = 'team-a'"
                )
            )

        async def job() -> jobs_pb2.Job:
            return await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))

        async def counted() -> bool:  # the run ended and its time is counted
            return (await job()).status == "succeeded" and bool(await usage())

        await wait_for(counted, 120)
        assert (await job()).cluster == "sim-3"
        rows = await usage()
        assert {(r["kind"], r["cluster"], r["gpu_model"]) for r in rows} == {("npu", "sim-3", "Ascend910B")}
        held = sum(r["allocated_milli_ms"] for r in rows)
        assert held > 0 and sum(r["cost_micro"] for r in rows) == sum(
            2_600_000 * r["allocated_milli_ms"] // (1000 * 3_600_000) for r in rows
        )
