"""The in-process projection host's follower: every source partition, merged in event-time order.

Called by ``projections.inprocess.runner``. Calls the ``EventLog`` ports and the codec. A ``Follower``
of ``events.hosting`` hands out records partition by partition; the projections need more: the stages
fold what different topics say in the order it happened, so this follower reads every source partition
from the positions stored with the read models, decodes, and merges by event time (ties by
``source_rank``, partition, offset). Its positions move only when the host says its sink committed
(``advance``): a step's records are folded, written and positioned together.

Decoding is ``events.log.reading.decode_record``: a record that cannot be read, or whose event time lies
further from its time in the log than the allowed skew (``TimeSkew``: the caller's, else the
environment's), comes out with its ``EventError``, for the host to dead-letter.
"""

from __future__ import annotations

import contextlib
import heapq
import os
from collections.abc import Mapping, Sequence

from events.catalog.errors import EventError
from events.log.contract import EventLog, LogReader, LogRecord, TopicPartition
from events.log.reading import decode_record, skew_from_environment
from events.wire.codec import TimeSkew
from events.wire.envelope import Envelope
from projections.stages.sources import source_rank

Item = tuple[int, int, LogRecord, "Envelope | EventError"]
"""A record with its sort key: (event time, topic rank, the record, its envelope or why it is unreadable)."""


