"""Shared tails for ``WatchJob``: one reader per watched partition in an API process, however many
watches are open.

Called by the jobs servicer (``WatchTails.reader``, one per watch) and, through the reader it hands
out, by ``services.api.watch``, which reads it as it would a ``LogReader``. Calls the log's readers and
asyncio.

A watch reads its job's partition of the jobs topic and the decisions partition from given offsets.
With a reader of its own, every open watch held a consumer per partition and one more for end
offsets (three connections and fetchers on Kafka), and each read the whole decisions partition
again. Here one task per partition reads it once into a window of recent records, and every watch of
that partition reads the window from its own position. A watch behind the window (it started from an
older position, or fell too far behind while the window moved on) reads from a reader of its own
until it reaches the window.

The window holds every committed record from ``first`` up to ``end`` (the next offset its task reads),
so a read from the window returns what a read of the log from the same offset would. A partition's
task stops with the last watch of it.
"""

from __future__ import annotations

import asyncio
import itertools
from bisect import bisect_left
from collections.abc import Sequence

from events.log.contract import EventLog, LogReader, LogRecord, TopicPartition
from events.plumbing.tasks import cancel_and_wait

WINDOW = 4096
"""Records a window keeps behind its slowest watch (more for none: a watch that starts from a position
a little behind the end, as the projections' stored positions usually are, finds it there)."""
READ_BATCH = 1000
POLL_S = 1.0


class _Tail:
    """One partition's task and window."""

    def __init__(self, log: EventLog, tp: TopicPartition, start: int) -> None:
        self.tp = tp
        self.first = self.end = start
        self.records: list[LogRecord] = []
        self.offsets: list[int] = []
        self.error: BaseException | None = None
        self.positions: dict[int, int] = {}
        """Each watch's last read offset here (by watch): who uses the window, and from where."""
        self._arrived = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(log), name=f"fedsched-watch-tail-{tp.topic}-{tp.partition}")

    async def _run(self, log: EventLog) -> None:
        reader = await log.reader()
        try:
            while True:
                records = await reader.read(self.tp, self.end, max_records=READ_BATCH, timeout_s=POLL_S)
                if records:
                    self.records.extend(records)
                    self.offsets.extend(record.offset for record in records)
                    self.end = records[-1].offset + 1
                    if len(self.records) > 2 * WINDOW:
                        self._trim()
                    self._wake()
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # handed to every watch of the partition
            self.error = error
            self._wake()
        finally:
            await reader.close()

    def _wake(self) -> None:
        arrived, self._arrived = self._arrived, asyncio.get_running_loop().create_future()
        arrived.set_result(None)

    def _trim(self) -> None:
        """Drop what every watch has read, but keep the latest ``WINDOW`` records, and never more than
        ``2 * WINDOW``: a watch further behind reads from its own reader."""
        slowest = min(self.positions.values(), default=self.end)
        count = len(self.records)
        drop = min(bisect_left(self.offsets, slowest), count - WINDOW)
        drop = max(drop, count - 2 * WINDOW)
        if drop > 0:
            self.first = self.offsets[drop - 1] + 1  # nothing but markers lay between that record and the next
            del self.records[:drop]
            del self.offsets[:drop]

    def take(self, offset: int, max_records: int) -> list[LogRecord]:
        at = bisect_left(self.offsets, offset)
        return self.records[at : at + max_records]

    async def arrival(self, timeout_s: float) -> None:
        """Until records arrive (or the task fails), at most ``timeout_s``."""
        await asyncio.wait([self._arrived], timeout=timeout_s)

    async def stop(self) -> None:
        await cancel_and_wait([self._task])


class WatchTails:
    def __init__(self, log: EventLog) -> None:
        self._log = log
        self._tails: dict[TopicPartition, _Tail] = {}
        self._control: LogReader | None = None
        self._control_lock = asyncio.Lock()
        self._ids = itertools.count()

    def reader(self) -> SharedReader:
        """A reader for one watch; close it when the watch ends."""
        return SharedReader(self, next(self._ids))

    @property
    def partitions(self) -> int:
        """Partitions read now (one task and, on Kafka, one consumer each)."""
        return len(self._tails)

    @property
    def watching(self) -> int:
        """Watch readers using a window now (one per open watch and partition)."""
        return sum(len(tail.positions) for tail in self._tails.values())

    def _tail(self, tp: TopicPartition, offset: int) -> _Tail:
        tail = self._tails.get(tp)
        if tail is None or tail.error is not None:  # a failed one's watches have had its error
            tail = self._tails[tp] = _Tail(self._log, tp, offset)
        return tail

    async def _leave(self, tail: _Tail, watch: int) -> None:
        tail.positions.pop(watch, None)
        if not tail.positions:
            if self._tails.get(tail.tp) is tail:
                del self._tails[tail.tp]  # first: a watch arriving meanwhile starts a fresh one
            await tail.stop()

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        async with self._control_lock:
            return await (await self._control_reader()).end_offsets(tps)

    async def caught_up(self, tp: TopicPartition, offset: int) -> bool:
        # Serialised: on Kafka the answer comes from seeking one consumer of the partition.
        async with self._control_lock:
            return await (await self._control_reader()).caught_up(tp, offset)

    async def _control_reader(self) -> LogReader:
        if self._control is None:
            self._control = await self._log.reader()
        return self._control

    async def close(self) -> None:
        tails, self._tails = list(self._tails.values()), {}
        for tail in tails:
            await tail.stop()
        if self._control is not None:
            await self._control.close()
            self._control = None


class SharedReader:
    """One watch's reader: the shared windows where its positions lie in them, a reader of its own
    where they do not. Reads as ``LogReader.read`` does."""

    def __init__(self, tails: WatchTails, watch: int) -> None:
        self._tails = tails
        self._watch = watch
        self._own: LogReader | None = None
        self._mine: dict[TopicPartition, _Tail] = {}

    async def read(
        self, tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0
    ) -> list[LogRecord]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        tail = self._mine.get(tp)
        if tail is None:
            tail = self._mine[tp] = self._tails._tail(tp, offset)
        while True:
            tail.positions[self._watch] = offset
            if tail.error is not None:  # this watch ends with it; the next one starts a fresh tail
                raise tail.error
            if offset < tail.first:
                if self._own is None:
                    self._own = await self._tails._log.reader()
                return await self._own.read(tp, offset, max_records=max_records, timeout_s=timeout_s)
            records = tail.take(offset, max_records)
            remaining = deadline - loop.time()
            if records or remaining <= 0:
                return records
            await tail.arrival(remaining)

    async def end_offset(self, tp: TopicPartition) -> int:
        return (await self._tails.end_offsets([tp]))[tp]

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._tails.end_offsets(tps)

    async def caught_up(self, tp: TopicPartition, offset: int) -> bool:
        return await self._tails.caught_up(tp, offset)

    async def close(self) -> None:
        mine, self._mine = self._mine, {}
        for tail in mine.values():
            await self._tails._leave(tail, self._watch)
        if self._own is not None:
            await self._own.close()
            self._own = None
