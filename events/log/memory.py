"""The reading half of the ``EventLog`` contract over lists of records, for benchmarks and tests that
replay a log written in memory (no I/O, so the figures and results are those of the code under test).
Records go to partitions by the topic catalogue's partitioner, as on the real logs."""

from __future__ import annotations

from collections.abc import Sequence

from events.catalog.topics import TOPICS, partition_for
from events.log.contract import Headers, LogRecord, TopicPartition
from events.wire.codec import encode
from events.wire.envelope import Envelope


class MemoryLog:
    commit_markers = False

    def __init__(self) -> None:
        self.parts: dict[str, list[list[LogRecord]]] = {s.name: [[] for _ in range(s.partitions)] for s in TOPICS}

    async def partitions(self, topic: str) -> int:
        return len(self.parts[topic])

    async def reader(self) -> MemoryLog:
        return self

    async def read(
        self, tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0
    ) -> list[LogRecord]:
        return self.parts[tp.topic][tp.partition][offset : offset + max_records]

    async def end_offset(self, tp: TopicPartition) -> int:
        return len(self.parts[tp.topic][tp.partition])

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: len(self.parts[tp.topic][tp.partition]) for tp in tps}

    async def caught_up(self, tp: TopicPartition, offset: int) -> bool:
        return offset >= len(self.parts[tp.topic][tp.partition])

    async def close(self) -> None:
        pass

    def append_raw(self, topic: str, key: bytes | None, value: bytes, headers: Headers, time_ms: int) -> None:
        parts = self.parts[topic]
        partition = partition_for(key, len(parts))
        items = parts[partition]
        items.append(LogRecord(topic, partition, len(items), key, value, headers, time_ms))

    def append(self, envelope: Envelope) -> None:
        wire = encode(envelope)
        self.append_raw(wire.topic, wire.key, wire.value, wire.headers, envelope.time_ms)

    def count(self, topics: tuple[str, ...]) -> int:
        return sum(len(p) for t in topics for p in self.parts[t])
