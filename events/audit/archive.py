"""The audit archive: every record of every topic copied into an append-only, hash-chained table.

Called by the audit service (``fedsched audit archive``) and by ``fedsched audit chain --verify``.
Calls asyncpg and reads the event log through the ``EventLog`` contract, so it archives Kafka and the
embedded log alike.

Exactly once without a consumer group: the archiver's position in each partition *is* the chain head
row, updated in the same transaction as the records it covers. A restart resumes after the head, so
nothing is skipped or doubled; two archivers serialise on the head row lock.

An outage of the log or of the archive's database does not end ``run`` (``events.hosting.loop``): the
pass is tried again with backoff (``events.plumbing.outage``), from the heads read again from the
database (a batch whose commit failed, or committed unseen, is then re-read and skipped or copied once),
on a fresh log reader.

Append-only is enforced twice: a trigger refuses UPDATE and DELETE on the archive, and, because a
superuser can disable triggers, the hash chain reveals any edit, deletion, reordering or truncation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

import asyncpg

from events.audit.chain import ArchivedRecord, ChainHead, ChainProblem, ChainVerifier, extend
from events.hosting.follower import Follower
from events.hosting.loop import ride_out
from events.log.contract import EventLog, LogRecord, TopicPartition
from events.log.headers import pack_headers
from events.plumbing.metrics import Sample
from events.plumbing.outage import Outage, reaching

_SCHEMA_LOCK = 7_215_002

SCHEMA = """
CREATE TABLE IF NOT EXISTS fedsched_audit (
    topic text NOT NULL,
    partition int NOT NULL,
    seq bigint NOT NULL,
    "offset" bigint NOT NULL,
    key bytea,
    value bytea NOT NULL,
    headers bytea NOT NULL,
    timestamp_ms bigint NOT NULL,
    prev_hash bytea NOT NULL,
    hash bytea NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition, seq),
    UNIQUE (topic, partition, "offset")
);
CREATE TABLE IF NOT EXISTS fedsched_audit_heads (
    topic text NOT NULL,
    partition int NOT NULL,
    seq bigint NOT NULL,
    "offset" bigint NOT NULL,
    hash bytea NOT NULL,
    PRIMARY KEY (topic, partition)
);
CREATE OR REPLACE FUNCTION fedsched_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'fedsched_audit is append-only: % refused', TG_OP;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS fedsched_audit_append_only ON fedsched_audit;
CREATE TRIGGER fedsched_audit_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON fedsched_audit
    FOR EACH STATEMENT EXECUTE FUNCTION fedsched_audit_append_only();
"""

_KEY_INDEX = "CREATE INDEX IF NOT EXISTS fedsched_audit_key ON fedsched_audit (key)"

_INSERT = """
INSERT INTO fedsched_audit (topic, partition, seq, "offset", key, value, headers, timestamp_ms, prev_hash, hash)
SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::bigint[], $5::bytea[], $6::bytea[], $7::bytea[],
                     $8::bigint[], $9::bytea[], $10::bytea[])
