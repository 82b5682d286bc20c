"""Whether a source partition has nothing more to read now: what the router's alignment waits on.

Called by ``projections.faust.app`` (the router). Calls aiokafka on a connection of its own (the
group consumer's may be held by a long-polling fetch, which would delay these answers by seconds).

A partition the router holds nothing of is *caught up* when the broker, asked after everything the
router holds arrived, has no committed record at or above the next offset the router would receive.
Asking then matters: a cause is committed before its effect is produced, so if the effect is held
here, its cause is below that end and is waited for. Transaction markers take offsets too, so a
partition whose next offset is below the end may hold only markers there: when the worker's own
consumer has fetched past the end, one fetch from the next offset settles it (records: wait for
them, they are on their way; none, and the fetch moved past the end: only markers).

The answer is remembered per partition: a partition whose last known end is above its next offset,
and which the worker's consumer has not fetched to that end, is behind without asking again (the
end only grows; records below it are on their way). So under load, when some partition is behind,
a release costs no round trip; only a partition that looks caught up is asked about.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from events.log.kafka import stop_quietly

log = logging.getLogger("fedsched.projections.router")

TP = tuple[str, int]


class SourceProgress:
    def __init__(self, bootstrap: str, client_id: str) -> None:
        self._bootstrap = bootstrap
        self._client_id = client_id
        self._consumer: AIOKafkaConsumer | None = None
        self._ends: dict[TP, int] = {}
        self._markers: dict[TP, tuple[int, int]] = {}  # (next offset, end) found to hold only markers

    async def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await stop_quietly(consumer)

    async def caught_up(
        self,
        partitions: Iterable[TP],
        next_offset: Callable[[TP], int | None],
        fetched_to: Callable[[TP], int | None],
    ) -> set[TP]:
        """The partitions among ``partitions`` with nothing to read at or after ``next_offset`` (None: the
        start of the log). ``fetched_to``: where the worker's consumer has fetched to. None of them when
        one is known to be behind (see the module docstring): alignment releases nothing then anyway."""
        tps = list(partitions)
        if not tps:
            return set()
        if any(self._behind(tp, next_offset(tp), fetched_to(tp)) for tp in tps):
            # Alignment releases nothing while a partition it holds nothing of is behind.
            return set()
        try:
            consumer = await self._ensure(tps)
            ends = await consumer.end_offsets([TopicPartition(*tp) for tp in tps])
        except KafkaError as error:  # a leader moving: nothing is caught up this round
            log.warning("event=end_offsets_failed error=%r", error)
            return set()
        done: set[TP] = set()
        unknown = [TopicPartition(*tp) for tp in tps if next_offset(tp) is None]
        try:
            # Nothing received or committed: faust reads from the start of the log.
            beginnings = await consumer.beginning_offsets(unknown) if unknown else {}
        except KafkaError as error:
            log.warning("event=beginning_offsets_failed error=%r", error)
            return set()
        for tp in tps:
            end = self._ends[tp] = ends[TopicPartition(*tp)]
            start = next_offset(tp)
            if start is None:
                start = beginnings[TopicPartition(*tp)]
            if start >= end:
                done.add(tp)
                continue
            fetched = fetched_to(tp)
            if self._markers.get(tp) == (start, end):  # asked already: nothing has moved since
                done.add(tp)
            elif fetched is not None and fetched >= end and await self._only_markers(tp, start, end):
                self._markers[tp] = (start, end)
                done.add(tp)
        return done

    def _behind(self, tp: TP, start: int | None, fetched: int | None) -> bool:
        """Known to have records (or markers not fetched yet) at or after ``start``, from the last answer."""
        end = self._ends.get(tp)
        return end is not None and start is not None and start < end and (fetched is None or fetched < end)

    async def _only_markers(self, tp: TP, start: int, end: int, timeout_s: float = 0.5) -> bool:
        consumer = await self._ensure([tp])
        partition = TopicPartition(*tp)
        try:
            consumer.seek(partition, start)
            consumer.resume(partition)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                records = await consumer.getmany(partition, timeout_ms=10, max_records=1)
                if records.get(partition):
                    return False
                if await consumer.position(partition) >= end:
                    return True
            return False
        except KafkaError as error:
            log.warning("event=marker_check_failed partition=%s error=%r", tp, error)
            return False
        finally:
            consumer.pause(partition)

    async def _ensure(self, tps: list[TP]) -> AIOKafkaConsumer:
        """The consumer, with ``tps`` assigned and paused: assigned, so that its metadata covers only
        these topics (unassigned, aiokafka asks for every topic of the cluster each time); paused, so
        that it fetches nothing but what ``_only_markers`` asks for."""
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap.split(","),
                client_id=self._client_id,
                isolation_level="read_committed",
                enable_auto_commit=False,
                max_partition_fetch_bytes=64 * 1024,
                # A marker check resumes one partition and waits for the fetcher to reach it. With the
                # default 500 ms wait, a fetch already waiting on the broker delayed that past the check's
                # own deadline, again and again: held records waited until new ones arrived. Every
                # partition here is paused between checks, so a short wait costs no idle polling.
                fetch_max_wait_ms=10,
            )
            await consumer.start()
            self._consumer = consumer
        wanted = {TopicPartition(*tp) for tp in tps}
        if not wanted <= self._consumer.assignment():
            self._consumer.assign(list(wanted | self._consumer.assignment()))
            self._consumer.pause(*self._consumer.assignment())
        return self._consumer
