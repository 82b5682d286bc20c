"""Tampering with a real audit archive on PostgreSQL as an intruder with superuser rights would (the
append-only triggers switched off, hashes recomputed where it helps them): each mutation is found
against the signed checkpoints and its first bad position named; the ones the keyless chain cannot see
are shown to need the checkpoints.

The archive is made by the real archiver from the embedded log, signing a checkpoint after each of three
catch-ups, in batches of 5 (head rows at the end of each batch). Topic ``a`` has one partition of 24
records: head rows at seq 4, 7, 12, 15, 20, 23, checkpoints at seq 7, 15 and 23. Topic ``b`` is left alone
and must stay clean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.audit.archive import ArchiveBroken, AuditArchiver, current_heads, iter_archive, verify_chain
from events.audit.chain import GENESIS, ArchivedRecord, ChainHead, Tamper, extend
from events.audit.checkpoint_files import CheckpointDir, load_checkpoints, trusted
from events.audit.checkpointer import Checkpointer
from events.catalog.topics import Cleanup, TopicSpec
from events.log import EventLog, OutRecord, TopicPartition, open_log

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(120)]

A, B = "tamper.a", "tamper.b"
KEY = Ed25519PrivateKey.generate()
KEYS = trusted([KEY.public_key()])


@dataclass
class Archive:
    log: EventLog
    pool: asyncpg.Pool
    checkpoints: Path


@pytest_asyncio.fixture(loop_scope="session")
async def archive(fresh_database: str, tmp_path: Path) -> AsyncIterator[Archive]:
    log = open_log(fresh_database)
    await log.start()
    await log.create_topics(
        [TopicSpec(A, 1, "k", Cleanup.DELETE, -1, "test"), TopicSpec(B, 2, "k", Cleanup.DELETE, -1, "test")]
    )
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=4)
    directory = CheckpointDir(tmp_path / "checkpoints")
    directory.ensure()
    archiver = AuditArchiver(log, pool, [A, B], batch=5, checkpointer=Checkpointer(KEY, directory))
    producer = await log.producer()
    try:
        for round_ in range(3):
            await producer.append(
                [OutRecord(A, value=f"a{round_}.{i}".encode(), key=b"k") for i in range(8)]
                + [OutRecord(B, value=f"b{round_}.{i}".encode(), key=f"k{i}".encode()) for i in range(4)]
            )
            await archiver.catch_up()
        yield Archive(log, pool, directory.path)
    finally:
        await producer.close()
        await archiver.close()
        await pool.close()
        await log.close()


async def as_intruder(pool: asyncpg.Pool, *statements: tuple[str, tuple[object, ...]]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL session_replication_role = replica")  # the triggers are off
        for sql, args in statements:
            await conn.execute(sql, *args)


async def chain_of_a(pool: asyncpg.Pool) -> list[ArchivedRecord]:
    return [record async for record in iter_archive(pool, TopicPartition(A, 0))]


def row(r: ArchivedRecord) -> tuple[object, ...]:
    return (r.topic, r.partition, r.seq, r.offset, r.key, r.value, r.headers, r.timestamp_ms, r.prev_hash, r.hash)


INSERT_RECORD = (
    'INSERT INTO fedsched_audit (topic, partition, seq, "offset", key, value, headers, timestamp_ms, prev_hash, hash)'
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
)


async def byte_flip(pool: asyncpg.Pool) -> None:
    await as_intruder(
        pool,
        (
            "UPDATE fedsched_audit SET value = set_byte(value, 0, get_byte(value, 0) # 1)"
            " WHERE topic = $1 AND seq = 10",
            (A,),
        ),
    )


async def delete(pool: asyncpg.Pool) -> None:
    await as_intruder(pool, ("DELETE FROM fedsched_audit WHERE topic = $1 AND seq = 10", (A,)))


async def insert(pool: asyncpg.Pool) -> None:
    chain = await chain_of_a(pool)
    before = chain[9]
    head = ChainHead(A, 0, before.seq, before.offset, before.hash)
    (forged,) = extend(head, A, 0, [(before.offset + 1, b"k", b"forged", b"", 1)])
    await as_intruder(
        pool,
        ("ALTER TABLE fedsched_audit DROP CONSTRAINT fedsched_audit_topic_partition_offset_key", ()),
        ("UPDATE fedsched_audit SET seq = -seq - 1000 WHERE topic = $1 AND seq >= 10", (A,)),
        ("UPDATE fedsched_audit SET seq = -seq - 999 WHERE topic = $1 AND seq <= -1000", (A,)),
        (INSERT_RECORD, row(forged)),
    )


async def reorder(pool: asyncpg.Pool) -> None:
    await as_intruder(
        pool,
        ("UPDATE fedsched_audit SET seq = -1 WHERE topic = $1 AND seq = 10", (A,)),
        ("UPDATE fedsched_audit SET seq = 10 WHERE topic = $1 AND seq = 11", (A,)),
        ("UPDATE fedsched_audit SET seq = 11 WHERE topic = $1 AND seq = -1", (A,)),
    )


async def truncate(pool: asyncpg.Pool) -> None:
    # The records from seq 18 on, their head rows, and a head forged at the new end: the database agrees
    # with itself; only checkpoint #2 (seq 23) knows better.
    last = (await chain_of_a(pool))[17]
    await as_intruder(
        pool,
        ("DELETE FROM fedsched_audit WHERE topic = $1 AND seq >= 18", (A,)),
        ("DELETE FROM fedsched_audit_heads WHERE topic = $1 AND seq >= 17", (A,)),
        (
            'INSERT INTO fedsched_audit_heads (topic, partition, seq, "offset", hash) VALUES ($1, 0, $2, $3, $4)',
            (A, last.seq, last.offset, last.hash),
        ),
    )


async def rewind(pool: asyncpg.Pool) -> None:
    await as_intruder(pool, ("DELETE FROM fedsched_audit_heads WHERE topic = $1 AND seq > 12", (A,)))


async def rewrite(pool: asyncpg.Pool) -> None:
    # Record 10 changed, every hash after it recomputed, and the head rows after it rewritten to match.
    chain = await chain_of_a(pool)
    previous = chain[9].hash
    rewritten = []
    for record in chain[10:]:
        value = b"edited" if record.seq == 10 else record.value
        changed = dataclasses.replace(record, value=value, prev_hash=previous, hash=GENESIS)
        changed = dataclasses.replace(changed, hash=changed.recomputed_hash())
        rewritten.append(changed)
        previous = changed.hash
    by_seq = {r.seq: r for r in rewritten}
    heads = await pool.fetch("SELECT seq FROM fedsched_audit_heads WHERE topic = $1 AND seq >= 10 ORDER BY seq", A)
    await as_intruder(
        pool,
        ("DELETE FROM fedsched_audit WHERE topic = $1 AND seq >= 10", (A,)),
        *((INSERT_RECORD, row(r)) for r in rewritten),
        ("DELETE FROM fedsched_audit_heads WHERE topic = $1 AND seq >= 10", (A,)),
        *(
            (
                'INSERT INTO fedsched_audit_heads (topic, partition, seq, "offset", hash) VALUES ($1, 0, $2, $3, $4)',
                (A, h["seq"], by_seq[h["seq"]].offset, by_seq[h["seq"]].hash),
            )
            for h in heads
        ),
    )


async def drop(pool: asyncpg.Pool) -> None:
    await as_intruder(
        pool,
        ("DELETE FROM fedsched_audit WHERE topic = $1", (A,)),
        ("DELETE FROM fedsched_audit_heads WHERE topic = $1", (A,)),
    )


@dataclass(frozen=True)
class Case:
    mutate: Callable[[asyncpg.Pool], Awaitable[None]]
    kind: Tamper
    seq: int
    keyless: bool
    """Whether the keyless chain (with the heads history) sees it too."""
    through: int | None = None


CASES = {
    "byte flip": Case(byte_flip, Tamper.EDITED, 10, keyless=True),
    "delete": Case(delete, Tamper.DELETED, 10, keyless=True),
    "insert": Case(insert, Tamper.INSERTED, 10, keyless=True),
    "reorder": Case(reorder, Tamper.REORDERED, 10, keyless=True),
    "truncate with the heads": Case(truncate, Tamper.TRUNCATED, 18, keyless=False, through=23),
    "rewound head": Case(rewind, Tamper.REWOUND, 13, keyless=True),
    "tail rewritten with recomputed hashes": Case(rewrite, Tamper.REWRITTEN, 8, keyless=False, through=15),
    "dropped partition with its head": Case(drop, Tamper.DROPPED, 0, keyless=False, through=23),
}


@pytest.mark.parametrize("name", list(CASES))
async def test_tampering_is_found_against_the_signed_checkpoints_at_its_first_bad_position(
    name: str, archive: Archive
) -> None:
    checkpoints, problems = load_checkpoints(KEYS, directory=archive.checkpoints)
    assert ([c.seq for c in checkpoints], problems) == ([0, 1, 2], [])
    assert (await verify_chain(archive.pool, checkpoints)).ok

    case = CASES[name]
    await case.mutate(archive.pool)

    report = await verify_chain(archive.pool, checkpoints)
    assert len(report.problems) == 1, report.problems
    problem = report.problems[0]
    assert (problem.kind, problem.topic, problem.partition, problem.seq) == (case.kind, A, 0, case.seq), problem
    assert problem.through_seq == case.through
    if problem.kind not in (Tamper.DROPPED, Tamper.TRUNCATED, Tamper.DELETED):
        assert problem.offset is not None  # the log offset of the record there is named too
    keyless = await verify_chain(archive.pool)
    assert keyless.ok is not case.keyless, keyless.problems


async def test_over_a_rewound_head_the_archiver_signs_nothing_and_copies_nothing(archive: Archive) -> None:
    await rewind(archive.pool)
    checkpointer = Checkpointer(KEY, CheckpointDir(archive.checkpoints))
    assert await checkpointer.offer(await current_heads(archive.pool), at_cadence=False) is None
    assert checkpointer.refused_total == 1
    assert [seq for seq, _ in CheckpointDir(archive.checkpoints).files()] == [0, 1, 2]
    # Resuming after the rewound head would chain the same log records a second time: refused, loudly.
    archiver = AuditArchiver(archive.log, archive.pool, [A], checkpointer=checkpointer)
    try:
        with pytest.raises(ArchiveBroken, match=r"tamper\.a\[0\]: the archive already holds records past"):
            await archiver.catch_up()
    finally:
        await archiver.close()
    assert (await archive.pool.fetchval("SELECT count(*) FROM fedsched_audit WHERE topic = $1", A)) == 24


async def test_a_forged_or_missing_checkpoint_file_is_reported(archive: Archive) -> None:
    newest = archive.checkpoints / "checkpoint-000000000002.json"
    newest.write_bytes(newest.read_bytes().replace(b'"seq":23', b'"seq":24'))
    (archive.checkpoints / "checkpoint-000000000001.json").unlink()
    checkpoints, problems = load_checkpoints(KEYS, directory=archive.checkpoints)
    assert [c.seq for c in checkpoints] == [0]
    assert [(p.kind.value, p.checkpoint) for p in problems] == [("bad-signature", 2)]
    report = await verify_chain(archive.pool, checkpoints, problems)
    assert not report.ok and report.problems == []
