"""The audit archive on real PostgreSQL, fed from real Kafka and from the embedded log."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
import pytest_asyncio

from events.audit.archive import AuditArchiver, verify_chain
from events.audit.chain import Tamper
from events.log import EventLog, OutRecord

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]

MakeTopic = Callable[..., Awaitable[str]]


@pytest_asyncio.fixture(loop_scope="session")
async def archive_pool(fresh_database: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=4)
    yield pool
    await pool.close()


async def append(log: EventLog, topic: str, start: int, count: int) -> None:
    producer = await log.producer()
    await producer.append(
        [OutRecord(topic, value=f"v{i}".encode(), key=f"k{i % 5}".encode()) for i in range(start, start + count)]
    )
    await producer.close()


async def test_archive_copies_everything_once_and_resumes_after_restart(
    event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool
) -> None:
    topics = [await make_topic(3), await make_topic(1)]
    await append(event_log, topics[0], 0, 120)
    await append(event_log, topics[1], 0, 30)

    archiver = AuditArchiver(event_log, archive_pool, topics, batch=50)
    first = await archiver.catch_up()
    await archiver.close()
    assert first.archived == 150

    # A new archiver (a restart) adds only what came since, never a duplicate.
    await append(event_log, topics[0], 120, 40)
    again = AuditArchiver(event_log, archive_pool, topics, batch=50)
    second = await again.catch_up()
    third = await again.catch_up()
    await again.close()
    assert (second.archived, third.archived) == (40, 0)

    rows = await archive_pool.fetch("SELECT topic, value FROM fedsched_audit ORDER BY topic, partition, seq")
    assert sorted(bytes(r["value"]).decode() for r in rows if r["topic"] == topics[0]) == sorted(
        f"v{i}" for i in range(160)
    )
    assert len(rows) == 190
    report = await verify_chain(archive_pool)
    assert report.ok, report.problems
    assert (report.records, report.partitions) == (190, 4)


async def test_the_archive_refuses_updates_and_deletes(
    event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool
) -> None:
    topic = await make_topic(1)
    await append(event_log, topic, 0, 3)
    archiver = AuditArchiver(event_log, archive_pool, [topic])
    await archiver.catch_up()
    await archiver.close()
    with pytest.raises(asyncpg.RaiseError, match="append-only"):
        await archive_pool.execute("UPDATE fedsched_audit SET value = 'x'")
    with pytest.raises(asyncpg.RaiseError, match="append-only"):
        await archive_pool.execute("DELETE FROM fedsched_audit")


TAMPERING = {
    Tamper.EDITED: "UPDATE fedsched_audit SET value = 'forged' WHERE seq = 4",
    Tamper.DELETED: "DELETE FROM fedsched_audit WHERE seq = 4",
    Tamper.REORDERED: "UPDATE fedsched_audit SET seq = -1 WHERE seq = 4;"
    " UPDATE fedsched_audit SET seq = 4 WHERE seq = 5; UPDATE fedsched_audit SET seq = 5 WHERE seq = -1",
    Tamper.TRUNCATED: "DELETE FROM fedsched_audit WHERE seq >= 8",
}


@pytest.mark.parametrize("kind", list(TAMPERING))
async def test_chain_verify_names_the_first_tampered_record(
    kind: Tamper, event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool
) -> None:
    topic = await make_topic(1)
    await append(event_log, topic, 0, 10)
    archiver = AuditArchiver(event_log, archive_pool, [topic])
    await archiver.catch_up()
    await archiver.close()
    assert (await verify_chain(archive_pool)).ok

    async with archive_pool.acquire() as conn:
        # What an intruder with superuser rights would do: switch the append-only trigger off.
        await conn.execute("SET session_replication_role = replica")
        await conn.execute(TAMPERING[kind])
        await conn.execute("SET session_replication_role = origin")

    report = await verify_chain(archive_pool)
    assert len(report.problems) == 1
    problem = report.problems[0]
    assert (problem.kind, problem.topic) == (kind, topic)
    assert problem.seq == (8 if kind is Tamper.TRUNCATED else 4)


async def test_a_jobs_timeline_reads_its_records_by_key_not_the_whole_archive(
    event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool
) -> None:
    topic = await make_topic(1)
    await append(event_log, topic, 0, 20)
    archiver = AuditArchiver(event_log, archive_pool, [topic], batch=50)
    await archiver.catch_up()
    await archiver.close()
    async with archive_pool.acquire() as conn:
        await conn.execute("SET enable_seqscan = off")  # 20 rows: the planner would rather scan them
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN SELECT * FROM fedsched_audit WHERE key = $1", b"k1"))
    assert "fedsched_audit_key" in plan, plan
    rows = await archive_pool.fetch("SELECT value FROM fedsched_audit WHERE key = $1", b"k1")
    assert sorted(bytes(r["value"]).decode() for r in rows) == sorted(f"v{i}" for i in range(20) if i % 5 == 1)


async def test_an_archiver_behind_another_copies_nothing_twice(
    event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool
) -> None:
    topic = await make_topic(1)
    await append(event_log, topic, 0, 30)
    first, second = (AuditArchiver(event_log, archive_pool, [topic], batch=10) for _ in range(2))
    assert (await first.catch_up()).archived == 30  # first now remembers where it stands
    await append(event_log, topic, 30, 20)
    assert (await second.catch_up()).archived == 20  # second read the head: only the new ones
    await append(event_log, topic, 50, 5)
    assert (await first.catch_up()).archived == 5  # what second copied is read again and skipped
    await first.close()
    await second.close()
    rows = await archive_pool.fetch("SELECT value FROM fedsched_audit WHERE topic = $1", topic)
    assert sorted(bytes(r["value"]).decode() for r in rows) == sorted(f"v{i}" for i in range(55))
    report = await verify_chain(archive_pool)
    assert report.ok, report.problems
