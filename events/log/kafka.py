"""The event log on Apache Kafka, through aiokafka.

Called by hosts in distributed mode through ``events.log.open_log``. Calls aiokafka.

- Producers are idempotent; with a transactional id, every append is one Kafka transaction (records
  on several topics plus, optionally, a consumer group's offsets), and a newer producer with the same
  id fences this one (``ProducerFenced``: stop, never retry).
- Readers and group consumers read with ``isolation_level="read_committed"``: an aborted or unfinished
  transaction is never seen.
- The partition of a record is computed by ``events.catalog.topics.partition_for`` (Kafka's murmur2), not by
  the client, so the embedded log and Java producers agree with us.
- A producer whose aiokafka sender routine has ended (it dies on an error it does not expect, as seen
  around a broker restart) fails what was queued but leaves every later wait (a producer id, a
  transaction's end, a send's delivery) pending forever. Every wait here races that routine: once it
  has ended, the producer raises ``ProducerBroken`` (a ``KafkaError``, so an outage to the hosts, which
  drop the producer and open a new one), or ``ProducerFenced`` when that is what ended it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.errors import ProducerFenced as KafkaProducerFenced
from aiokafka.structs import OffsetAndMetadata

from events.catalog.topics import TopicSpec, partition_for
from events.log.contract import (
    Appended,
    GroupOffsets,
    LogRecord,
    OutRecord,
    ProducerFenced,
    TopicPartition,
    UnknownTopic,
)

T = TypeVar("T")

_FETCH_WAIT_MS = 20
_TAIL_FETCH_WAIT_MS = 500
# A read of a paused partition waits this long at least: one fetch, answered at once when there are records.
_RESUMED_READ_WAIT_MS = _FETCH_WAIT_MS + 30
_RETRY_BACKOFF_MS = 5


class KafkaEventLog:
    commit_markers = True
    snapshot_reads = False

    def __init__(self, bootstrap_servers: str, *, client_id: str = "fedsched", replication_factor: int = 1) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._client_id = client_id
        self._replication_factor = replication_factor
        self._admin: AIOKafkaAdminClient | None = None
        self._partitions: dict[str, int] = {}

    async def start(self) -> None:
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers, client_id=self._client_id)
        await self._admin.start()

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    @property
    def admin(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            raise RuntimeError("the log is not started")
        return self._admin

    async def create_topics(self, specs: Sequence[TopicSpec]) -> None:
        existing = set(await self.admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        if missing:
            new = [
                NewTopic(spec.name, spec.partitions, self._replication_factor, topic_configs=spec.kafka_config())
                for spec in missing
            ]
            with contextlib.suppress(TopicAlreadyExistsError):
                await self.admin.create_topics(new)
        await self._wait_for_metadata([spec.name for spec in specs])

    async def _wait_for_metadata(self, topics: Sequence[str], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(topics)
        while pending:
            described = await self.admin.describe_topics(pending)
            ready = {
                item["topic"]
                for item in described
                if item.get("error_code", 0) == 0
                and item.get("partitions")
                and all(p.get("leader", -1) >= 0 for p in item["partitions"])
            }
            for item in described:
                if item["topic"] in ready:
                    self._partitions[item["topic"]] = len(item["partitions"])
            pending = [name for name in pending if name not in ready]
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"topics have no leader after {timeout_s} s: {pending}")
            if pending:
                await asyncio.sleep(0.1)

    async def partitions(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            described = await self.admin.describe_topics([topic])
            if not described or described[0].get("error_code", 0) != 0 or not described[0].get("partitions"):
                raise UnknownTopic(topic)
            count = len(described[0]["partitions"])
            self._partitions[topic] = count
        return count

    async def topics(self) -> list[str]:
        return sorted(await self.admin.list_topics())

    async def producer(self, transactional_id: str | None = None) -> KafkaProducer:
        producer = KafkaProducer(self, transactional_id)
        await producer.start()
        return producer

    async def reader(self) -> KafkaReader:
        return KafkaReader(self)

    async def tail(self, positions: Mapping[TopicPartition, int]) -> KafkaTail:
        tail = KafkaTail(self, positions)
        await tail.start()
        return tail

    async def group_consumer(
        self, group_id: str, topics: Sequence[str], *, member_name: str | None = None, records: bool = True
    ) -> KafkaGroupConsumer:
        consumer = KafkaGroupConsumer(self, group_id, topics, member_name, records)
        await consumer.start()
        return consumer

    def consumer(self, *topics: str, group_id: str | None = None, **config: object) -> AIOKafkaConsumer:
        config.setdefault("client_id", self._client_id)
        return AIOKafkaConsumer(
            *topics,
            bootstrap_servers=self.bootstrap_servers,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            **{"fetch_max_wait_ms": _FETCH_WAIT_MS, "max_partition_fetch_bytes": 8 * 1024 * 1024, **config},
        )


async def stop_quietly(client: AIOKafkaConsumer | AIOKafkaProducer) -> None:
    """Stop an aiokafka client, as tidying up: its Kafka errors are dropped, and so is a cancellation that
    was not aimed at the calling task. A consumer's ``stop()`` cancels the fetcher's pending tasks (a
    position lookup retrying through an outage) and then awaits them, so it raises their
    ``CancelledError`` (aiokafka#647). A host closing its consumer to start over after an outage took
    that for its own cancellation: in the stop-28 soak a simulated cluster's loop ended there, silently,
    and its 63 running jobs never ended."""
    try:
        await client.stop()
    except KafkaError:
        pass
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # ours: the caller is being cancelled


class ProducerBroken(KafkaError):  # type: ignore[misc]  # aiokafka is untyped
    """The producer's sender routine has ended: nothing more can be sent with it; open a new one."""


class KafkaProducer:
    def __init__(self, log: KafkaEventLog, transactional_id: str | None) -> None:
        self._log = log
        self._transactional_id = transactional_id
        self._producer = AIOKafkaProducer(
            bootstrap_servers=log.bootstrap_servers,
            client_id=f"fedsched-{transactional_id or 'producer'}",
            enable_idempotence=True,
            acks="all",
            transactional_id=transactional_id,
            linger_ms=0,
            # Right after a commit the coordinator still writes its markers and answers the next
            # transaction's first requests with CONCURRENT_TRANSACTIONS (or, verifying a produce,
            # NOT_ENOUGH_REPLICAS); aiokafka then waits this long. The markers land within a few ms on
            # a local broker: back-to-back transactions p99 28-38 ms with 20 ms, 18-20 ms with 5 ms
            # (aiokafka's 100 ms default is what a scheduler cycle would pay).
            retry_backoff_ms=_RETRY_BACKOFF_MS,
            max_batch_size=1024 * 1024,
            max_request_size=4 * 1024 * 1024,
        )
        self._fenced = False

    async def start(self) -> None:
        # With a transactional id, start() runs InitProducerId: it bumps the epoch and so fences every
        # earlier producer with this id, and aborts a transaction a killed predecessor left open.
        await self._producer.start()

    async def append(self, records: Sequence[OutRecord], *, offsets: GroupOffsets | None = None) -> list[Appended]:
        if self._transactional_id is None:
            if offsets is not None:
                raise ValueError("committing offsets with an append needs a transactional producer")
            self._check_fenced()
            return await self._positions(await self._send_all(records))
        futures: list[asyncio.Future[Any]] = []
        try:
            async with self.transaction() as tx:
                futures = await tx.send(records)
                if offsets is not None:
                    await tx.commit_offsets(offsets)
        except BaseException:
            _abandon(futures)
            raise
        return await self._positions(futures)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[KafkaTransaction]:
        if self._transactional_id is None:
            raise ValueError("a transaction needs a producer with a transactional id")
        self._check_fenced()
        producer = self._producer
        try:
            await self._guarded(producer.begin_transaction())
            try:
                yield KafkaTransaction(self)
            except BaseException:
                # aiokafka's own context: a fatal state cannot be aborted (the next producer's start
                # aborts what this one left open).
                if not producer._txn_manager.is_fatal_error() and self._sender_alive():
                    await self._guarded(producer.abort_transaction())
                raise
            await self._guarded(producer.commit_transaction())
        except KafkaProducerFenced as error:
            self._fenced = True
            raise ProducerFenced(f"producer {self._transactional_id!r} was fenced: {error}") from error

    def _check_fenced(self) -> None:
        if self._fenced:
            raise ProducerFenced(f"producer {self._transactional_id!r} was fenced by a newer instance")

    def _sender_task(self) -> asyncio.Task[Any] | None:
        sender = getattr(self._producer, "_sender", None)
        return getattr(sender, "sender_task", None)

    def _sender_alive(self) -> bool:
        task = self._sender_task()
        return task is None or not task.done()

    async def _guarded(self, awaitable: Awaitable[T]) -> T:
        """``awaitable``, unless the sender routine ends first (see the module docstring)."""
        sender = self._sender_task()
        if sender is None:
            return await awaitable
        waiting = asyncio.ensure_future(awaitable)
        try:
            if not sender.done():
                await asyncio.wait((waiting, sender), return_when=asyncio.FIRST_COMPLETED)
            if waiting.done():
                return waiting.result()
        finally:
            if not waiting.done():
                waiting.cancel()
                with contextlib.suppress(BaseException):
                    await waiting
        raise self._ended(sender)

    def _ended(self, sender: asyncio.Task[Any]) -> Exception:
        error = None if sender.cancelled() else sender.exception()
        if isinstance(error, KafkaProducerFenced) or isinstance(
            error.__cause__ if error else None, KafkaProducerFenced
        ):
            self._fenced = True
            return ProducerFenced(f"producer {self._transactional_id!r} was fenced: {error}")
        return ProducerBroken(f"the sender routine of producer {self._transactional_id!r} ended: {error!r}")

    async def _positions(self, futures: Sequence[asyncio.Future[Any]]) -> list[Appended]:
        try:
            return await self._guarded(_positions(futures))
        except BaseException:
            _abandon(futures)
            raise

    async def send_offsets(self, offsets: GroupOffsets) -> None:
        if offsets.offsets:
            await self._guarded(
                self._producer.send_offsets_to_transaction(
                    {KafkaTP(tp.topic, tp.partition): offset for tp, offset in offsets.offsets.items()},
                    offsets.group_id,
                )
            )

    async def _send_all(self, records: Sequence[OutRecord]) -> list[asyncio.Future[Any]]:
        return await self._guarded(self._send_each(records))  # one race for the batch, not one per record

    async def _send_each(self, records: Sequence[OutRecord]) -> list[asyncio.Future[Any]]:
        futures: list[asyncio.Future[Any]] = []
        try:
            for record in records:
                partition = await self._route(record)
                futures.append(
                    await self._producer.send(
                        record.topic,
                        value=record.value,
                        key=record.key,
                        partition=partition,
                        headers=list(record.headers),
                    )
                )
        except BaseException:
            _abandon(futures)
            raise
        return futures

    async def _route(self, record: OutRecord) -> int:
        count = await self._log.partitions(record.topic)
        if record.partition is None:
            return partition_for(record.key, count)
        if not 0 <= record.partition < count:
            raise ValueError(f"partition {record.partition} out of range for {record.topic} ({count} partitions)")
        return record.partition

    async def close(self) -> None:
        await stop_quietly(self._producer)


class KafkaTransaction:
    """Records sent inside an open Kafka transaction; committed or aborted when the block exits."""

    def __init__(self, producer: KafkaProducer) -> None:
        self._producer = producer

    async def send(self, records: Sequence[OutRecord]) -> list[asyncio.Future[Any]]:
        return await self._producer._send_all(records)

    async def append(self, records: Sequence[OutRecord]) -> list[Appended]:
        # Waits for the broker to acknowledge (the records stay invisible until the commit).
        return await self._producer._positions(await self.send(records))

    async def commit_offsets(self, offsets: GroupOffsets) -> None:
        await self._producer.send_offsets(offsets)


def _abandon(futures: Sequence[asyncio.Future[Any]]) -> None:
    """Deliveries no one will wait for: their errors are taken (asyncio would log each as never
    retrieved), now or when they come."""
    for future in futures:
        future.add_done_callback(_take)


def _take(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _positions(futures: Sequence[asyncio.Future[Any]]) -> list[Appended]:
    try:
        metadata = await asyncio.gather(*futures)
    except KafkaProducerFenced as error:
        raise ProducerFenced(str(error)) from error
    return [Appended(m.topic, m.partition, m.offset) for m in metadata]


def _to_record(message: object) -> LogRecord:
    m = message  # aiokafka ConsumerRecord
    return LogRecord(
        topic=m.topic,  # type: ignore[attr-defined]
        partition=m.partition,  # type: ignore[attr-defined]
        offset=m.offset,  # type: ignore[attr-defined]
        key=m.key,  # type: ignore[attr-defined]
        value=m.value,  # type: ignore[attr-defined]
        headers=tuple(m.headers),  # type: ignore[attr-defined]
        timestamp_ms=m.timestamp,  # type: ignore[attr-defined]
    )


class KafkaReader:
    """Reads single partitions by offset. One assigned consumer per partition read, kept for reuse.

    An assigned consumer fetches in the background, which lets a reader that goes on reading find the
    next records already fetched. Once a read has drained what the broker had (it returned nothing, or
    reached the last stable offset), the partition is paused: an idle one long-polled every fetch wait,
    and the services that follow the log with a reader (the archiver, governance) cost 0.26 and 0.17
    cores when idle, and the broker 0.35. Pausing after every read instead (commit 96b1b28, reverted)
    threw away what was prefetched and starved reads without a wait: the fetcher never got a turn. So a
    read of a paused partition resumes it and waits for at least one fetch (the broker answers at once
    when it has records)."""

    def __init__(self, log: KafkaEventLog) -> None:
        self._log = log
        self._consumers: dict[TopicPartition, tuple[AIOKafkaConsumer, _ReadState]] = {}
        self._ends: AIOKafkaConsumer | None = None

    async def _consumer_for(self, tp: TopicPartition) -> tuple[AIOKafkaConsumer, _ReadState]:
        entry = self._consumers.get(tp)
        if entry is None:
            consumer = self._log.consumer()
            await consumer.start()
            ktp = KafkaTP(tp.topic, tp.partition)
            consumer.assign([ktp])
            consumer.pause(ktp)  # nothing is fetched before the first read says where from
            entry = (consumer, _ReadState())
            self._consumers[tp] = entry
        return entry

    async def read(
        self, tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0
    ) -> list[LogRecord]:
        consumer, state = await self._consumer_for(tp)
        ktp = KafkaTP(tp.topic, tp.partition)
        if state.position != offset:
            consumer.seek(ktp, offset)
        wait_ms = int(timeout_s * 1000)
        if state.paused:
            consumer.resume(ktp)
            state.paused = False
            wait_ms = max(wait_ms, _RESUMED_READ_WAIT_MS)
        batches = await consumer.getmany(ktp, timeout_ms=wait_ms, max_records=max_records)
        records = [_to_record(m) for m in batches.get(ktp, [])]
        # A caller continues from the last record + 1. The consumer may already be past that (over
        # transaction markers) with records prefetched: seeking then would throw the prefetch away.
        state.position = records[-1].offset + 1 if records else offset
        # Drained: nothing came (only transaction markers were left, or nothing at all), or the last
        # stable offset is reached. Not merely fewer than asked for: a caller taking the rest at once
        # (a read without a wait) would then wait for a fetch that a prefetch had already done.
        stable = consumer.last_stable_offset(ktp)
        if not records or (stable is not None and state.position >= stable):
            consumer.pause(ktp)
            state.paused = True
        return records

    async def end_offset(self, tp: TopicPartition) -> int:
        return (await self.end_offsets([tp]))[tp]

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """From one consumer assigned nothing, which asks each partition's leader: no consumer per
        partition (each a connection and a fetcher) only to learn where partitions end."""
        if self._ends is None:
            self._ends = self._log.consumer()
            await self._ends.start()
        ktps = [KafkaTP(tp.topic, tp.partition) for tp in tps]
        ends = await self._ends.end_offsets(ktps) if ktps else {}
        return {tp: int(ends[ktp]) for tp, ktp in zip(tps, ktps, strict=True)}

    async def caught_up(self, tp: TopicPartition, offset: int) -> bool:
        end = await self.end_offset(tp)
        if offset >= end:
            return True
        # Between offset and the end there may be only transaction markers: fetch through them.
        consumer, state = await self._consumer_for(tp)
        ktp = KafkaTP(tp.topic, tp.partition)
        consumer.seek(ktp, offset)
        state.position = -1  # the next read seeks again, so nothing fetched here is lost
        consumer.resume(ktp)
        try:
            while True:
                batches = await consumer.getmany(ktp, timeout_ms=10, max_records=1)
                if batches.get(ktp):
                    return False
                if await consumer.position(ktp) >= end:
                    return True
        finally:
            consumer.pause(ktp)
            state.paused = True

    async def close(self) -> None:
        for consumer, _ in self._consumers.values():
            await stop_quietly(consumer)
        self._consumers.clear()
        if self._ends is not None:
            await stop_quietly(self._ends)
            self._ends = None


@dataclass(slots=True)
class _ReadState:
    position: int = -1
    """Where the consumer stands for the next read (-1: unknown, the next read seeks)."""
    paused: bool = True


class KafkaTail:
    """One consumer assigned every partition of the tail: the broker answers one fetch for all of them
    as soon as any has data, so following N partitions costs no more round trips than following one."""

    def __init__(self, log: KafkaEventLog, positions: Mapping[TopicPartition, int]) -> None:
        self._positions = dict(positions)
        # A follower waits on the broker, not on a timer: a waiting fetch is answered as soon as any
        # partition has data, or its last stable offset moves (a commit marker): a transaction committed
        # on one of 20 followed partitions was seen 1.3 ms (p50) / 3.2 ms (max) after the commit with a
        # 500 ms wait. A 5 ms wait made an idle follower send ~200 fetches a second, each encoding and
        # decoding every partition (about 0.1 cores of the scheduler's time and as much of the broker's).
        self._consumer = log.consumer(fetch_max_wait_ms=_TAIL_FETCH_WAIT_MS)

    async def start(self) -> None:
        await self._consumer.start()
        self._consumer.assign([KafkaTP(tp.topic, tp.partition) for tp in self._positions])
        for tp, offset in self._positions.items():
            self._consumer.seek(KafkaTP(tp.topic, tp.partition), offset)

    async def poll(self, *, max_records: int = 5000, timeout_s: float = 0.0) -> list[LogRecord]:
        batches = await self._consumer.getmany(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        out: list[LogRecord] = []
        for ktp, messages in batches.items():
            tp = TopicPartition(ktp.topic, ktp.partition)
            position = self._positions[tp]
            records = [_to_record(m) for m in messages if m.offset >= position]
            if records:
                self._positions[tp] = records[-1].offset + 1
                out.extend(records)
        return out

    def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    async def close(self) -> None:
        await stop_quietly(self._consumer)


class KafkaGroupConsumer:
    def __init__(
        self, log: KafkaEventLog, group_id: str, topics: Sequence[str], member_name: str | None, records: bool = True
    ) -> None:
        self._group_id = group_id
        self._records = records
        # A member reads on from where it stands (nothing here seeks one), so it can wait on the broker like a
        # tail: the intake's member long-polled 50 times a second while idle.
        extra: dict[str, object] = {"fetch_max_wait_ms": _TAIL_FETCH_WAIT_MS}
        if member_name:
            extra["client_id"] = member_name
        if not records:  # what slips through before a new assignment is paused stays small
            extra.update(max_partition_fetch_bytes=1024)
        self._consumer = log.consumer(
            *topics, group_id=group_id, session_timeout_ms=10_000, heartbeat_interval_ms=1_000, **extra
        )

    async def start(self) -> None:
        await self._consumer.start()

    async def poll(self, *, max_records: int = 500, timeout_s: float = 1.0) -> list[LogRecord]:
        if not self._records:
            # Paused partitions are not fetched; a rebalance hands out unpaused ones, hence every poll.
            # (The leader's member fetched and parsed the whole decisions partition, one record a poll.)
            await self._consumer.getmany(timeout_ms=int(timeout_s * 1000), max_records=1)
            self._consumer.pause(*self._consumer.assignment())
            return []
        batches = await self._consumer.getmany(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        out: list[LogRecord] = []
        for ktp in sorted(batches, key=lambda t: (t.topic, t.partition)):
            out.extend(_to_record(m) for m in batches[ktp])
        return out

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        await self._consumer.commit(
            {KafkaTP(tp.topic, tp.partition): OffsetAndMetadata(offset, "") for tp, offset in offsets.items()}
        )

    async def committed(self, tp: TopicPartition) -> int | None:
        value = await self._consumer.committed(KafkaTP(tp.topic, tp.partition))
        return None if value is None else int(value)

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(TopicPartition(t.topic, t.partition) for t in self._consumer.assignment())

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._consumer.seek(KafkaTP(tp.topic, tp.partition), offset)

    async def close(self) -> None:
        await stop_quietly(self._consumer)
