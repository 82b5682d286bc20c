"""The audit archive: every record of every topic copied into an append-only, hash-chained table.

Called by the audit service (``fedsched audit archive``, inside ``fedsched up``), by ``fedsched audit
chain --verify`` and ``fedsched audit proof``. Calls asyncpg and reads the event log through the
``EventLog`` contract, so it archives Kafka and the embedded log alike; signs checkpoints through
``events.audit.checkpointer`` when given a key.

Exactly once without a consumer group: the archiver's position in each partition *is* its chain head,
the newest row of the partition's heads history, appended in the same transaction as the records it
covers. A restart resumes after the head, so nothing is skipped or doubled; two archivers serialise on a
per-partition transaction lock and read the head under it.

An outage of the log or of the archive's database does not end ``run`` (``events.hosting.loop``): the
pass is tried again with backoff (``events.plumbing.outage``), from the heads read again from the
database (a batch whose commit failed, or committed unseen, is then re-read and skipped or copied once),
on a fresh log reader.

Append-only is enforced three times. A trigger refuses UPDATE, DELETE and TRUNCATE on the records and
on the heads history. Because a superuser can disable triggers, the hash chain reveals any edit,
deletion, insertion, reordering or truncation that leaves the hashes after it alone. Because such a
writer can also recompute the hashes (and append matching heads), the heads are signed in checkpoints
kept outside the database (``events.audit.checkpoint``): with the public key, ``verify_chain`` also
sees a rewritten tail, a rewound head and a dropped partition. Each head row keeps the Merkle frontier
of its partition (``events.audit.merkle``), so a checkpoint's roots cost no re-read of the archive.

What the archive holds is the log, record for record, except that credentials in headers are redacted
before chaining (``events.audit.redact``: ``ce_authorization`` reads ``redacted``).

Archives made before the heads became a history (one updatable row per partition) are converted once,
in place, under the schema lock: their rows become each partition's first history row, with the Merkle
frontier computed from the records (one read of the hashes), and the trigger is added.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

import asyncpg

from events.audit.chain import ArchivedRecord, ChainHead, ChainProblem, ChainVerifier, extend
from events.audit.checkpoint import Checkpoint, CheckpointProblem, PartitionHead, signed_heads
from events.audit.checkpointer import Checkpointer
from events.audit.merkle import AuditPath, Frontier, leaf_hash, root_from_path
from events.audit.proof import InclusionProof
from events.audit.redact import redact_headers
from events.hosting.follower import Follower
from events.hosting.loop import ride_out
from events.log.contract import EventLog, LogRecord, TopicPartition
from events.log.headers import pack_headers
from events.plumbing.metrics import Sample
from events.plumbing.outage import Outage, reaching

log = logging.getLogger("fedsched.audit")

_SCHEMA_LOCK = 7_215_002

_APPEND_ONLY = """
CREATE OR REPLACE FUNCTION fedsched_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS fedsched_audit_append_only ON fedsched_audit;
CREATE TRIGGER fedsched_audit_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON fedsched_audit
    FOR EACH STATEMENT EXECUTE FUNCTION fedsched_audit_append_only();
DROP TRIGGER IF EXISTS fedsched_audit_heads_append_only ON fedsched_audit_heads;
CREATE TRIGGER fedsched_audit_heads_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON fedsched_audit_heads
    FOR EACH STATEMENT EXECUTE FUNCTION fedsched_audit_append_only();
"""

SCHEMA = (
    """
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
    frontier bytea,
    moved_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition, seq)
);
"""
    + _APPEND_ONLY
)
"""The records and the heads history. ``frontier``: the Merkle frontier over records ``0..seq`` (NULL only
on a head converted from the previous schema whose records did not reach it; rebuilt when needed)."""

_KEY_INDEX = "CREATE INDEX IF NOT EXISTS fedsched_audit_key ON fedsched_audit (key)"

_INSERT = """
INSERT INTO fedsched_audit (topic, partition, seq, "offset", key, value, headers, timestamp_ms, prev_hash, hash)
SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::bigint[], $5::bytea[], $6::bytea[], $7::bytea[],
                     $8::bigint[], $9::bytea[], $10::bytea[])
