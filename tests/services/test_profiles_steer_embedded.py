"""End to end on the embedded default: a simulated cluster whose GPUs failed loses a training job to a
stable one, the placement says why, and ``audit verify`` re-executes every cycle identically.

Two simulated clusters of two alike 8-GPU nodes each. Three GPUs of one node of ``sim-1`` fail one after
the other and come back, as its connector reports them; the projections roll the failures up into
``sim-1``'s profile (stability 700: that node's health is 1000 less 200 a failure, its GPUs back); the
scheduler reads the profile from the log, and a 4-GPU training job goes to ``sim-2``.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from events.catalog.inventory import GpuHealthReported, GpuHealthSample
from events.catalog.types import Health
from events.log.postgres import PostgresEventLog
from events.log.publisher import Publisher
from services.api.client import Client, ClientConfig
from services.api.pb import jobs_pb2
from services.audit.verify import verify
from services.runtime import up

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def wait_for(predicate, timeout_s: float = 60.0, seen=lambda: "") -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await predicate():
        assert loop.time() < deadline, f"condition not met in time: {seen()}"
        await asyncio.sleep(0.1)


def health(failing: int | None, failed_before: int) -> GpuHealthReported:
    """What sim-1's connector reports of its node gpu-0: GPU ``failing`` failed (None: all up); each GPU
    that failed, now or before, has one XID error counted."""
    done = failed_before + (failing is not None)
    samples = tuple(
        GpuHealthSample(
            index=i, health=Health.FAILED if i == failing else Health.OK, xid_errors=int(i < done),
            last_xid=79 if i < done else None,
        )
        for i in range(8)
    )  # fmt: skip
    return GpuHealthReported(cluster="sim-1", node="gpu-0", gpus=samples)


async def test_a_cluster_with_recent_gpu_failures_loses_a_training_job_and_says_why(
    fresh_database: str, tmp_path: Path
) -> None:
    nodes = tmp_path / "nodes.csv"
    rows = "".join(f"gpu-{i},64000,262144,8,A100\n" for i in range(4))  # dealt round-robin: 0 and 2 to sim-1
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + rows)
    api = f"127.0.0.1:{free_port()}"
    config = up.UpConfig(
        data_dir=tmp_path, dsn=fresh_database, metrics_listen="127.0.0.1:0", sim_clusters=("sim-1", "sim-2"),
        sim_nodes=nodes, sim_speed=50.0, api_listen=api,
    )  # fmt: skip
    running = await up.start(config)
    assert running.clock is not None
    probe = Publisher(running.log, "sim-1-gpu-probe", clock=running.clock.now_ms)
    await probe.start()
    client = Client(ClientConfig(server=api, token=running.api_token))
    try:
        state = running.scheduler.state

        async def both_seen() -> bool:
            return {"sim-1", "sim-2"} <= set(state.profiles)

        await wait_for(both_seen)
        for failing in range(3):  # GPU 0 fails and comes back, then GPU 1, then GPU 2
            await probe.publish([health(failing, failing)])
        await probe.publish([health(None, 3)])

        async def shaken() -> bool:
            sim_1 = state.profiles.get("sim-1")
            return sim_1 is not None and sim_1.health_milli == 700 and sim_1.recent_failures == 3

        await wait_for(shaken, seen=lambda: state.profiles.get("sim-1"))
        assert state.profiles["sim-2"].health_milli == 1000 and state.profiles["sim-1"].fit_training

        spec = jobs_pb2.JobSpec(
            name="pretrain", tenant="team-a", kind="training", expected_runtime_s=3 * 24 * 3600,
            resources=jobs_pb2.Resources(cpu_milli=8000, memory_mib=16384, gpus=4),
        )  # fmt: skip
        job_id = (
            await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id="steer"))
        ).job_id

        async def placed() -> bool:
            row = await running.pool.fetchrow(
                "SELECT last_decision_type FROM fedsched_rm.read_jobs WHERE entity_key = $1", job_id
            )
            return row is not None and row["last_decision_type"] == "JobPlaced"

        await wait_for(placed, timeout_s=90)
        why = await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=job_id))
        assert why.placement.cluster == "sim-2", why
        said = why.placement.explanation
        assert "sim-2 over sim-1: stability 1000 vs 700 (3 GPU failures in the last day)" in said, said
    finally:
        await client.close()
        await probe.close()
        await up.stop(running)

    log = PostgresEventLog(fresh_database)
    await log.start()
    try:
        report = await verify(log)
    finally:
        await log.close()
    assert report.cycles >= 1
    assert report.identical_pct == 100.0, report.differences
