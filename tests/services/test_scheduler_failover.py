"""SIGKILL the scheduler leader in the middle of 2,000 submissions on real Kafka: the standby takes
over, every job is placed exactly once, and every recorded cycle still verifies identically."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from events.catalog.decisions import JobPlaced
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobSubmitted
from events.catalog.types import Resources
from events.log import EventLog, open_log
from services.audit.verify import verify
from services.scheduler.core.decide import INPUT_TOPICS
from tests.services.test_scheduler_host import Renaming, decisions, private_topics
from tests.unit.projections.builders import a_node

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kafka, pytest.mark.chaos, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
JOBS = 2000


async def scheduler_process(bootstrap: str, namespace: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "scheduler",
        "--log",
        f"kafka://{bootstrap}",
        "--namespace",
        namespace,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )


async def wait_for_placements(event_log: EventLog, topics: object, at_least: int, timeout_s: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while sum(isinstance(e, JobPlaced) for e in await decisions(event_log, topics)) < at_least:  # type: ignore[arg-type]
        assert loop.time() < deadline, "the leader placed too little before the kill"
        await asyncio.sleep(0.5)


@pytest.mark.timeout(400)
async def test_the_standby_takes_over_from_a_killed_leader_and_nothing_is_placed_twice(kafka_bootstrap: str) -> None:
    event_log = open_log(f"kafka://{kafka_bootstrap}")
    await event_log.start()

    async def unique_name(partitions: int = 1) -> str:
        return f"failover.{uuid.uuid4().hex[:10]}"

    topics = await private_topics(event_log, unique_name)
    pub = Renaming(event_log, topics)
    await pub.start()
    await pub.send(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s1", region="eu", currency="EUR"))
    await pub.send(*[a_node(node=f"n{i:02d}", gpus=8) for i in range(20)])

    leader = await scheduler_process(kafka_bootstrap, topics.prefix)
    standby = None
    try:
        for start in range(0, JOBS, 100):
            await pub.send(
                *[
                    JobSubmitted(
                        job_id=f"job-{i:05d}",
                        name=f"j{i}",
                        tenant=f"t{i % 4}",
                        resources=Resources(cpu_milli=100, memory_mib=256, gpu_milli=50),
                    )
                    for i in range(start, start + 100)
                ]
            )
            if start == 200:
                standby = await scheduler_process(kafka_bootstrap, topics.prefix)
            if start == 1000:
                # Kill the leader in the middle: once it has placed some of what arrived.
                await wait_for_placements(event_log, topics, at_least=200)
                leader.send_signal(signal.SIGKILL)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 240
        while True:
            counts = Counter(e.job_id for e in await decisions(event_log, topics) if isinstance(e, JobPlaced))
            if len(counts) == JOBS or loop.time() > deadline:
                break
            await asyncio.sleep(1)
    finally:
        for process in (leader, standby):
            if process is not None and process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in (leader, standby):
            if process is not None:
                await asyncio.wait_for(process.wait(), 30)
        await pub.close()
    await event_log.close()
    assert len(counts) == JOBS, f"placed {len(counts)} of {JOBS}"
    assert max(counts.values()) == 1, [job for job, n in counts.items() if n > 1][:10]
    event_log = open_log(f"kafka://{kafka_bootstrap}")
    await event_log.start()
    report = await verify(event_log, topics=tuple(topics.name(t) for t in INPUT_TOPICS))
    await event_log.close()
    assert report.cycles >= 2
    assert report.identical_pct == 100.0, report.differences[:5]