"""

_NEWEST_HEAD = (
    'SELECT seq, "offset", hash, frontier FROM fedsched_audit_heads'
    " WHERE topic = $1 AND partition = $2 ORDER BY seq DESC LIMIT 1"
)

# Each partition's newest head without reading the whole history: a skip scan over the primary key
# (one index probe per partition), since the history grows by a row per batch archived.
_NEWEST_HEADS = """
WITH RECURSIVE parts AS (
    (SELECT topic, partition FROM fedsched_audit_heads ORDER BY topic, partition LIMIT 1)
    UNION ALL
    SELECT later.topic, later.partition FROM parts, LATERAL (
        SELECT h.topic, h.partition FROM fedsched_audit_heads h
        WHERE (h.topic, h.partition) > (parts.topic, parts.partition)
        ORDER BY h.topic, h.partition LIMIT 1
    ) later
)
SELECT head.* FROM parts, LATERAL (
    SELECT h.topic, h.partition, h.seq, h."offset", h.hash, h.frontier FROM fedsched_audit_heads h
    WHERE h.topic = parts.topic AND h.partition = parts.partition ORDER BY h.seq DESC LIMIT 1
) head
ORDER BY head.topic, head.partition
"""

_ARCHIVED_PARTITIONS = """
WITH RECURSIVE parts AS (
    (SELECT topic, partition FROM fedsched_audit ORDER BY topic, partition LIMIT 1)
    UNION ALL
    SELECT later.topic, later.partition FROM parts, LATERAL (
        SELECT a.topic, a.partition FROM fedsched_audit a
        WHERE (a.topic, a.partition) > (parts.topic, parts.partition)
        ORDER BY a.topic, a.partition LIMIT 1
    ) later
)
SELECT topic, partition FROM parts
"""


async def ensure_schema(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
        exists = await conn.fetchval("SELECT to_regclass('fedsched_audit') IS NOT NULL")
        if not exists:
            await conn.execute(SCHEMA)
        elif not await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('fedsched_audit_heads')"
            " AND attname = 'frontier' AND NOT attisdropped)"
        ):
            await _convert_heads(conn)
        if await conn.fetchval("SELECT to_regclass('fedsched_audit_key') IS NULL"):
            # A job's timeline reads its records by key: without this index, every record ever archived
            # (also added to archives made before it existed).
            await conn.execute(_KEY_INDEX)


async def _convert_heads(conn: asyncpg.pool.PoolConnectionProxy[asyncpg.Record]) -> None:
    """The previous schema kept one updatable head row per partition, keyed by partition: make it the
    first row of each partition's history, and append-only from now on."""
    # Rows at seq -1 were the old archiver's placeholders (a row to lock before the first batch).
    await conn.execute("DELETE FROM fedsched_audit_heads WHERE seq < 0")
    primary = await conn.fetchval(
        "SELECT conname FROM pg_constraint WHERE conrelid = 'fedsched_audit_heads'::regclass AND contype = 'p'"
    )
    if primary is not None:
        await conn.execute(f'ALTER TABLE fedsched_audit_heads DROP CONSTRAINT "{primary}"')
    await conn.execute(
        "ALTER TABLE fedsched_audit_heads ADD COLUMN frontier bytea,"
        " ADD COLUMN moved_at timestamptz NOT NULL DEFAULT now(), ADD PRIMARY KEY (topic, partition, seq)"
    )
    # Each head's Merkle frontier, from its records, once: an idle partition would otherwise have it
    # rebuilt for every checkpoint. A partition whose records do not reach its head keeps none (its
    # chain is broken: verify_chain says where).
    converted = 0
    for row in await conn.fetch('SELECT topic, partition, seq, "offset", hash, frontier FROM fedsched_audit_heads'):
        tp = TopicPartition(row["topic"], row["partition"])
        try:
            frontier = await _frontier(conn, tp, row)
        except ArchiveBroken as error:
            log.error("event=audit_heads_converted_without_frontier partition=%s reason=%s", tp, error)
            continue
        await conn.execute(
            "UPDATE fedsched_audit_heads SET frontier = $4 WHERE topic = $1 AND partition = $2 AND seq = $3",
            tp.topic,
            tp.partition,
            row["seq"],
            frontier.to_bytes(),
        )
        converted += 1
    await conn.execute(_APPEND_ONLY)
    log.info(
        "event=audit_heads_converted partitions=%d detail=the heads table is now an append-only history", converted
    )


