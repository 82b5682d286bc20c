"""Event-time alignment of several source partitions: release records causes first. Pure.

Called by ``projections.faust.router``. The in-process runner merges what it reads from every
source partition by event time (ties by topic rank, partition, offset); a stream processor instead
sees each partition at its own pace, so a placement could be folded before the node it lands on
was observed, or a finished run priced before its cluster's rates arrived. The router holds what
it reads here and releases it in the runner's order, as far as that order is known: a record is
released only when every other partition either holds a later record or has nothing more to read
(is *caught up*, which the caller decides). Each partition stays in offset order.

Alignment covers the partitions one worker owns. Across workers the order is the live order of
arrival, which in practice keeps causes first (a node is observed long before a job lands on it);
a backlog shared by several workers at once is the case it does not cover.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")
TP = tuple[str, int]
SortKey = tuple[int, int, int, int]


class Aligner(Generic[T]):
    def __init__(self, rank: Callable[[str], int]) -> None:
        self._rank = rank
        self._queues: dict[TP, deque[tuple[SortKey, T]]] = {}
        self._last_time: dict[TP, int] = {}

    def add(self, topic: str, partition: int, offset: int, time_ms: int | None, payload: T) -> None:
        """Hold one record. A record without a time (unreadable) keeps its partition's last time."""
        tp = (topic, partition)
        if time_ms is None:
            time_ms = self._last_time.get(tp, 0)
        self._last_time[tp] = time_ms
        self._queues.setdefault(tp, deque()).append(((time_ms, self._rank(topic), partition, offset), payload))

    def holds(self, tp: TP) -> bool:
        return bool(self._queues.get(tp))

    @property
    def held(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    def release(self, partitions: Iterable[TP], caught_up: Callable[[TP], bool]) -> list[T]:
        """Everything that can go now, in order. ``partitions``: every source partition owned."""
        queues = self._queues
        if any(not queues.get(tp) and not caught_up(tp) for tp in partitions):
            return []
        heap = [(queue[0][0], tp) for tp, queue in queues.items() if queue]
        heapq.heapify(heap)
        out: list[T] = []
        while heap:
            _, tp = heapq.heappop(heap)
            queue = queues[tp]
            out.append(queue.popleft()[1])
            if queue:
                heapq.heappush(heap, (queue[0][0], tp))
            elif not caught_up(tp):
                break  # its next record, not read yet, may come before the other heads
        return out

    def drop(self) -> list[T]:
        """Forget everything held (a rebalance: it will be read again from the committed offsets)."""
        held = [payload for queue in self._queues.values() for _, payload in queue]
        self._queues.clear()
        self._last_time.clear()
        return held