"""


async def ensure_schema(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
        exists = await conn.fetchval("SELECT to_regclass('fedsched_audit') IS NOT NULL")
        if not exists:
            await conn.execute(SCHEMA)
        if await conn.fetchval("SELECT to_regclass('fedsched_audit_key') IS NULL"):
            # A job's timeline reads its records by key: without this index, every record ever archived
            # (also added to archives made before it existed).
            await conn.execute(_KEY_INDEX)


def _head(row: asyncpg.Record | None) -> ChainHead | None:
    if row is None:
        return None
    return ChainHead(row["topic"], row["partition"], row["seq"], row["offset"], bytes(row["hash"]))


@dataclass(frozen=True, slots=True)
class ArchiveProgress:
    archived: int
    positions: dict[TopicPartition, int]


class ArchiveSink:
    """The archive's transactional sink: a batch of one partition's records chained onto its head, and
    the head moved past them, in one transaction (the head *is* the archiver's position there)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._schema_ready = False

    async def ensure_schema(self) -> None:
        if not self._schema_ready:
            await ensure_schema(self._pool)
            self._schema_ready = True

    async def position(self, tp: TopicPartition) -> int:
        """The next offset to archive in ``tp``: past its chain head (0 before any)."""
        offset = await self._pool.fetchval(
            'SELECT "offset" FROM fedsched_audit_heads WHERE topic = $1 AND partition = $2',
            tp.topic,
            tp.partition,
        )
        return 0 if offset is None else int(offset) + 1

    async def commit(self, records: Sequence[LogRecord], positions: Mapping[TopicPartition, int] | None = None) -> int:
        """Archive ``records`` (one partition's, in offset order); returns how many were new. Records at or
        below the head, copied already by this or another archiver, are skipped under the head's lock.
        ``positions``: implied by the records (the head moves past the last), accepted for the shape."""
        if not records:
            return 0
        tp = records[0].tp
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute(
                'INSERT INTO fedsched_audit_heads (topic, partition, seq, "offset", hash)'
                " VALUES ($1, $2, -1, -1, ''::bytea) ON CONFLICT DO NOTHING",
                tp.topic,
                tp.partition,
            )
            row = await conn.fetchrow(
                "SELECT * FROM fedsched_audit_heads WHERE topic = $1 AND partition = $2 FOR UPDATE",
                tp.topic,
                tp.partition,
            )
            head = _head(row) if row is not None and row["seq"] >= 0 else None
            after = -1 if head is None else head.offset
            fresh = [
                (r.offset, r.key, r.value, pack_headers(r.headers), r.timestamp_ms) for r in records if r.offset > after
            ]
            if not fresh:
                return 0
            chained = list(extend(head, tp.topic, tp.partition, fresh))
            await conn.execute(
                _INSERT,
                [a.topic for a in chained],
                [a.partition for a in chained],
                [a.seq for a in chained],
                [a.offset for a in chained],
                [a.key for a in chained],
                [a.value for a in chained],
                [a.headers for a in chained],
                [a.timestamp_ms for a in chained],
                [a.prev_hash for a in chained],
                [a.hash for a in chained],
            )
            last = chained[-1]
            await conn.execute(
                'UPDATE fedsched_audit_heads SET seq = $3, "offset" = $4, hash = $5'
                " WHERE topic = $1 AND partition = $2",
                tp.topic,
                tp.partition,
                last.seq,
                last.offset,
                last.hash,
            )
            return len(chained)


class AuditArchiver:
    """Copies the log into the archive. ``catch_up`` for batch use, ``run`` to follow the log.

    Every host's shape (``events.hosting``): a ``Follower`` of every topic, positioned at the chain
    heads; the step is the pure chain (``events.audit.chain.extend``, inside the sink); an
    ``ArchiveSink``; ``ride_out`` around it."""

    def __init__(self, log: EventLog, pool: asyncpg.Pool, topics: Sequence[str], *, batch: int = 2000) -> None:
        self._sink = ArchiveSink(pool)
        self.follower = Follower(log, sorted(topics), batch=batch)
        self._positioned = False  # the follower's positions are the chain heads as last read
        self.archived_total = 0
        self.outage = Outage("archiver")

    @property
    def positions(self) -> dict[TopicPartition, int]:
        """Where the archive stood per partition after the latest catch-up (next offset to copy)."""
        return self.follower.positions if self._positioned else {}

    def samples(self) -> list[Sample]:
        """Its counter, for ``/metrics``."""
        return [("fedsched_archived_total", {}, self.archived_total)]

    async def catch_up(self) -> ArchiveProgress:
        """Archive everything committed to the log when called; returns how many records were added."""
        with reaching("log"):
            return await self._catch_up()

    async def _catch_up(self) -> ArchiveProgress:
        with reaching("postgres"):
            await self._sink.ensure_schema()
        if not self._positioned:
            # The chain heads are read once; after that this process knows where it stands. Another
            # archiver may have gone further: what it copied is read again and skipped (``commit``
            # checks the head under its lock), never copied twice.
            await self.follower.start()
            with reaching("postgres"):
                heads = {tp: await self._sink.position(tp) for tp in sorted(self.follower.positions)}
            await self.follower.start(heads)
            self._positioned = True
        total = 0
        async for records in self.follower.committed():
            with reaching("postgres"):
                archived = await self._sink.commit(records)
            total += archived
            self.archived_total += archived  # counted as committed, though a later batch may fail
        return ArchiveProgress(total, dict(self.follower.positions))

    async def run(self, stop: asyncio.Event, *, idle_wait_s: float = 0.5) -> None:
        async def once() -> None:
            if (await self.catch_up()).archived == 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), idle_wait_s)

        await ride_out(once, stop, self.outage, start_over=self._start_over)

    async def _start_over(self) -> None:
        # Where we stand is the chain heads: read them again rather than trust a batch whose commit
        # failed (it may have committed). A fresh reader too: the old one's connections may be dead.
        self._positioned = False
        await self.follower.forget()

    async def close(self) -> None:
        await self.follower.close()


async def iter_archive(pool: asyncpg.Pool, tp: TopicPartition, *, page: int = 5000) -> AsyncIterator[ArchivedRecord]:
    """One partition's archived records in ``seq`` order, page by page (bounded memory)."""
    after = -1
    while True:
        rows = await pool.fetch(
            'SELECT seq, "offset", key, value, headers, timestamp_ms, prev_hash, hash FROM fedsched_audit'
            " WHERE topic = $1 AND partition = $2 AND seq > $3 ORDER BY seq LIMIT $4",
            tp.topic,
            tp.partition,
            after,
            page,
        )
        for row in rows:
            yield ArchivedRecord(
                tp.topic,
                tp.partition,
                row["seq"],
                row["offset"],
                None if row["key"] is None else bytes(row["key"]),
                bytes(row["value"]),
                bytes(row["headers"]),
                row["timestamp_ms"],
                bytes(row["prev_hash"]),
                bytes(row["hash"]),
            )
        if len(rows) < page:
            return
        after = rows[-1]["seq"]


@dataclass(frozen=True, slots=True)
class ChainReport:
    partitions: int
    records: int
    problems: list[ChainProblem]

    @property
    def ok(self) -> bool:
        return not self.problems


async def verify_chain(pool: asyncpg.Pool) -> ChainReport:
    """Walk every partition's chain; report the first problem of each broken partition."""
    await ensure_schema(pool)
    heads = {
        TopicPartition(row["topic"], row["partition"]): _head(row)
        for row in await pool.fetch("SELECT * FROM fedsched_audit_heads WHERE seq >= 0")
    }
    archived = {
        TopicPartition(row["topic"], row["partition"])
        for row in await pool.fetch("SELECT DISTINCT topic, partition FROM fedsched_audit")
    }
    problems: list[ChainProblem] = []
    count = 0
    for tp in sorted(archived | set(heads)):
        verifier = ChainVerifier()
        problem: ChainProblem | None = None
        async for record in iter_archive(pool, tp):
            problem = verifier.feed(record)
            if problem is not None:
                break
        count += verifier.count
        problem = problem or verifier.finish(heads.get(tp))
        if problem is not None:
            problems.append(problem)
    return ChainReport(len(archived | set(heads)), count, problems)
