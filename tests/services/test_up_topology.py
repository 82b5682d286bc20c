"""Topology constraints end to end on the embedded default (issue 21, item 3): ``fedsched up``'s components
in one process on real PostgreSQL, one simulated cluster from a node list with two RDMA fabrics and
nodes on none. A 4-replica job that requires RDMA lands inside one fabric; the next one, for which no
fabric has room though the cluster has, waits naming the fabric with the most room; one that no fabric
could ever hold waits as misconfigured; ``audit verify`` re-executes every cycle identically."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.catalog.decisions import JobPlaced, JobQueued
from events.catalog.pending_reasons import PendingReason
from events.catalog.reasons import ReasonCode
from services.api.pb import jobs_pb2
from services.runtime import up
from tests.services.embedded import free_port, stack, verified_history, wait_for

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

NODE_LIST = """\
nodes:
  - {name: a, count: 3, cpu_milli: 64000, memory_mib: 262144, gpus: 8, model: A100-SXM4-80GB, rdma_fabric: ib-a}
  - {name: b, count: 4, cpu_milli: 64000, memory_mib: 262144, gpus: 8, model: A100-SXM4-80GB, rdma_fabric: ib-b}
  - {name: c, count: 2, cpu_milli: 64000, memory_mib: 262144, gpus: 8, model: A100-SXM4-80GB}
"""


async def test_a_job_requiring_rdma_lands_inside_one_fabric_and_one_too_big_waits_saying_why(
    fresh_database: str, tmp_path: Path
) -> None:
    nodes = tmp_path / "fabrics.yaml"
    nodes.write_text(NODE_LIST)
    api = f"127.0.0.1:{free_port()}"
    config = up.UpConfig(
        data_dir=tmp_path / "data",
        dsn=fresh_database,
        metrics_listen="127.0.0.1:0",
        sim_nodes=nodes,
        sim_clusters=("sim-1",),
        sim_speed=1.0,
        api_listen=api,
    )
    async with stack(config) as (running, client):

        async def submit(name: str, replicas: int) -> str:
            spec = jobs_pb2.JobSpec(
                name=name,
                tenant="team-a",
                replicas=replicas,
                gang=True,
                interconnect="rdma",
                interconnect_required=True,
                expected_runtime_s=86_400,  # runs for the whole test
                resources=jobs_pb2.Resources(cpu_milli=8000, memory_mib=65536, gpus=8),
            )
            answer = await client.call(
                client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=name)
            )
            return str(answer.job_id)

        async def statuses() -> dict[str, tuple[str, str]]:
            rows = await running.pool.fetch("SELECT entity_key, status, last_reason FROM fedsched_rm.read_jobs")
            return {r["entity_key"]: (r["status"], r["last_reason"]) for r in rows}

        fits = await submit("fits", 4)

        async def fits_started() -> bool:
            return (await statuses()).get(fits, ("", ""))[0] in ("placed", "running")

        await wait_for(fits_started, 60)
        # ib-b is taken now; ib-a has room for 3 and the cluster for 5 (3 + 2 nodes on no fabric).
        waits, never = await submit("waits", 4), await submit("never", 5)

        async def both_wait() -> bool:
            found = await statuses()
            return found.get(waits, ("", ""))[1] == "InterconnectUnavailable" and found.get(never, ("", ""))[1] == (
                "InterconnectDomainTooSmall"
            )

        await wait_for(both_wait, 60)
        why = str(await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=waits)))
        assert "needs 4 replicas in one RDMA fabric; the largest with room is ib-a in sim-1 with room for 3" in why, why
        why = str(await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=never)))
        assert "the largest, ib-b, holds at most 4 even when empty" in why, why

    report, events = await verified_history(fresh_database)
    assert report.identical_pct == 100.0, report.differences
    placed = [e.data for e in events if isinstance(e.data, JobPlaced)]
    assert [p.job_id for p in placed] == [fits]
    assert sorted(r.node for r in placed[0].replicas) == ["b-000", "b-001", "b-002", "b-003"]
    queued = {e.data.job_id: e.data for e in events if isinstance(e.data, JobQueued)}
    assert queued[waits].pending_reason is PendingReason.TOPOLOGY
    assert queued[never].pending_reason is PendingReason.MISCONFIGURED
    assert ReasonCode.INTERCONNECT_UNAVAILABLE in queued[waits].reasons
