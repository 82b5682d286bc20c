"""The in-process projections on the embedded PostgreSQL log: a GPU failure report appended again after
100 later records does not turn the recovered GPU back to failed, and a run's end stamped in the year
9999 goes to the dead letters with the reason instead of making a bucket per hour until then."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from events.catalog.base import Event
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuHealthReported, GpuHealthSample, GpuRate
from events.catalog.jobs import JobStarted, JobSucceeded
from events.catalog.topics import DEAD_LETTERS, TOPICS
from events.catalog.types import Health
from events.log import EventLog, OutRecord, TopicPartition, open_log
from events.log.deadletter import REASON, SOURCE
from events.log.reading import SKEW_VARIABLE, read_to_end
from events.wire.codec import encode
from events.wire.envelope import MAX_TIME_MS, Envelope
from projections.inprocess.runner import ProjectionRunner
from projections.readmodel.rows.tables import SCHEMA
from tests.unit.projections.builders import a_job, a_node, placed

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(120)]


@pytest_asyncio.fixture(loop_scope="session")
async def log_and_pool(fresh_database: str) -> AsyncIterator[tuple[EventLog, asyncpg.Pool]]:
    log = open_log(fresh_database)
    await log.start()
    await log.create_topics(TOPICS)
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=4)
    yield log, pool
    await pool.close()
    await log.close()


def record(event: Event, event_id: str, time_ms: int) -> OutRecord:
    wire = encode(Envelope(id=event_id, time_ms=time_ms, data=event))
    return OutRecord(wire.topic, value=wire.value, key=wire.key, headers=wire.headers)


def health(state: Health) -> GpuHealthReported:
    return GpuHealthReported(cluster="c1", node="n1", gpus=(GpuHealthSample(index=3, health=state, xid_errors=1),))


async def test_a_late_repeat_changes_no_read_model_and_a_far_future_end_is_dead_lettered_with_the_reason(
    log_and_pool: tuple[EventLog, asyncpg.Pool], monkeypatch: pytest.MonkeyPatch
) -> None:
    log, pool = log_and_pool
    monkeypatch.delenv(SKEW_VARIABLE, raising=False)  # the default skew, whatever the environment says
    now = time.time_ns() // 1_000_000
    registered = ClusterRegistered(
        cluster="c1",
        kind=ClusterKind.SIMULATED,
        site="s",
        region="r",
        currency="EUR",
        gpu_rates=(GpuRate(model="A100", micro_per_gpu_hour=3_000_000),),
    )
    story = [registered, a_node(gpus=8), a_job("j1", gpus=1), placed("j1"), JobStarted(job_id="j1", cluster="c1")]
    records = [record(event, f"e{i}", now + i) for i, event in enumerate(story)]
    failed = record(health(Health.FAILED), "failed", now + 10)
    records += [failed, record(health(Health.OK), "recovered", now + 11)]
    records += [record(health(Health.OK), f"later-{i}", now + 12 + i) for i in range(100)]
    producer = await log.producer()
    await producer.append(records)
    await producer.append([failed])  # the failure report again, after 100 later records about the node
    far = record(JobSucceeded(job_id="j1", cluster="c1"), "far-future", MAX_TIME_MS)
    await producer.append([far])
    await producer.close()

    runner = ProjectionRunner(log, pool)
    await runner.start()
    started = time.monotonic()
    await runner.catch_up()
    assert time.monotonic() - started < 60
    await runner.close()

    node = await pool.fetchrow(
        f"SELECT gpu_capacity_milli, failures FROM {SCHEMA}.read_nodes WHERE cluster = 'c1' AND node = 'n1'"
    )
    assert node is not None and (node["gpu_capacity_milli"], node["failures"]) == (8000, 1)
    job = await pool.fetchrow(f"SELECT status FROM {SCHEMA}.read_jobs WHERE entity_key = 'j1'")
    assert job is not None and job["status"] == "running"  # its end in the year 9999 was not folded
    assert await pool.fetchval(f"SELECT count(*) FROM {SCHEMA}.read_usage") == 0
    assert runner.dead_lettered_total == 1

    reader = await log.reader()
    letters = [r async for batch in read_to_end(reader, TopicPartition(DEAD_LETTERS.name, 0)) for r in batch]
    await reader.close()
    assert len(letters) == 1
    letter = letters[0]
    assert letter.value == far.value and letter.header(SOURCE) is not None
    reason = (letter.header(REASON) or b"").decode()
    assert reason.startswith("io.fedsched.JobSucceeded: field 'time': ")
    assert reason.endswith("s ahead of the log's time, more than the allowed skew of 86400 s")
