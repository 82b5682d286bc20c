"""The audit archive on real PostgreSQL, fed from real Kafka and from the embedded log: exactly once, the
append-only records and heads history, the conversion of archives of the previous schema, redaction of
credentials, and checkpoints signed by a following archiver."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.audit.archive import AuditArchiver, current_heads, ensure_schema, verify_chain
from events.audit.chain import Tamper, extend
from events.audit.checkpoint import CONTENT_TYPE, Checkpoint
from events.audit.checkpoint_files import CheckpointDir, load_checkpoints, trusted
from events.audit.checkpointer import Checkpointer
from events.audit.merkle import Frontier, leaf_hash, root_of
from events.log import EventLog, OutRecord, TopicPartition
from events.log.headers import pack_headers, unpack_headers

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


async def test_the_heads_are_an_append_only_history_whose_newest_row_is_the_position(
    event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool
) -> None:
    topic = await make_topic(1)
    archiver = AuditArchiver(event_log, archive_pool, [topic], batch=4)
    await append(event_log, topic, 0, 10)
    await archiver.catch_up()
    await append(event_log, topic, 10, 3)
    await archiver.catch_up()
    await archiver.close()
    rows = await archive_pool.fetch(
        'SELECT seq, "offset" FROM fedsched_audit_heads WHERE topic = $1 ORDER BY seq', topic
    )
    # One head per batch committed (4, 4, 2, then 3), none rewritten.
    assert [(r["seq"], r["offset"]) for r in rows] == [(3, 3), (7, 7), (9, 9), (12, 12)]
    for statement in (
        "UPDATE fedsched_audit_heads SET seq = 0",
        "DELETE FROM fedsched_audit_heads",
        "TRUNCATE fedsched_audit_heads",
    ):
        with pytest.raises(asyncpg.RaiseError, match="fedsched_audit_heads is append-only"):
            await archive_pool.execute(statement)
    assert (await verify_chain(archive_pool)).ok


PREVIOUS_SCHEMA = """
CREATE TABLE fedsched_audit (
    topic text NOT NULL, partition int NOT NULL, seq bigint NOT NULL, "offset" bigint NOT NULL, key bytea,
    value bytea NOT NULL, headers bytea NOT NULL, timestamp_ms bigint NOT NULL, prev_hash bytea NOT NULL,
    hash bytea NOT NULL, archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition, seq), UNIQUE (topic, partition, "offset")
);
CREATE TABLE fedsched_audit_heads (
    topic text NOT NULL, partition int NOT NULL, seq bigint NOT NULL, "offset" bigint NOT NULL,
    hash bytea NOT NULL, PRIMARY KEY (topic, partition)
);
CREATE OR REPLACE FUNCTION fedsched_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'fedsched_audit is append-only: % refused', TG_OP;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER fedsched_audit_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON fedsched_audit
    FOR EACH STATEMENT EXECUTE FUNCTION fedsched_audit_append_only();