def _lock_key(tp: TopicPartition) -> int:
    """The transaction lock two archivers serialise on for one partition (a 64-bit key from its name)."""
    digest = hashlib.blake2b(f"fedsched_audit_heads/{tp.topic}/{tp.partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class ArchiveBroken(Exception):
    """The archive does not hold together where the archiver needs it to: ``fedsched audit chain --verify``."""


async def _frontier(
    conn: asyncpg.Pool | asyncpg.pool.PoolConnectionProxy[asyncpg.Record], tp: TopicPartition, row: asyncpg.Record
) -> Frontier:
    """The Merkle frontier at a head row: kept in the row, or rebuilt from the records (a converted head)."""
    size = int(row["seq"]) + 1
    if row["frontier"] is not None:
        return Frontier.from_bytes(size, bytes(row["frontier"]))
    frontier = Frontier()
    async for seq, digest in _hashes(conn, tp, last_seq=size - 1):
        if seq != frontier.size:
            raise ArchiveBroken(
                f"{tp}: the archive has no record at seq {frontier.size}; run fedsched audit chain --verify"
            )
        frontier.append(leaf_hash(digest))
    if frontier.size != size:
        raise ArchiveBroken(f"{tp}: the archive ends at seq {frontier.size - 1}, before its head at seq {size - 1}")
    return frontier


async def _hashes(
    conn: asyncpg.Pool | asyncpg.pool.PoolConnectionProxy[asyncpg.Record],
    tp: TopicPartition,
    *,
    last_seq: int,
    page: int = 20_000,
) -> AsyncIterator[tuple[int, bytes]]:
    """(seq, chain hash) of one partition's records up to ``last_seq``, page by page."""
    after = -1
    while True:
        rows = await conn.fetch(
            "SELECT seq, hash FROM fedsched_audit WHERE topic = $1 AND partition = $2 AND seq > $3 AND seq <= $4"
            " ORDER BY seq LIMIT $5",
            tp.topic,
            tp.partition,
            after,
            last_seq,
            page,
        )
        for row in rows:
            yield int(row["seq"]), bytes(row["hash"])
        if len(rows) < page:
            return
        after = rows[-1]["seq"]


@dataclass(frozen=True, slots=True)
class ArchiveProgress:
    archived: int
    positions: dict[TopicPartition, int]


class ArchiveSink:
    """The archive's transactional sink: a batch of one partition's records chained onto its head, and a
    new head appended past them, in one transaction (the newest head *is* the archiver's position)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._schema_ready = False

    async def ensure_schema(self) -> None:
        if not self._schema_ready:
            await ensure_schema(self._pool)
            self._schema_ready = True

    async def position(self, tp: TopicPartition) -> int:
        """The next offset to archive in ``tp``: past its newest head (0 before any)."""
        offset = await self._pool.fetchval(
            'SELECT "offset" FROM fedsched_audit_heads WHERE topic = $1 AND partition = $2 ORDER BY seq DESC LIMIT 1',
            tp.topic,
            tp.partition,
        )
        return 0 if offset is None else int(offset) + 1

    async def commit(self, records: Sequence[LogRecord], positions: Mapping[TopicPartition, int] | None = None) -> int:
        """Archive ``records`` (one partition's, in offset order); returns how many were new. Records at or
        below the head, copied already by this or another archiver, are skipped: the head is read under
        the partition's lock. ``positions``: implied by the records (the head moves past the last),
        accepted for the shape."""
        if not records:
            return 0
        tp = records[0].tp
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(tp))
            row = await conn.fetchrow(_NEWEST_HEAD, tp.topic, tp.partition)
            head = (
                None
                if row is None
                else ChainHead(tp.topic, tp.partition, row["seq"], row["offset"], bytes(row["hash"]))
            )
            after = -1 if head is None else head.offset
            fresh = [
                (r.offset, r.key, r.value, pack_headers(redact_headers(r.headers)), r.timestamp_ms)
                for r in records
                if r.offset > after
            ]
            if not fresh:
                return 0
            frontier = Frontier() if row is None else await _frontier(conn, tp, row)
            chained = list(extend(head, tp.topic, tp.partition, fresh))
            for record in chained:
                frontier.append(leaf_hash(record.hash))
            try:
                await self._insert(conn, chained)
            except asyncpg.UniqueViolationError:
                where = "no head" if head is None else f"its head at seq {head.seq} (log offset {head.offset})"
                raise ArchiveBroken(
                    f"{tp}: the archive already holds records past the archiver's position ({where}): its heads"
                    " were rewound or records were added behind its back; nothing was archived."
                    " Run fedsched audit chain --verify"
                ) from None
            last = chained[-1]
            await conn.execute(
                'INSERT INTO fedsched_audit_heads (topic, partition, seq, "offset", hash, frontier)'
                " VALUES ($1, $2, $3, $4, $5, $6)",
                tp.topic,
                tp.partition,
                last.seq,
                last.offset,
                last.hash,
                frontier.to_bytes(),
            )
            return len(chained)

    @staticmethod
    async def _insert(conn: asyncpg.pool.PoolConnectionProxy[asyncpg.Record], chained: list[ArchivedRecord]) -> None:
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


async def current_heads(pool: asyncpg.Pool) -> list[PartitionHead]:
    """Every partition's newest head with its Merkle root: what a checkpoint signs."""
    heads = []
    for row in await pool.fetch(_NEWEST_HEADS):
        tp = TopicPartition(row["topic"], row["partition"])
        root = (await _frontier(pool, tp, row)).root()
        heads.append(PartitionHead(tp.topic, tp.partition, row["seq"], row["offset"], bytes(row["hash"]), root))
    return heads


class AuditArchiver:
    """Copies the log into the archive. ``catch_up`` for batch use, ``run`` to follow the log.

    Every host's shape (``events.hosting``): a ``Follower`` of every topic, positioned at the chain
    heads; the step is the pure chain (``events.audit.chain.extend``, inside the sink); an
    ``ArchiveSink``; ``ride_out`` around it. With a ``Checkpointer``, the heads are signed after a
    pass when they moved: at its cadence in ``run``, and at the end of every ``catch_up``."""

    def __init__(
        self,
        log: EventLog,
        pool: asyncpg.Pool,
        topics: Sequence[str],
        *,
        batch: int = 2000,
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self._sink = ArchiveSink(pool)
        self._pool = pool
        self.follower = Follower(log, sorted(topics), batch=batch)
        self._positioned = False  # the follower's positions are the chain heads as last read
        self.archived_total = 0
        self.outage = Outage("archiver")
        self.checkpointer = checkpointer
        self._warned = False

    @property
    def positions(self) -> dict[TopicPartition, int]:
        """Where the archive stood per partition after the latest catch-up (next offset to copy)."""
        return self.follower.positions if self._positioned else {}

    def samples(self) -> list[Sample]:
        """Its counters, for ``/metrics``."""
        samples: list[Sample] = [("fedsched_archived_total", {}, self.archived_total)]
        if self.checkpointer is not None:
            samples += self.checkpointer.samples()
        return samples

    async def catch_up(self) -> ArchiveProgress:
        """Archive everything committed to the log when called, then sign the heads if they moved;
        returns how many records were added."""
        progress = await self._pass()
        await self._checkpoint(at_cadence=False)
        return progress

    async def _pass(self) -> ArchiveProgress:
        self._warn_without_checkpoints()
        with reaching("log"):
            return await self._catch_up()

    def _warn_without_checkpoints(self) -> None:
        if self.checkpointer is None and not self._warned:
            self._warned = True
            log.warning(
                "event=audit_checkpoints_off detail=no signing key: the archive's heads are not signed, so"
                " whoever can write its database can rewrite a tail or rewind a head undetected"
                " (fedsched audit keygen, then --signing-key and --checkpoint-dir)"
            )

    async def _checkpoint(self, *, at_cadence: bool) -> None:
        if self.checkpointer is None:
            return
        with reaching("postgres"):
            heads = await current_heads(self._pool)
        await self.checkpointer.offer(heads, at_cadence=at_cadence)

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
            archived = (await self._pass()).archived
            if self.checkpointer is not None and self.checkpointer.due():
                await self._checkpoint(at_cadence=True)
            if archived == 0:
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
        if self.checkpointer is not None:
            await self.checkpointer.close()


_RECORD_COLUMNS = 'a.seq, a."offset", a.key, a.value, a.headers, a.timestamp_ms, a.prev_hash, a.hash'


def _record(tp: TopicPartition, row: asyncpg.Record) -> ArchivedRecord:
    return ArchivedRecord(
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


async def iter_archive(pool: asyncpg.Pool, tp: TopicPartition, *, page: int = 5000) -> AsyncIterator[ArchivedRecord]:
    """One partition's archived records in ``seq`` order, page by page (bounded memory)."""
    async for record, _ in _iter_with_heads(pool, tp, page=page):
        yield record


async def _iter_with_heads(
    pool: asyncpg.Pool, tp: TopicPartition, *, page: int = 5000
) -> AsyncIterator[tuple[ArchivedRecord, ChainHead | None]]:
    """Each record in ``seq`` order with the archiver's head row at its seq, if one was recorded there."""
    after = -1
    while True:
        rows = await pool.fetch(
            f'SELECT {_RECORD_COLUMNS}, h."offset" AS head_offset, h.hash AS head_hash FROM fedsched_audit a'
            " LEFT JOIN fedsched_audit_heads h ON h.topic = a.topic AND h.partition = a.partition AND h.seq = a.seq"
            " WHERE a.topic = $1 AND a.partition = $2 AND a.seq > $3 ORDER BY a.seq LIMIT $4",
            tp.topic,
            tp.partition,
            after,
            page,
        )
        for row in rows:
            head = None
            if row["head_hash"] is not None:
                head = ChainHead(tp.topic, tp.partition, row["seq"], row["head_offset"], bytes(row["head_hash"]))
            yield _record(tp, row), head
        if len(rows) < page:
            return
        after = rows[-1]["seq"]


@dataclass(frozen=True, slots=True)
class ChainReport:
    partitions: int
    records: int
    problems: list[ChainProblem]
    checkpoint_problems: list[CheckpointProblem]
    checkpoints: int
    """How many signed checkpoints the archive was checked against (0: none, so only the keyless chain)."""
    newest_checkpoint: Checkpoint | None
    unsigned_records: int
    """Records archived after the newest signed head of their partition (none signed: all of them)."""

    @property
    def ok(self) -> bool:
        return not self.problems and not self.checkpoint_problems


async def verify_chain(
    pool: asyncpg.Pool,
    checkpoints: Sequence[Checkpoint] = (),
    checkpoint_problems: Sequence[CheckpointProblem] = (),
) -> ChainReport:
    """Walk every partition's chain against the heads history and the ``checkpoints`` (whose signatures
    the caller checked); report the first problem of each broken partition. ``checkpoint_problems``: what
    the caller found wrong with the checkpoints themselves, carried into the report."""
    await ensure_schema(pool)
    newest = {
        (row["topic"], row["partition"]): ChainHead(
            row["topic"], row["partition"], row["seq"], row["offset"], bytes(row["hash"])
        )
        for row in await pool.fetch(_NEWEST_HEADS)
    }
    archived = {(row["topic"], row["partition"]) for row in await pool.fetch(_ARCHIVED_PARTITIONS)}
    signed = signed_heads(checkpoints)
    problems: list[ChainProblem] = []
    count = unsigned = 0
    partitions = sorted(archived | set(newest) | set(signed))
    for where in partitions:
        verifier = ChainVerifier(*where, newest=newest.get(where), signed=signed.get(where, ()))
        problem: ChainProblem | None = None
        async for record, head in _iter_with_heads(pool, TopicPartition(*where)):
            problem = verifier.feed(record, head)
            if problem is not None:
                break
        count += verifier.count
        problem = problem or verifier.finish()
        if problem is not None:
            problems.append(problem)
        unsigned += max(0, verifier.count - 1 - verifier.signed_through)
    return ChainReport(
        partitions=len(partitions),
        records=count,
        problems=problems,
        checkpoint_problems=list(checkpoint_problems),
        checkpoints=len(checkpoints),
        newest_checkpoint=max(checkpoints, key=lambda c: c.seq, default=None),
        unsigned_records=unsigned,
    )


class ProofError(Exception):
    """No inclusion proof can be made for what was asked: the message says why."""


async def inclusion_proof(
    pool: asyncpg.Pool, checkpoint: Checkpoint, tp: TopicPartition, offset: int
) -> InclusionProof:
    """The RFC 6962 inclusion proof of the record archived from ``tp`` at log ``offset``, against the root
    ``checkpoint`` signs for ``tp``; checked against that root before it is returned."""
    head = checkpoint.head((tp.topic, tp.partition))
    if head is None:
        raise ProofError(f"checkpoint #{checkpoint.seq} signs no head of {tp}")
    row = await pool.fetchrow(
        f'SELECT {_RECORD_COLUMNS} FROM fedsched_audit a WHERE a.topic = $1 AND a.partition = $2 AND a."offset" = $3',
        tp.topic,
        tp.partition,
        offset,
    )
    if row is None:
        raise ProofError(f"no record of {tp} at log offset {offset} is archived")
    record = _record(tp, row)
    if record.seq > head.seq:
        raise ProofError(
            f"{tp} log offset {offset} was archived at seq {record.seq}, after checkpoint #{checkpoint.seq} (which"
            f" signs up to seq {head.seq}): prove it against a later checkpoint"
        )
    builder = AuditPath(record.seq, head.seq + 1)
    async for seq, digest in _hashes(pool, tp, last_seq=head.seq):
        if seq != builder.seen:
            raise ProofError(
                f"{tp}: the archive has no record at seq {builder.seen}: run fedsched audit chain --verify"
            )
        builder.add(leaf_hash(digest))
    if builder.seen != head.seq + 1:
        raise ProofError(f"{tp}: the archive ends before seq {head.seq}: run fedsched audit chain --verify")
    proof = InclusionProof.for_record(checkpoint, record, builder.path())
    if (
        proof.record_hash() != record.hash
        or root_from_path(leaf_hash(record.hash), record.seq, head.seq + 1, proof.path) != head.root
    ):
        raise ProofError(
            f"{tp}: the archive does not match what checkpoint #{checkpoint.seq} signed:"
            " run fedsched audit chain --verify"
        )
    return proof
