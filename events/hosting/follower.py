"""Following the log: where a host stands in every partition it reads, and what comes next.

Called by every host that keeps its own positions: the scheduler (from the start of the log, which it
replays), governance (likewise), the audit archiver (from its chain heads) and the in-process projection
runner (from the positions stored with its read models). Hosts whose positions are a consumer group's
(the intake, the connectors) read through ``GroupFollower``. Calls the ``EventLog`` ports only.

A ``Follower`` hands out what is committed past its positions and moves each position past what it
handed out: ``committed()`` reads every partition to its end now (one round trip for all the ends, then
only the partitions with something new), ``poll()`` takes what a tail of all of them has (and waits up
to a timeout for the next commit anywhere), ``wait()`` waits for a commit on one partition without
reading anything else. ``forget()`` drops the connections after a failure; the positions stay, so the
next read starts where the host's own state stands (a host whose state lives in its sink reloads both).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence

from events.log.contract import EventLog, GroupConsumer, LogReader, LogRecord, LogTail, TopicPartition
from events.log.reading import EndWatch, read_to_end


class Follower:
    """Positions in ``topics``' partitions, moved as records are handed out.

    ``reader_per_pass``: open a reader for each ``committed()`` pass and close it after (a Kafka reader
    left open keeps fetching its partitions: a host that otherwise only tails, as the scheduler does,
    would pay that twice)."""

    def __init__(
        self, log: EventLog, topics: Sequence[str], *, batch: int = 5000, reader_per_pass: bool = False
    ) -> None:
        self._log = log
        self._topics = tuple(topics)
        self._batch = batch
        self._reader_per_pass = reader_per_pass
        self.positions: dict[TopicPartition, int] = {}
        """The next offset to hand out, per partition."""
        self._reader: LogReader | None = None
        self._tail: LogTail | None = None
        self._ends = EndWatch()

    async def start(self, stored: Mapping[TopicPartition, int] | None = None) -> None:
        """Find the partitions; each starts at its ``stored`` position, else where it stood, else 0."""
        for topic in self._topics:
            for partition in range(await self._log.partitions(topic)):
                tp = TopicPartition(topic, partition)
                self.positions[tp] = (stored or {}).get(tp, self.positions.get(tp, 0))

    async def committed(self) -> AsyncIterator[list[LogRecord]]:
        """Batches of everything committed now past the positions, partition by partition in order. A
        position moves past a batch as it is handed out, so a failure later keeps what was taken."""
        reader = await self._open_reader()
        try:
            for tp, end in sorted((await self._ends.ahead(reader, self.positions)).items()):
                position = self.positions[tp]
                async for records in read_to_end(reader, tp, position, max_records=self._batch, end=end):
                    position = self.positions[tp] = records[-1].offset + 1
                    yield records
                self._ends.reached(tp, position, end)
        finally:
            if self._reader_per_pass:
                await self._drop_reader()

    async def poll(self, timeout_s: float) -> list[LogRecord]:
        """What has arrived on any partition past the positions (waiting up to ``timeout_s`` for
        something), through a tail opened at the positions on first use. Records already handed out by
        ``committed()`` since are left out, so the two may be mixed."""
        if self._tail is None:
            self._tail = await self._log.tail(self.positions)
        records = [r for r in await self._tail.poll(max_records=self._batch, timeout_s=timeout_s) if self._take(r)]
        return records

    def _take(self, record: LogRecord) -> bool:
        tp = record.tp
        if record.offset < self.positions.get(tp, 0):
            return False
        self.positions[tp] = record.offset + 1
        return True

    def moved(self, records: Sequence[LogRecord]) -> None:
        """Records the host got another way (its own appends, folded as it wrote them): past them too."""
        for record in records:
            self._take(record)

    async def wait(self, tp: TopicPartition, timeout_s: float) -> None:
        """Return once something is committed on ``tp`` past its position, or after ``timeout_s`` (on the
        embedded log any commit wakes such a read)."""
        reader = await self._open_reader()
        try:
            await reader.read(tp, self.positions.get(tp, 0), max_records=1, timeout_s=timeout_s)
        finally:
            if self._reader_per_pass:
                await self._drop_reader()

    async def forget(self) -> None:
        """Drop the reader and the tail (after a failure their connections may be dead); the next read
        opens fresh ones at the positions."""
        await self._drop_reader()
        tail, self._tail = self._tail, None
        if tail is not None:
            with contextlib.suppress(Exception):  # it failed already: closing is only tidying up
                await tail.close()

    async def close(self) -> None:
        await self.forget()

    @property
    def reading(self) -> bool:
        """Whether it holds a connection to the log now (a reader or a tail)."""
        return self._reader is not None or self._tail is not None

    async def _open_reader(self) -> LogReader:
        if self._reader is None:
            self._reader = await self._log.reader()
        return self._reader

    async def _drop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()


class GroupFollower:
    """A member of a consumer group: the log keeps the positions, which the host's sink commits with its
    outputs (``GroupOffsets``), so a restarted or new member resumes after what was committed."""

    def __init__(self, log: EventLog, group_id: str, topics: Sequence[str]) -> None:
        self._log = log
        self.group_id = group_id
        self._topics = tuple(topics)
        self._consumer: GroupConsumer | None = None
        # One name across its own restarts: a member joining again after an outage is the same member.
        self.member_name = f"{group_id}-{uuid.uuid4().hex[:12]}"

    async def start(self) -> None:
        self._consumer = await self._log.group_consumer(self.group_id, self._topics, member_name=self.member_name)

    async def poll(self, *, max_records: int = 500, timeout_s: float = 1.0) -> list[LogRecord]:
        if self._consumer is None:
            raise RuntimeError("the follower is not started")
        return await self._consumer.poll(max_records=max_records, timeout_s=timeout_s)

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.close()


def after(records: Sequence[LogRecord]) -> dict[TopicPartition, int]:
    """The positions past ``records``: what a group commits once it has handled them."""
    return {record.tp: record.offset + 1 for record in records}


__all__ = ["Follower", "GroupFollower", "after"]
