"""``fedsched audit archive`` and ``fedsched audit chain --verify`` as an operator runs them."""

from __future__ import annotations

import json

import asyncpg
import pytest

from events.catalog.jobs import JobStarted
from events.catalog.topics import JOBS, TOPICS
from events.log import OutRecord, open_log
from events.wire import codec
from events.wire.envelope import Envelope
from tests.cli import fedsched

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]


async def test_operator_archives_the_log_verifies_it_and_sees_tampering(fresh_database: str) -> None:
    log = open_log(fresh_database)
    await log.start()
    await log.create_topics(TOPICS)
    producer = await log.producer()
    records = []
    for i in range(25):
        wire = codec.encode(Envelope(id=f"e{i}", time_ms=1_000 + i, data=JobStarted(job_id=f"job-{i}", cluster="c1")))
        records.append(OutRecord(wire.topic, value=wire.value, key=wire.key, headers=wire.headers))
    await producer.append(records)
    await log.close()

    code, out = await fedsched("audit", "archive", "--once", dsn=fresh_database)
    assert code == 0, out
    assert "archived 25 records" in out
    code, out = await fedsched("audit", "chain", "--verify", "--json", dsn=fresh_database)
    assert code == 0, out
    report = json.loads(out)
    assert (report["ok"], report["records"]) == (True, 25)

    conn = await asyncpg.connect(fresh_database)
    try:
        await conn.execute("SET session_replication_role = replica")
        victim = await conn.fetchrow(f"SELECT partition, seq FROM fedsched_audit WHERE topic = '{JOBS.name}' LIMIT 1")
        await conn.execute(
            "UPDATE fedsched_audit SET value = '{}'::bytea WHERE topic = $1 AND partition = $2 AND seq = $3",
            JOBS.name,
            victim["partition"],
            victim["seq"],
        )
    finally:
        await conn.close()
    code, out = await fedsched("audit", "chain", "--verify", dsn=fresh_database)
    assert code == 1
    assert f"edited: {JOBS.name}[{victim['partition']}] seq {victim['seq']}" in out
