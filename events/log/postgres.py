"""The embedded event log: ordered partitions in one PostgreSQL table, with Kafka's contract.

Called by hosts in embedded mode (``fedsched up``) through ``events.log.open_log``. Calls asyncpg.

Why offsets are dense and never skipped by a tailing reader: an append takes the row lock of each
partition's counter (``UPDATE ... SET next_offset = next_offset + n``) and holds it until commit, so
offsets are handed out in commit order. A sequence would not do: it hands out numbers before commit,
and a reader could pass a number whose row commits later. Partitions are locked in sorted order so two
multi-partition appends cannot deadlock.

Fencing: each transactional id has an epoch row. A new producer bumps the epoch; an append reads it
``FOR SHARE`` inside its transaction and fails with ``ProducerFenced`` if it moved on. The bump waits
for in-flight appends of the old producer, so an append is either before the fence or refused.

Groups: a member owns a partition while it holds a session-level advisory lock on it; when its
connection dies (a killed process), PostgreSQL releases the lock and another member takes over.
Members share the partitions evenly, seen through a heartbeat table.

After the server restarts, the pool reconnects by itself; the listening connection is made again by the
next reader that asks for the commit signal (at most once a second), and every waiter is woken then, so
nothing committed meanwhile waits for a reader's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING

import asyncpg

from events.catalog.topics import TopicSpec, murmur2, partition_for
from events.log.contract import (
    Appended,
    GroupOffsets,
    LogRecord,
    OutRecord,
    ProducerFenced,
    TopicPartition,
    UnknownTopic,
)
from events.log.headers import pack_headers, unpack_headers

if TYPE_CHECKING:  # asyncpg's pool proxy is generic in its stubs only
    from asyncpg.pool import PoolConnectionProxy

    PooledConnection = PoolConnectionProxy[asyncpg.Record]
    """A connection taken from the log's pool for one unit of work (appends, offsets, an epoch check)."""

