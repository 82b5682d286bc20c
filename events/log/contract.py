"""The ``EventLog`` contract: ordered partitions of records, read by offset, appended atomically.

Called by every host (projections, scheduler, audit, connectors, API) through the three ports below;
implemented by ``events.log.kafka`` (aiokafka) and ``events.log.postgres`` (the embedded default).
Both pass one contract suite (``tests/contract``), so neither can drift from the other.

What the contract promises:
- A record's partition is decided by its key (``events.catalog.topics.partition_for``), so per-key order holds.
- Offsets within a partition are strictly increasing; a reader that follows ``offset + 1`` of what it
  read sees every committed record exactly once and in order. (The embedded log's offsets are also
  dense. Kafka's are not under transactions: its commit markers take offsets too.)
- ``append`` of several records to several topics, optionally with a consumer group's offsets, is
  atomic: readers see all of it or, if it aborted or its process died, none of it.
- A producer with a transactional id fences every earlier producer with the same id: their next
  append raises ``ProducerFenced`` and must not be retried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from events.catalog.topics import TopicSpec

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True, slots=True)
class OutRecord:
    """A record to append. ``partition`` None: chosen from the key by the topic's partitioner."""

    topic: str
    value: bytes
    key: bytes | None = None
    headers: Headers = ()
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class LogRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: Headers
    timestamp_ms: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """Positions of a consumer group to commit with an append: the *next* offset to read."""

    group_id: str
    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class Appended:
    topic: str
    partition: int
    offset: int


class LogError(Exception):
    """Base of the log's typed errors."""


class ProducerFenced(LogError):
    """Another producer took over this transactional id. Stop; do not retry."""


class UnknownTopic(LogError):
    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} does not exist; create it from the topic catalogue first")
        self.topic = topic


class LogTransaction(Protocol):
    """Appends that become visible together when the ``async with`` block exits normally, and never
    if it raises (the log aborts them). Only a transactional producer opens one."""

    async def append(self, records: Sequence[OutRecord]) -> list[Appended]: ...

    async def commit_offsets(self, offsets: GroupOffsets) -> None: ...


class LogProducer(Protocol):
    async def append(self, records: Sequence[OutRecord], *, offsets: GroupOffsets | None = None) -> list[Appended]:
        """Append atomically; return each record's position, in the order given."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[LogTransaction]:
        """Several appends (and offset commits) as one atomic unit."""
        ...

    async def close(self) -> None: ...


class LogReader(Protocol):
    async def read(
        self, tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0
    ) -> list[LogRecord]:
        """Committed records of one partition from ``offset`` on; waits up to ``timeout_s`` for one."""
        ...

    async def end_offset(self, tp: TopicPartition) -> int:
        """The offset after the last committed record (0 for an empty partition). On Kafka it may lie
        past the last record, over transaction markers: use ``caught_up`` to know a reader is done."""
        ...

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """``end_offset`` of several partitions, in one round trip where the log allows (a consumer-lag
        measure asks for every partition a process reads)."""
        ...

    async def caught_up(self, tp: TopicPartition, offset: int) -> bool:
        """True when no committed record exists at or after ``offset`` now."""
        ...

    async def close(self) -> None: ...


class LogTail(Protocol):
    """Follows several partitions at once from given offsets, for a service that folds what arrives
    (the scheduler's loop): no per-partition round trips, one wait for the next commit on any of them.
    Records come in offset order within a partition; partitions interleave as they arrive."""

    async def poll(self, *, max_records: int = 5000, timeout_s: float = 0.0) -> list[LogRecord]:
        """Committed records past each partition's position; waits up to ``timeout_s`` for one."""
        ...

    def position(self, tp: TopicPartition) -> int:
        """The next offset this tail returns for ``tp``."""
        ...

    async def close(self) -> None: ...


class GroupConsumer(Protocol):
    async def poll(self, *, max_records: int = 500, timeout_s: float = 1.0) -> list[LogRecord]:
        """Committed records of the partitions assigned to this member, from the group's positions."""
        ...

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Store the next offsets to read for this group."""
        ...

    async def committed(self, tp: TopicPartition) -> int | None: ...

    def assignment(self) -> frozenset[TopicPartition]: ...

    async def close(self) -> None: ...


class EventLog(Protocol):
    """A connection to one log (a Kafka cluster or the embedded PostgreSQL log)."""

    commit_markers: bool
    """Whether a committed transaction leaves a marker that takes one offset after its records (Kafka
    does; the embedded log's offsets are dense)."""

    snapshot_reads: bool
    """Whether a tail's poll reads one consistent snapshot of all its partitions: what it returns was
    all committed when it read, so no record comes back while one committed before it, on another of
    the tail's partitions, stays behind (unless ``max_records`` cut the poll). The embedded log answers
    a poll with one query; Kafka fetches partition by partition and promises no such thing."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def create_topics(self, specs: Sequence[TopicSpec]) -> None:
        """Create the topics that do not exist yet (idempotent)."""
        ...

    async def partitions(self, topic: str) -> int: ...

    async def producer(self, transactional_id: str | None = None) -> LogProducer:
        """A started producer; with a transactional id it fences earlier holders of that id."""
        ...

    async def reader(self) -> LogReader: ...

    async def tail(self, positions: Mapping[TopicPartition, int]) -> LogTail:
        """A started tail of these partitions, each from its given offset."""
        ...

    async def group_consumer(
        self, group_id: str, topics: Sequence[str], *, member_name: str | None = None, records: bool = True
    ) -> GroupConsumer:
        """A member of ``group_id``. Members named to sort earlier win ties for partitions on Kafka
        (its range assignor orders members by id, which starts with the name). ``records=False``: a
        member only for its assignment (leader election): ``poll`` keeps the membership alive and
        returns no records, and nothing is fetched for its partitions."""
        ...
