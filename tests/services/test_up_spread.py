"""A service spread over clusters end to end on the embedded default (issue 21, item 4): ``fedsched up``'s
components in one process on real PostgreSQL, three simulated clusters of one 4-GPU node each (the node
list is split among them). An inference service of 4 replicas with ``spread_clusters: 2`` opens with 2
replicas in one cluster and is topped up with 2 in another (``JobReplicasAdded`` naming that cluster,
started by its simulated cluster); losing one part's node costs only that part, and the service is topped
up in the third cluster, the job still running; cancelling it stops every part, and the scheduler closes
the run (``JobRunClosed``, cancelled). ``audit verify`` re-executes every cycle identically."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from events.catalog.decisions import JobPlaced, JobReplicasAdded, JobRunClosed
from events.catalog.jobs import JobCancelled, JobFailed, RunEnd
from services.api.pb import jobs_pb2
from tests.services.embedded import history, one_cluster, stack, verified_history, wait_for

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

NODE_LIST = """\
nodes:
  - {name: a, count: 3, cpu_milli: 64000, memory_mib: 262144, gpus: 4, model: A100-SXM4-80GB}
"""


async def test_a_service_spread_over_two_clusters_loses_only_a_part_with_a_node_and_closes_when_cancelled(
    fresh_database: str, tmp_path: Path
) -> None:
    config = replace(one_cluster(fresh_database, tmp_path, NODE_LIST, 10.0), sim_clusters=("sim-1", "sim-2", "sim-3"))
    async with stack(config) as (running, client):
        spec = jobs_pb2.JobSpec(
            name="chat",
            tenant="team-a",
            kind="inference",
            priority_class="production_inference",
            replicas=4,
            inference=jobs_pb2.InferenceSpec(min_replicas=1, spread_clusters=2),
            expected_runtime_s=86_400,  # serves for the whole test
            resources=jobs_pb2.Resources(cpu_milli=4000, memory_mib=16384, gpus=1),
        )
        answer = await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id="s"))
        job_id = str(answer.job_id)

        async def job() -> jobs_pb2.Job:
            return await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))

        async def spread_over(clusters: int, replicas: int) -> bool:
            found = await job()
            held = {slot.cluster for slot in found.placement}
            return found.status == "running" and len(found.placement) == replicas and len(held) == clusters

        await wait_for(lambda: spread_over(2, 4), 90)
        found = await job()
        per_cluster = sorted(
            sum(1 for s in found.placement if s.cluster == c) for c in {s.cluster for s in found.placement}
        )
        assert per_cluster == [2, 2], found
        first_two = {s.cluster for s in found.placement}
        lost_cluster = sorted(first_two)[0]
        lost_node = next(s.node for s in found.placement if s.cluster == lost_cluster)
        assert running.fleet is not None
        running.fleet.lose_node(lost_cluster, lost_node, 3 * 3600)

        async def moved() -> bool:
            now = await job()
            held = {slot.cluster for slot in now.placement}
            return now.status == "running" and len(now.placement) == 4 and lost_cluster not in held and len(held) == 2

        await wait_for(moved, 120)
        assert (await job()).run == 1  # the same run: the service never stopped
        await client.call(client.jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id, reason="done"))

        async def cancelled() -> bool:
            return (await job()).status == "cancelled"

        await wait_for(cancelled, 90)
        events = [e.data for e in await history(running.log) if getattr(e.data, "job_id", None) == job_id]

    report, _ = await verified_history(fresh_database)
    assert report.identical_pct == 100.0, report.differences
    (placed,) = [e for e in events if isinstance(e, JobPlaced)]
    assert len(placed.replicas) == 2 and "at most 2 in any one" in placed.explanation
    added = [e for e in events if isinstance(e, JobReplicasAdded)]
    assert len(added) == 2 and all(a.cluster != placed.cluster for a in added)
    assert [r.replica for a in added for r in a.replicas] == [2, 3, 4, 5]
    failed = [e for e in events if isinstance(e, JobFailed)]
    assert [(f.cluster, f.node) for f in failed] == [(lost_cluster, lost_node)]
    assert sorted(e.cluster or "" for e in events if isinstance(e, JobCancelled)) == sorted(
        {placed.cluster, *(a.cluster for a in added)} - {lost_cluster}
    )
    (closed,) = [e for e in events if isinstance(e, JobRunClosed)]
    assert closed.outcome is RunEnd.CANCELLED and len(closed.parts) == 3
