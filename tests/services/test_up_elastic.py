"""Elastic work end to end on the embedded default (issue 21, item 4): ``fedsched up``'s components in one
process on real PostgreSQL, one simulated cluster of one node with 4 GPUs. A gang of two holds two of
them; a batch array of 4 replicas that is not a gang starts with the 2 that fit, and when the gang ends
its run grows to 4 in the same cluster (``JobReplicasAdded``), the simulated cluster starting the added
replicas on the named GPUs; ``audit verify`` re-executes every cycle identically."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.catalog.decisions import JobPlaced, JobReplicasAdded
from services.api.pb import jobs_pb2
from tests.services.embedded import one_cluster, stack, verified_history, wait_for

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

NODE_LIST = """\
nodes:
  - {name: a, count: 1, cpu_milli: 64000, memory_mib: 262144, gpus: 4, model: A100-SXM4-80GB}
"""


async def test_a_batch_array_starts_with_what_fits_and_grows_to_all_its_replicas_when_another_job_ends(
    fresh_database: str, tmp_path: Path
) -> None:
    config = one_cluster(fresh_database, tmp_path, NODE_LIST, 10.0)
    async with stack(config) as (_running, client):

        async def submit(name: str, replicas: int, gang: bool, runtime_s: int) -> str:
            spec = jobs_pb2.JobSpec(
                name=name,
                tenant="team-a",
                replicas=replicas,
                gang=gang,
                expected_runtime_s=runtime_s,
                resources=jobs_pb2.Resources(cpu_milli=4000, memory_mib=16384, gpus=1),
            )
            answer = await client.call(
                client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=name)
            )
            return str(answer.job_id)

        async def job(job_id: str) -> jobs_pb2.Job:
            return await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))

        gang = await submit("gang", 2, True, 120)  # two simulated minutes: 12 s at ten times the speed

        async def gang_started() -> bool:
            return (await job(gang)).status in ("placed", "running")

        await wait_for(gang_started, 60)
        array = await submit("array", 4, False, 86_400)  # runs for the whole test

        async def holds(count: int) -> bool:
            found = await job(array)
            return found.status in ("placed", "running") and len(found.placement) == count

        await wait_for(lambda: holds(2), 60)
        assert (await job(array)).replicas == 4
        await wait_for(lambda: holds(4), 120)
        found = await job(array)
        assert sorted(g for slot in found.placement for g in slot.gpu_indices) == [0, 1, 2, 3]
        why = str(await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=array)))
        assert "all 4 replicas run now" in why, why

    report, events = await verified_history(fresh_database)
    assert report.identical_pct == 100.0, report.differences
    (placed,) = [e.data for e in events if isinstance(e.data, JobPlaced) and e.data.job_id == array]
    assert len(placed.replicas) == 2 and "running 2 of 4 replicas; 2 wait for room" in placed.explanation
    (grew,) = [e.data for e in events if isinstance(e.data, JobReplicasAdded)]
    assert (grew.job_id, grew.run, grew.running_replicas) == (array, 1, 4)
    assert [r.replica for r in grew.replicas] == [2, 3]
