"""An ``EventLog`` that keeps a test's topics and consumer groups apart on a shared log.

Every topic name ``t`` becomes ``<prefix>.t`` on the way in and ``t`` again on the way out, and every
group and transactional id gets the prefix, so the API, the intake and the projection runner under test
use the catalogue's own topic names while sharing one Kafka broker (or embedded log) with other tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from events.catalog.topics import TopicSpec
from events.log.contract import Appended, EventLog, GroupOffsets, LogRecord, OutRecord, TopicPartition


class PrefixedLog:
    def __init__(self, inner: EventLog, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix

    def name(self, topic: str) -> str:
        return f"{self.prefix}.{topic}"

    def unname(self, topic: str) -> str:
        return topic.removeprefix(self.prefix + ".")

    def tp(self, tp: TopicPartition) -> TopicPartition:
        return TopicPartition(self.name(tp.topic), tp.partition)

    def record(self, record: LogRecord) -> LogRecord:
        return replace(record, topic=self.unname(record.topic))

    def out(self, record: OutRecord) -> OutRecord:
        return replace(record, topic=self.name(record.topic))

    def offsets(self, offsets: GroupOffsets) -> GroupOffsets:
        return GroupOffsets(f"{self.prefix}-{offsets.group_id}", {self.tp(k): v for k, v in offsets.offsets.items()})

    def appended(self, items: list[Appended]) -> list[Appended]:
        return [Appended(self.unname(a.topic), a.partition, a.offset) for a in items]

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def create_topics(self, specs: Sequence[TopicSpec]) -> None:
        await self.inner.create_topics([replace(spec, name=self.name(spec.name)) for spec in specs])

    async def partitions(self, topic: str) -> int:
        return await self.inner.partitions(self.name(topic))

    async def producer(self, transactional_id: str | None = None) -> _Producer:
        tid = None if transactional_id is None else f"{self.prefix}-{transactional_id}"
        return _Producer(self, await self.inner.producer(tid))

    async def reader(self) -> _Reader:
        return _Reader(self, await self.inner.reader())

    @property
    def commit_markers(self) -> bool:
        return self.inner.commit_markers

    @property
    def snapshot_reads(self) -> bool:
        return self.inner.snapshot_reads

    async def tail(self, positions: Mapping[TopicPartition, int]) -> _Tail:
        return _Tail(self, await self.inner.tail({self.tp(tp): offset for tp, offset in positions.items()}))

    async def group_consumer(
        self, group_id: str, topics: Sequence[str], *, member_name: str | None = None, records: bool = True
    ) -> _Group:
        inner = await self.inner.group_consumer(
            f"{self.prefix}-{group_id}", [self.name(t) for t in topics], member_name=member_name, records=records
        )
        return _Group(self, inner)


class _Producer:
    def __init__(self, log: PrefixedLog, inner: Any) -> None:
        self._log = log
        self._inner = inner

    async def append(self, records: Sequence[OutRecord], *, offsets: GroupOffsets | None = None) -> list[Appended]:
        mapped = [self._log.out(r) for r in records]
        return self._log.appended(
            await self._inner.append(mapped, offsets=None if offsets is None else self._log.offsets(offsets))
        )

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        log = self._log

        class Txn:
            def __init__(self, inner: Any) -> None:
                self._inner = inner

            async def append(self, records: Sequence[OutRecord]) -> list[Appended]:
                return log.appended(await self._inner.append([log.out(r) for r in records]))

            async def commit_offsets(self, offsets: GroupOffsets) -> None:
                await self._inner.commit_offsets(log.offsets(offsets))

        async with self._inner.transaction() as txn:
            yield Txn(txn)

    async def close(self) -> None:
        await self._inner.close()


class _Reader:
    def __init__(self, log: PrefixedLog, inner: Any) -> None:
        self._log = log
        self._inner = inner

    async def read(
        self, tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0
    ) -> list[LogRecord]:
        records = await self._inner.read(self._log.tp(tp), offset, max_records=max_records, timeout_s=timeout_s)
        return [self._log.record(r) for r in records]

    async def end_offset(self, tp: TopicPartition) -> int:
        return int(await self._inner.end_offset(self._log.tp(tp)))

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        ends = await self._inner.end_offsets([self._log.tp(tp) for tp in tps])
        return {tp: int(ends[self._log.tp(tp)]) for tp in tps}

    async def caught_up(self, tp: TopicPartition, offset: int) -> bool:
        return bool(await self._inner.caught_up(self._log.tp(tp), offset))

    async def close(self) -> None:
        await self._inner.close()


class _Tail:
    def __init__(self, log: PrefixedLog, inner: Any) -> None:
        self._log = log
        self._inner = inner

    async def poll(self, *, max_records: int = 5000, timeout_s: float = 0.0) -> list[LogRecord]:
        return [self._log.record(r) for r in await self._inner.poll(max_records=max_records, timeout_s=timeout_s)]

    def position(self, tp: TopicPartition) -> int:
        return int(self._inner.position(self._log.tp(tp)))

    async def close(self) -> None:
        await self._inner.close()


class _Group:
    def __init__(self, log: PrefixedLog, inner: Any) -> None:
        self._log = log
        self._inner = inner

    async def poll(self, *, max_records: int = 500, timeout_s: float = 1.0) -> list[LogRecord]:
        return [self._log.record(r) for r in await self._inner.poll(max_records=max_records, timeout_s=timeout_s)]

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        await self._inner.commit({self._log.tp(k): v for k, v in offsets.items()})

    async def committed(self, tp: TopicPartition) -> int | None:
        result = await self._inner.committed(self._log.tp(tp))
        return None if result is None else int(result)

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(TopicPartition(self._log.unname(tp.topic), tp.partition) for tp in self._inner.assignment())

    async def close(self) -> None:
        await self._inner.close()