_SCHEMA_LOCK = 7_215_001
_NOTIFY_CHANNEL = "fedsched_log"
_MEMBER_TIMEOUT_S = 10.0
_REBALANCE_EVERY_S = 1.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS fedsched_log_topics (
    topic text PRIMARY KEY,
    partitions int NOT NULL CHECK (partitions > 0),
    cleanup text NOT NULL,
    retention_ms bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS fedsched_log_partitions (
    topic text NOT NULL REFERENCES fedsched_log_topics (topic),
    partition int NOT NULL,
    next_offset bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS fedsched_log_records (
    topic text NOT NULL,
    partition int NOT NULL,
    "offset" bigint NOT NULL,
    key bytea,
    value bytea NOT NULL,
    headers bytea NOT NULL,
    timestamp_ms bigint NOT NULL,
    PRIMARY KEY (topic, partition, "offset")
);
CREATE TABLE IF NOT EXISTS fedsched_log_group_offsets (
    group_id text NOT NULL,
    topic text NOT NULL,
    partition int NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);
CREATE TABLE IF NOT EXISTS fedsched_log_group_members (
    group_id text NOT NULL,
    member_id text NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    PRIMARY KEY (group_id, member_id)
);
CREATE TABLE IF NOT EXISTS fedsched_log_producers (
    transactional_id text PRIMARY KEY,
    epoch bigint NOT NULL
);
"""

_INSERT_RECORDS = """
INSERT INTO fedsched_log_records (topic, partition, "offset", key, value, headers, timestamp_ms)
SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[], $4::bytea[], $5::bytea[], $6::bytea[], $7::bigint[])
"""

_UPSERT_OFFSETS = """
INSERT INTO fedsched_log_group_offsets (group_id, topic, partition, next_offset)
SELECT $1, * FROM unnest($2::text[], $3::int[], $4::bigint[])
ON CONFLICT (group_id, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset
"""

_READ = """
SELECT "offset", key, value, headers, timestamp_ms FROM fedsched_log_records
WHERE topic = $1 AND partition = $2 AND "offset" >= $3
ORDER BY "offset" LIMIT $4
"""

# Per partition, the records from its position on (the LATERAL keeps each partition an index range scan);
# ordered by distance from the position, so a cut by the limit leaves every partition a contiguous prefix
# and a busy partition cannot starve the others.
_READ_MANY = """
SELECT p.topic, p.partition, r."offset", r.key, r.value, r.headers, r.timestamp_ms
FROM unnest($1::text[], $2::int[], $3::bigint[]) AS p(topic, partition, position)
CROSS JOIN LATERAL (
    SELECT "offset", key, value, headers, timestamp_ms FROM fedsched_log_records
    WHERE topic = p.topic AND partition = p.partition AND "offset" >= p.position
    ORDER BY "offset" LIMIT $4
) AS r
ORDER BY r."offset" - p.position, p.topic, p.partition
LIMIT $4
"""


class PostgresEventLog:
    """``EventLog`` on PostgreSQL. One pool for appends and reads, one connection listening for commits."""

    commit_markers = False
    snapshot_reads = True

    def __init__(self, dsn: str, *, pool_size: int = 10) -> None:
        self._dsn = dsn
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None
        self._wakeup = asyncio.Event()
        self._partitions: dict[str, int] = {}
        self._relisten: asyncio.Task[None] | None = None
        self._relistened_at = -math.inf

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        self._pool = await asyncpg.create_pool(self._dsn, min_size=1, max_size=self._pool_size)
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
            await conn.execute(SCHEMA)
        self._listener = await asyncpg.connect(self._dsn)
        await self._listener.add_listener(_NOTIFY_CHANNEL, self._on_notify)

    async def close(self) -> None:
        relisten, self._relisten = self._relisten, None
        if relisten is not None:
            relisten.cancel()
            with contextlib.suppress(BaseException):
                await relisten
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the log is not started")
        return self._pool

    def _on_notify(self, *_: object) -> None:
        # Waiters hold the old event; replacing it means each wake-up is seen by every waiter once.
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    def commit_signal(self) -> asyncio.Event:
        """An event set at the next commit to the log (used by readers to tail without polling)."""
        listener = self._listener
        if listener is not None and listener.is_closed() and self._relisten is None:
            now = time.monotonic()
            if now - self._relistened_at >= 1.0:
                self._relistened_at = now
                self._relisten = asyncio.get_running_loop().create_task(self._listen_again(listener))
        return self._wakeup

    async def _listen_again(self, lost: asyncpg.Connection) -> None:
        """A new listening connection after the server dropped the last one (a failure: the next ask)."""
        try:
            listener = await asyncpg.connect(self._dsn)
            await listener.add_listener(_NOTIFY_CHANNEL, self._on_notify)
        except Exception:
            return  # still away
        finally:
            self._relisten = None
        if self._listener is not lost:  # closed meanwhile
            await listener.close()
            return
        self._listener = listener
        self._on_notify()  # what was committed while nobody listened: every waiter reads again

    # -- topics ----------------------------------------------------------------------------------

    async def create_topics(self, specs: Sequence[TopicSpec]) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            for spec in specs:
                await conn.execute(
                    "INSERT INTO fedsched_log_topics (topic, partitions, cleanup, retention_ms)"
                    " VALUES ($1, $2, $3, $4) ON CONFLICT (topic) DO NOTHING",
                    spec.name,
                    spec.partitions,
                    spec.cleanup.value,
                    spec.retention_ms,
                )
                await conn.execute(
                    "INSERT INTO fedsched_log_partitions (topic, partition)"
                    " SELECT $1, generate_series(0, $2 - 1) ON CONFLICT DO NOTHING",
                    spec.name,
                    spec.partitions,
                )

    async def partitions(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            count = await self.pool.fetchval("SELECT partitions FROM fedsched_log_topics WHERE topic = $1", topic)
            if count is None:
                raise UnknownTopic(topic)
            self._partitions[topic] = count
        return count

    async def topics(self) -> list[str]:
        rows = await self.pool.fetch("SELECT topic FROM fedsched_log_topics ORDER BY topic")
        return [row["topic"] for row in rows]

    # -- ports -----------------------------------------------------------------------------------

    async def producer(self, transactional_id: str | None = None) -> PostgresProducer:
        producer = PostgresProducer(self, transactional_id)
        await producer.start()
        return producer

    async def tail(self, positions: Mapping[TopicPartition, int]) -> PostgresTail:
        return PostgresTail(self, positions)

    async def reader(self) -> PostgresReader:
        return PostgresReader(self)

    async def group_consumer(
        self, group_id: str, topics: Sequence[str], *, member_name: str | None = None, records: bool = True
    ) -> PostgresGroupConsumer:
        consumer = PostgresGroupConsumer(self, group_id, topics, records, member_id=member_name)
        await consumer.start()
        return consumer

    async def read_partition(self, tp: TopicPartition, offset: int, max_records: int) -> list[LogRecord]:
        rows = await self.pool.fetch(_READ, tp.topic, tp.partition, offset, max_records)
        return [
            LogRecord(tp.topic, tp.partition, row[0], row[1], row[2], unpack_headers(row[3]), row[4]) for row in rows
        ]

    async def end_offset(self, tp: TopicPartition) -> int:
        value = await self.pool.fetchval(
            "SELECT next_offset FROM fedsched_log_partitions WHERE topic = $1 AND partition = $2",
            tp.topic,
            tp.partition,
        )
        if value is None:
            raise UnknownTopic(tp.topic)
        return int(value)

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        rows = await self.pool.fetch(
            "SELECT topic, partition, next_offset FROM fedsched_log_partitions"
            " WHERE (topic, partition) IN (SELECT * FROM unnest($1::text[], $2::int[]))",
            [tp.topic for tp in tps],
            [tp.partition for tp in tps],
        )
        found = {TopicPartition(row["topic"], row["partition"]): int(row["next_offset"]) for row in rows}
        for tp in tps:
            if tp not in found:
                raise UnknownTopic(tp.topic)
        return {tp: found[tp] for tp in tps}

    async def committed(self, group_id: str, tp: TopicPartition) -> int | None:
        value = await self.pool.fetchval(
            "SELECT next_offset FROM fedsched_log_group_offsets WHERE group_id = $1 AND topic = $2 AND partition = $3",
            group_id,
            tp.topic,
            tp.partition,
        )
        return None if value is None else int(value)

    async def commit_offsets(self, conn: PooledConnection, group: GroupOffsets) -> None:
        items = sorted(group.offsets.items())
        await conn.execute(
            _UPSERT_OFFSETS,
            group.group_id,
            [tp.topic for tp, _ in items],
            [tp.partition for tp, _ in items],
            [offset for _, offset in items],
        )


class PostgresProducer:
    def __init__(self, log: PostgresEventLog, transactional_id: str | None) -> None:
        self._log = log
        self._transactional_id = transactional_id
        self._epoch: int | None = None
        self._fenced = False

    async def start(self) -> None:
        if self._transactional_id is not None:
            self._epoch = await self._log.pool.fetchval(
                "INSERT INTO fedsched_log_producers (transactional_id, epoch) VALUES ($1, 0)"
                " ON CONFLICT (transactional_id) DO UPDATE SET epoch = fedsched_log_producers.epoch + 1"
                " RETURNING epoch",
                self._transactional_id,
            )

    async def append(self, records: Sequence[OutRecord], *, offsets: GroupOffsets | None = None) -> list[Appended]:
        async with self._open() as tx:
            appended = await tx.append(records)
            if offsets is not None:
                await tx.commit_offsets(offsets)
        return appended

    def transaction(self) -> contextlib.AbstractAsyncContextManager[PostgresTransaction]:
        if self._transactional_id is None:
            raise ValueError("a transaction needs a producer with a transactional id")
        return self._open()

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[PostgresTransaction]:
        if self._fenced:
            raise ProducerFenced(f"producer {self._transactional_id!r} was fenced by a newer instance")
        async with self._log.pool.acquire() as conn, conn.transaction():
            await self._check_epoch(conn)
            tx = PostgresTransaction(self._log, conn)
            yield tx
            if tx.appended:
                await conn.execute("SELECT pg_notify($1, '')", _NOTIFY_CHANNEL)

    async def _check_epoch(self, conn: PooledConnection) -> None:
        if self._transactional_id is None:
            return
        epoch = await conn.fetchval(
            "SELECT epoch FROM fedsched_log_producers WHERE transactional_id = $1 FOR SHARE",
            self._transactional_id,
        )
        if epoch != self._epoch:
            self._fenced = True
            raise ProducerFenced(f"producer {self._transactional_id!r} was fenced by a newer instance")

    async def close(self) -> None:
        return None


class PostgresTransaction:
    """Appends inside one PostgreSQL transaction; partition counters stay locked until it ends."""

    def __init__(self, log: PostgresEventLog, conn: PooledConnection) -> None:
        self._log = log
        self._conn = conn
        self.appended = False

    async def append(self, records: Sequence[OutRecord]) -> list[Appended]:
        if not records:
            return []
        routed = [await self._route(record) for record in records]
        by_tp: dict[TopicPartition, list[int]] = defaultdict(list)
        for index, tp in enumerate(routed):
            by_tp[tp].append(index)
        positions = [0] * len(records)
        for tp in sorted(by_tp):
            indexes = by_tp[tp]
            base = await self._conn.fetchval(
                "UPDATE fedsched_log_partitions SET next_offset = next_offset + $3"
                " WHERE topic = $1 AND partition = $2 RETURNING next_offset - $3",
                tp.topic,
                tp.partition,
                len(indexes),
            )
            if base is None:
                raise UnknownTopic(tp.topic)
            for step, index in enumerate(indexes):
                positions[index] = base + step
        await self._conn.execute(
            _INSERT_RECORDS,
            [tp.topic for tp in routed],
            [tp.partition for tp in routed],
            positions,
            [record.key for record in records],
            [record.value for record in records],
            [pack_headers(record.headers) for record in records],
            [int(time.time() * 1000)] * len(records),
        )
        self.appended = True
        return [Appended(tp.topic, tp.partition, positions[i]) for i, tp in enumerate(routed)]

    async def commit_offsets(self, offsets: GroupOffsets) -> None:
        if offsets.offsets:
            await self._log.commit_offsets(self._conn, offsets)

    async def _route(self, record: OutRecord) -> TopicPartition:
        count = await self._log.partitions(record.topic)
        partition = record.partition
        if partition is None:
            partition = partition_for(record.key, count)
        elif not 0 <= partition < count:
            raise ValueError(f"partition {partition} out of range for {record.topic} ({count} partitions)")
        return TopicPartition(record.topic, partition)


class PostgresReader:
    def __init__(self, log: PostgresEventLog) -> None:
        self._log = log

    async def read(
        self, tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0
    ) -> list[LogRecord]:
        deadline = time.monotonic() + timeout_s
        while True:
            signal = self._log.commit_signal()
            records = await self._log.read_partition(tp, offset, max_records)
            remaining = deadline - time.monotonic()
            if records or remaining <= 0:
                return records
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(signal.wait(), remaining)

    async def end_offset(self, tp: TopicPartition) -> int:
        return await self._log.end_offset(tp)

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._log.end_offsets(tps)

    async def caught_up(self, tp: TopicPartition, offset: int) -> bool:
        return offset >= await self._log.end_offset(tp)

    async def close(self) -> None:
        return None


class PostgresTail:
    """Reads every partition of the tail in one query and sleeps on the commit signal in between."""

    def __init__(self, log: PostgresEventLog, positions: Mapping[TopicPartition, int]) -> None:
        self._log = log
        self._positions = dict(positions)
        self._order = sorted(self._positions)

    async def poll(self, *, max_records: int = 5000, timeout_s: float = 0.0) -> list[LogRecord]:
        deadline = time.monotonic() + timeout_s
        while True:
            signal = self._log.commit_signal()
            rows = await self._log.pool.fetch(
                _READ_MANY,
                [tp.topic for tp in self._order],
                [tp.partition for tp in self._order],
                [self._positions[tp] for tp in self._order],
                max_records,
            )
            out = [LogRecord(r[0], r[1], r[2], r[3], r[4], unpack_headers(r[5]), r[6]) for r in rows]
            for record in out:
                self._positions[TopicPartition(record.topic, record.partition)] = record.offset + 1
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(signal.wait(), remaining)

    def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    async def close(self) -> None:
        return None


class PostgresGroupConsumer:
    """A group member. Owns partitions through advisory locks held on its own connection."""

    def __init__(
        self,
        log: PostgresEventLog,
        group_id: str,
        topics: Sequence[str],
        records: bool = True,
        *,
        member_id: str | None = None,
    ) -> None:
        self._log = log
        self._group_id = group_id
        self._topics = tuple(topics)
        self._records = records
        # A member that joins again under its name (after its connection was lost, when its row could not
        # be deleted) takes its own row over: no ghost counts as live and holds back a share for 10 s.
        self._member_id = member_id or uuid.uuid4().hex
        self._conn: asyncpg.Connection | None = None
        self._owned: dict[TopicPartition, int] = {}  # partition -> position (next offset to return)
        self._last_rebalance = -math.inf

    async def start(self) -> None:
        self._conn = await asyncpg.connect(self._log._dsn)
        await self._heartbeat()
        await self._rebalance()

    def assignment(self) -> frozenset[TopicPartition]:
        # The locks end with the session: a member whose connection is lost owns nothing any more (a
        # leader stops deciding at once, not at its next heartbeat).
        if self._conn is None or self._conn.is_closed():
            return frozenset()
        return frozenset(self._owned)

    async def poll(self, *, max_records: int = 500, timeout_s: float = 1.0) -> list[LogRecord]:
        deadline = time.monotonic() + timeout_s
        while True:
            if time.monotonic() - self._last_rebalance >= _REBALANCE_EVERY_S:
                await self._heartbeat()
                await self._rebalance()
            if not self._records:
                return []  # membership only: no read query per poll
            signal = self._log.commit_signal()
            out: list[LogRecord] = []
            for tp in sorted(self._owned):
                if len(out) >= max_records:
                    break
                records = await self._log.read_partition(tp, self._owned[tp], max_records - len(out))
                if records:
                    self._owned[tp] = records[-1].offset + 1
                    out.extend(records)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(signal.wait(), min(remaining, _REBALANCE_EVERY_S))

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        async with self._log.pool.acquire() as conn:
            await self._log.commit_offsets(conn, GroupOffsets(self._group_id, offsets))

    async def committed(self, tp: TopicPartition) -> int | None:
        return await self._log.committed(self._group_id, tp)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self._owned:
            raise ValueError(f"{tp} is not assigned to this member")
        self._owned[tp] = offset

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.execute(
                    "DELETE FROM fedsched_log_group_members WHERE group_id = $1 AND member_id = $2",
                    self._group_id,
                    self._member_id,
                )
                await self._conn.close()
            self._conn = None
            self._owned.clear()

    # -- membership ------------------------------------------------------------------------------

    @property
    def _connection(self) -> asyncpg.Connection:
        if self._conn is None:
            raise RuntimeError("the group consumer is closed")
        return self._conn

    async def _heartbeat(self) -> None:
        await self._connection.execute(
            "INSERT INTO fedsched_log_group_members (group_id, member_id, heartbeat_at) VALUES ($1, $2, now())"
            " ON CONFLICT (group_id, member_id) DO UPDATE SET heartbeat_at = now()",
            self._group_id,
            self._member_id,
        )

    async def _rebalance(self) -> None:
        conn = self._connection
        self._last_rebalance = time.monotonic()
        live = await conn.fetchval(
            "SELECT count(*) FROM fedsched_log_group_members WHERE group_id = $1"
            " AND heartbeat_at > now() - make_interval(secs => $2)",
            self._group_id,
            _MEMBER_TIMEOUT_S,
        )
        all_tps = [
            TopicPartition(topic, partition)
            for topic in sorted(self._topics)
            for partition in range(await self._log.partitions(topic))
        ]
        share = math.ceil(len(all_tps) / max(1, int(live)))
        # Give back what is over our share so newer members get theirs (at-least-once: the taker
        # resumes from the committed offset).
        for tp in sorted(self._owned, reverse=True)[: max(0, len(self._owned) - share)]:
            await conn.fetchval("SELECT pg_advisory_unlock($1, $2)", *self._lock_key(tp))
            del self._owned[tp]
        for tp in all_tps:
            if len(self._owned) >= share:
                break
            if tp in self._owned:
                continue
            if await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", *self._lock_key(tp)):
                committed = await self._log.committed(self._group_id, tp)
                self._owned[tp] = committed or 0

    def _lock_key(self, tp: TopicPartition) -> tuple[int, int]:
        # Two int4 keys: a stable 31-bit hash of (group, topic) and the partition number.
        return murmur2(f"{self._group_id}\x00{tp.topic}".encode()) & 0x7FFFFFFF, tp.partition
