"""The audit archive: every record of every topic copied into an append-only, hash-chained table.

Called by the audit service (``fedsched audit archive``) and by ``fedsched audit chain --verify``.
Calls asyncpg and reads the event log through the ``EventLog`` contract, so it archives Kafka and the
embedded log alike.

Exactly once without a consumer group: the archiver's position in each partition *is* the chain head
row, updated in the same transaction as the records it covers. A restart resumes after the head, so
nothing is skipped or doubled; two archivers serialise on the head row lock.

An outage of the log or of the archive's database does not end ``run``: the pass is tried again with
backoff (``events.plumbing.outage``), from the heads read again from the database (a batch whose commit failed,
or committed unseen, is then re-read and skipped or copied once), on a fresh log reader.

Append-only is enforced twice: a trigger refuses UPDATE and DELETE on the archive, and, because a
superuser can disable triggers, the hash chain reveals any edit, deletion, reordering or truncation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import asyncpg

from events.audit.chain import ArchivedRecord, ChainHead, ChainProblem, ChainVerifier, extend
from events.log.contract import EventLog, LogReader, LogRecord, TopicPartition
from events.log.headers import pack_headers
from events.log.reading import EndWatch, read_to_end
from events.plumbing.outage import Outage, Unreachable, reaching

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


class AuditArchiver:
    """Copies the log into the archive. ``catch_up`` for batch use, ``run`` to follow the log."""

    def __init__(self, log: EventLog, pool: asyncpg.Pool, topics: Sequence[str], *, batch: int = 2000) -> None:
        self._log = log
        self._pool = pool
        self._topics = tuple(sorted(topics))
        self._batch = batch
        self._reader: LogReader | None = None
        self.archived_total = 0
        self._schema_ready = False
        self.positions: dict[TopicPartition, int] = {}
        """Where the archive stood per partition after the latest catch-up (next offset to copy)."""
        self._ends = EndWatch()
        self.outage = Outage("archiver")

    async def _partitions(self) -> list[TopicPartition]:
        return [
            TopicPartition(topic, partition)
            for topic in self._topics
            for partition in range(await self._log.partitions(topic))
        ]

    async def catch_up(self) -> ArchiveProgress:
        """Archive everything committed to the log when called; returns how many records were added."""
        with reaching("log"):
            return await self._catch_up()

    async def _catch_up(self) -> ArchiveProgress:
        if not self._schema_ready:
            with reaching("postgres"):
                await ensure_schema(self._pool)
            self._schema_ready = True
        reader = await self._ensure_reader()
        total = 0
        positions: dict[TopicPartition, int] = {}
        for tp in await self._partitions():
            # The chain head is read once; after that this process knows where it stands. Another
            # archiver may have gone further: what it copied is read again and skipped (``_archive``
            # checks the head under its lock), never copied twice.
            position = self.positions.get(tp)
            positions[tp] = await self._position(tp) if position is None else position
        for tp, end in sorted((await self._ends.ahead(reader, positions)).items()):
            position = positions[tp]
            async for records in read_to_end(reader, tp, position, max_records=self._batch, end=end):
                with reaching("postgres"):
                    archived = await self._archive(tp, records)
                total += archived
                self.archived_total += archived  # counted as committed, though a later batch may fail
                position = records[-1].offset + 1
            positions[tp] = position
            self._ends.reached(tp, position, end)
        self.positions = positions
        return ArchiveProgress(total, positions)

    async def run(self, stop: asyncio.Event, *, idle_wait_s: float = 0.5) -> None:
        try:
            while not stop.is_set():
                try:
                    progress = await self.catch_up()
                except Unreachable as error:
                    await self._after_failure()
                    await self.outage.wait(error.dependency, error.error, stop)
                    continue
                self.outage.recovered()
                if progress.archived == 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), idle_wait_s)
        finally:
            self.outage.forget()

    async def _after_failure(self) -> None:
        # Where we stand is the chain heads: read them again rather than trust a batch whose commit
        # failed (it may have committed). A fresh reader too: the old one's connections may be dead.
        self.positions = {}
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
            self._reader = None

    async def _ensure_reader(self) -> LogReader:
        if self._reader is None:
            self._reader = await self._log.reader()
        return self._reader

    async def _position(self, tp: TopicPartition) -> int:
        with reaching("postgres"):
            offset = await self._pool.fetchval(
                'SELECT "offset" FROM fedsched_audit_heads WHERE topic = $1 AND partition = $2',
                tp.topic,
                tp.partition,
            )
        return 0 if offset is None else int(offset) + 1

    async def _archive(self, tp: TopicPartition, records: Sequence[LogRecord]) -> int:
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