"""


async def test_an_archive_of_the_previous_schema_is_converted_once_and_goes_on(
    event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool
) -> None:
    topic = await make_topic(2)
    await append(event_log, topic, 0, 30)
    # What the previous archiver left: partition 0 archived up to some record, its one head row updated
    # in place; partition 1 with only the placeholder row (seq -1) it inserted before its first batch.
    reader = await event_log.reader()
    old = await reader.read(TopicPartition(topic, 0), 0, max_records=1000)
    await reader.close()
    assert len(old) >= 4
    done = old[: len(old) // 2]
    chained = list(
        extend(None, topic, 0, [(r.offset, r.key, r.value, pack_headers(r.headers), r.timestamp_ms) for r in done])
    )
    last = chained[-1]
    async with archive_pool.acquire() as conn:
        await conn.execute(PREVIOUS_SCHEMA)
        await conn.executemany(
            'INSERT INTO fedsched_audit (topic, partition, seq, "offset", key, value, headers, timestamp_ms,'
            " prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            [
                (a.topic, a.partition, a.seq, a.offset, a.key, a.value, a.headers, a.timestamp_ms, a.prev_hash, a.hash)
                for a in chained
            ],
        )
        await conn.execute(
            'INSERT INTO fedsched_audit_heads (topic, partition, seq, "offset", hash) VALUES'
            " ($1, 0, $2, $3, $4), ($1, 1, -1, -1, ''::bytea)",
            topic,
            last.seq,
            last.offset,
            last.hash,
        )

    # Two archivers start at once on the old schema: it is converted once, under the schema lock.
    first, second = (AuditArchiver(event_log, archive_pool, [topic], batch=7) for _ in range(2))
    progress = await asyncio.gather(first.catch_up(), second.catch_up())
    await first.close()
    await second.close()
    assert sum(p.archived for p in progress) == 30 - len(done)

    rows = await archive_pool.fetch(
        "SELECT partition, seq, frontier FROM fedsched_audit_heads WHERE topic = $1 ORDER BY partition, seq", topic
    )
    assert rows[0]["partition"] == 0 and rows[0]["seq"] == last.seq  # converted: the first of its history
    assert all(r["seq"] >= 0 for r in rows)  # the placeholder is gone
    assert all(r["frontier"] is not None for r in rows)  # the converted one's computed from its records
    converted = Frontier.from_bytes(last.seq + 1, bytes(rows[0]["frontier"]))
    assert converted.root() == root_of(leaf_hash(a.hash) for a in chained)
    with pytest.raises(asyncpg.RaiseError, match="append-only"):
        await archive_pool.execute("UPDATE fedsched_audit_heads SET seq = seq")
    report = await verify_chain(archive_pool)
    assert report.ok, report.problems
    assert report.records == 30
    # The roots a checkpoint would sign are the RFC 6962 roots over every record's hash.
    for head in await current_heads(archive_pool):
        hashes = await archive_pool.fetch(
            "SELECT hash FROM fedsched_audit WHERE topic = $1 AND partition = $2 ORDER BY seq",
            head.topic,
            head.partition,
        )
        assert head.root == root_of(leaf_hash(bytes(r["hash"])) for r in hashes)
    await ensure_schema(archive_pool)  # converting again is a no-op
    assert (await verify_chain(archive_pool)).ok


async def test_two_archivers_running_at_once_copy_every_record_once(
    event_log: EventLog, make_topic: MakeTopic, fresh_database: str
) -> None:
    topic = await make_topic(3)
    await append(event_log, topic, 0, 200)
    pools = [await asyncpg.create_pool(fresh_database, min_size=1, max_size=2) for _ in range(2)]
    archivers = [AuditArchiver(event_log, pool, [topic], batch=9) for pool in pools]
    try:
        progress = await asyncio.gather(*(a.catch_up() for a in archivers))
        assert sum(p.archived for p in progress) == 200
        await append(event_log, topic, 200, 50)
        progress = await asyncio.gather(*(a.catch_up() for a in archivers))
        assert sum(p.archived for p in progress) == 50
    finally:
        for archiver in archivers:
            await archiver.close()
        for pool in pools:
            await pool.close()
    check = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    try:
        values = [bytes(r["value"]).decode() for r in await check.fetch("SELECT value FROM fedsched_audit")]
        assert sorted(values) == sorted(f"v{i}" for i in range(250))
        report = await verify_chain(check)
        assert report.ok, report.problems
    finally:
        await check.close()


async def test_credentials_in_headers_are_redacted_before_chaining_and_nothing_else_changes(
    event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool
) -> None:
    topic = await make_topic(1)
    producer = await event_log.producer()
    headers = (("ce_type", b"io.fedsched.JobSubmitted"), ("ce_authorization", b"Bearer eyJ.secret.sig"))
    await producer.append(
        [
            OutRecord(topic, value=b"request", key=b"r1", headers=headers),
            OutRecord(topic, value=b"plain", key=b"r2", headers=(("Authorization", b"Bearer x"),)),
            OutRecord(topic, value=b"none", key=b"r3"),
        ]
    )
    await producer.close()
    archiver = AuditArchiver(event_log, archive_pool, [topic])
    await archiver.catch_up()
    await archiver.close()
    reader = await event_log.reader()
    logged = await reader.read(TopicPartition(topic, 0), 0, max_records=10)
    await reader.close()
    rows = await archive_pool.fetch(
        'SELECT "offset", key, value, headers, timestamp_ms FROM fedsched_audit WHERE topic = $1 ORDER BY seq', topic
    )
    archived = [unpack_headers(bytes(r["headers"])) for r in rows]
    assert archived == [
        (("ce_type", b"io.fedsched.JobSubmitted"), ("ce_authorization", b"redacted")),
        (("Authorization", b"redacted"),),
        (),
    ]
    assert b"secret" not in b"".join(bytes(r["headers"]) for r in rows)
    # The archive equals the log but for that header's value.
    assert [(r["offset"], bytes(r["key"]), bytes(r["value"]), r["timestamp_ms"]) for r in rows] == [
        (r.offset, r.key, r.value, r.timestamp_ms) for r in logged
    ]
    assert (await verify_chain(archive_pool)).ok


async def test_a_following_archiver_signs_its_heads_at_its_cadence_into_the_directory_and_the_log(
    event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    topic, checkpoints_topic = await make_topic(2), await make_topic(1)
    key = Ed25519PrivateKey.generate()
    directory = CheckpointDir(tmp_path)
    signer = Checkpointer(key, directory, event_log=event_log, every_s=0.2, topic=checkpoints_topic)
    archiver = AuditArchiver(event_log, archive_pool, [topic, checkpoints_topic], batch=50, checkpointer=signer)
    stop = asyncio.Event()
    run = asyncio.create_task(archiver.run(stop, idle_wait_s=0.02))
    try:
        await append(event_log, topic, 0, 40)
        await wait_until(lambda: signer.newest is not None and _signed(signer.newest, topic) == 40, "signed 40")
        await append(event_log, topic, 40, 10)
        await wait_until(lambda: signer.newest is not None and _signed(signer.newest, topic) == 50, "signed 50")
        # Nothing moves but the checkpoints' own topic: no more checkpoints, however long it runs.
        made = signer.made_total
        await wait_until(lambda: archiver.positions.get(TopicPartition(checkpoints_topic, 0), 0) >= made, "archived")
        looked = signer.looked_total
        await wait_until(lambda: signer.looked_total >= looked + 3, "three more looks at the heads")
        assert signer.made_total == made
    finally:
        stop.set()
        await asyncio.wait_for(run, 30)
        await archiver.close()
    keys = trusted([key.public_key()])
    valid, problems = load_checkpoints(keys, directory=tmp_path)
    assert problems == [] and [c.seq for c in valid] == list(range(made))
    reader = await event_log.reader()
    published = await reader.read(TopicPartition(checkpoints_topic, 0), 0, max_records=1000)
    await reader.close()
    assert [r.value for r in published] == [c.to_bytes() for c in valid]  # the log holds the same bytes
    assert all(r.header("content-type") == CONTENT_TYPE for r in published)
    report = await verify_chain(archive_pool, valid)
    assert report.ok, (report.problems, report.checkpoint_problems)
    assert report.checkpoints == made


def _signed(checkpoint: Checkpoint, topic: str) -> int:
    return sum(h.seq + 1 for h in checkpoint.partitions if h.topic == topic)


async def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.02)


async def test_without_a_key_the_archiver_says_checkpoints_are_off(
    event_log: EventLog, make_topic: MakeTopic, archive_pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    topic = await make_topic(1)
    archiver = AuditArchiver(event_log, archive_pool, [topic])
    with caplog.at_level(logging.WARNING, logger="fedsched.audit"):
        await archiver.catch_up()
        await archiver.catch_up()
    await archiver.close()
    assert caplog.text.count("event=audit_checkpoints_off") == 1