class TimeOrderedFollower:
    def __init__(
        self, log: EventLog, topics: Sequence[str], *, batch: int = 5000, skew: TimeSkew | None = None
    ) -> None:
        self._log = log
        self._skew = skew if skew is not None else skew_from_environment(os.environ)
        self._topics = tuple(topics)
        self._batch = batch
        self._positions: dict[tuple[str, int], int] = {}
        self.partitions: list[TopicPartition] = []
        self._reader: LogReader | None = None
        self._cut_all = False  # the last read was cut by its limit across partitions
        self._short: set[tuple[str, int]] = set()  # partitions the last read left records in

    async def start(self, stored: Mapping[tuple[str, int], int]) -> None:
        """Find the partitions; each starts at its ``stored`` position (0 where none is)."""
        self._positions = dict(stored)
        self.partitions = [
            TopicPartition(topic, p) for topic in self._topics for p in range(await self._log.partitions(topic))
        ]

    def positions(self) -> dict[TopicPartition, int]:
        """Where the host stands, per source partition (next offset to fold)."""
        return {tp: self._positions.get((tp.topic, tp.partition), 0) for tp in self.partitions}

    def stored(self) -> dict[tuple[str, int], int]:
        """The positions as the host stores them with its read models (partitions never read left out)."""
        return dict(self._positions)

    def position(self, topic: str, partition: int) -> int:
        return self._positions.get((topic, partition), 0)

    def advance(self, positions: Mapping[tuple[str, int], int]) -> None:
        """The host's sink committed its step up to ``positions``."""
        self._positions.update(positions)

    async def read(self, timeout_s: float = 0.0) -> list[Item]:
        """What is committed past the positions, merged in event-time order; when nothing is, wait up to
        ``timeout_s`` for a commit and read again."""
        per_partition = await self._read()
        if not per_partition and timeout_s > 0:
            await self._wait(timeout_s)
            per_partition = await self._read()
        return self._merge(
            [self._decoded(records, self._skew) for records in per_partition],
            [(records[0].topic, records[0].partition) in self._short for records in per_partition],
        )

    async def forget(self) -> None:
        """Drop the reader (after a failure its connections may be dead)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.close()

    async def close(self) -> None:
        await self.forget()

    @staticmethod
    def _decoded(records: list[LogRecord], skew: TimeSkew) -> list[Item]:
        items: list[Item] = []
        time_ms = 0  # a record we cannot read keeps its place after the last one we could
        for record in records:
            try:
                envelope = decode_record(record, skew)
            except EventError as error:
                items.append((time_ms, source_rank(record.topic), record, error))
            else:
                time_ms = envelope.time_ms
                items.append((time_ms, source_rank(record.topic), record, envelope))
        return items

    async def _open_reader(self) -> LogReader:
        if self._reader is None:
            self._reader = await self._log.reader()
        return self._reader

    async def _read(self) -> list[list[LogRecord]]:
        self._cut_all = False
        self._short = set()
        if self._log.snapshot_reads:
            return await self._read_snapshot()
        reader = await self._open_reader()
        per_partition: list[list[LogRecord]] = []
        for tp in self.partitions:
            offset = self.position(tp.topic, tp.partition)
            end = await reader.end_offset(tp)
            if offset >= end:
                continue
            if end - offset <= 2 and await reader.caught_up(tp, offset):
                # Only the marker(s) of the last transaction(s): a read would have waited its whole
                # timeout for records that never come (a second per partition per transaction written).
                self._positions[(tp.topic, tp.partition)] = end
                continue
            # Something is committed there: wait for it (a Kafka fetch takes a round trip).
            records = await reader.read(tp, offset, max_records=self._batch, timeout_s=1.0)
            while records and len(records) < self._batch and records[-1].offset + 1 < end:
                # A Kafka read returns what one fetch brought: take what else is already at hand, so a
                # step folds (and writes, and publishes) more at once. No waiting: the rest may be markers.
                more = await reader.read(tp, records[-1].offset + 1, max_records=self._batch - len(records))
                if not more:
                    break
                records += more
            if records:
                per_partition.append(records)
                last = records[-1].offset
                if last + 1 < end and (len(records) >= self._batch or not await reader.caught_up(tp, last + 1)):
                    # Read short of its end (one fetch's worth, or the batch): what is left may be older
                    # than what other partitions gave, so the merge stops at this one's last time. (Only
                    # transaction markers left is the end: a partition flagged for them held the others
                    # back for good, and a catch-up stopped short of the end of the log.)
                    self._short.add((tp.topic, tp.partition))
            elif await reader.caught_up(tp, offset):
                # Only transaction markers were left; move past them so we do not ask again.
                self._positions[(tp.topic, tp.partition)] = await reader.end_offset(tp)
        return per_partition

    async def _read_snapshot(self) -> list[list[LogRecord]]:
        """Every partition in one read of one snapshot (a log with ``snapshot_reads``: the embedded log
        answers a tail's poll with one query). Partition by partition, a commit landing between two
        reads could show an effect without its cause. The job view does not depend on that (it is the
        same in any order of a job's partitions), but other stages fold what different topics say in the
        order they get it: a placement before the node it lands on was observed, a run priced before its
        cluster's rates were read, a queue's usage before its quota was set; and the versions of the
        aggregates count what they went through. From one snapshot, merged in event-time order, the live
        fold sees causes before effects, as a rebuild does (and a step costs one query)."""
        tail = await self._log.tail(self.positions())
        try:
            records = await tail.poll(max_records=self._batch, timeout_s=0.0)
        finally:
            await tail.close()
        # Cut by the limit, any partition may have more: fold only up to the earliest last time.
        self._cut_all = len(records) >= self._batch
        by_tp: dict[tuple[str, int], list[LogRecord]] = {}
        for record in records:
            by_tp.setdefault((record.topic, record.partition), []).append(record)
        return [by_tp[key] for key in sorted(by_tp)]

    async def _wait(self, timeout_s: float) -> None:
        """Wait for a commit without polling: on the embedded log any commit wakes a tailing read."""
        reader = await self._open_reader()
        tp = self.partitions[0]
        await reader.read(tp, self.position(tp.topic, tp.partition), max_records=1, timeout_s=timeout_s)

    def _merge(self, decoded: list[list[Item]], short: list[bool]) -> list[Item]:
        """Event time first (causes before effects across topics), then topic rank, partition, offset.
        A partition stays in offset order. Stop at the earliest last time among partitions read short
        of their end (the batch size, or what one fetch brought): one not read to its end could hold an
        earlier event than one we fold. (Counting only partitions cut by the batch size let a partition
        whose fetch came back small be overtaken by minutes of the others' events: a usage report then
        came after the release of the allocation it measured, in a rebuild only.)"""
        cut = min(
            (
                part[-1][0]
                for part, left in zip(decoded, short, strict=True)
                if part and (self._cut_all or left or len(part) >= self._batch)
            ),
            default=None,
        )
        merged = heapq.merge(*decoded, key=lambda item: (item[0], item[1], item[2].partition, item[2].offset))
        if cut is None:
            return list(merged)
        # Up to the first later than the cut, not every one no later: a partition's event times need not
        # grow (producers on different clocks share the jobs topic, a record may be appended again), and
        # leaving out one of its records while folding a later one would skip it for good (positions move
        # to the last folded). The first always goes: it is the earliest of every partition's next.
        out: list[Item] = []
        for item in merged:
            if out and item[0] > cut:
                break
            out.append(item)
        return out


__all__ = ["Item", "TimeOrderedFollower"]
