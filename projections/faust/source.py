"""The router's intake: source records as faust's conductor fetched them, raw, taken in batches.

Called by ``projections.faust.app``: its router task waits on a ``SourceBuffer`` and takes it whole;
faust's conductor fills it through the source topics' channel (``projections.faust.adapters.SourceTopic``,
which says why the router skips faust's events and streams). Calls asyncio only.

What the buffer keeps of faust's queue (``mode.utils.queues.FlowControlQueue``, whose methods the
conductor and faust's flow control call on it):
- back-pressure: from ``maxsize / 1.25`` records on, the consumer is told to stop fetching the
  partitions whose records arrive (``on_pressure_high``) until the router has taken the buffer
  (``on_pressure_drop``); at ``maxsize`` the conductor waits in ``put``;
- flow control: it is emptied whenever faust empties the agents' queues (``app.flow_control`` clears
  them on a rebalance and again when it resumes). What it held was never tracked nor acknowledged:
  it is read again from the committed offsets.
Like a stream, the router skips a record of an old generation or taken while the flow is suspended.

``log_time_ms`` reads a fetched record's time in the log (Kafka's record timestamp) off faust's message:
the router refuses an event whose own time lies further from it than the allowed skew
(``events.wire.codec.TimeSkew``), as every consumer does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class SourceBuffer:
    pressure_high_ratio = 1.25
    """As ``FlowControlQueue``'s: the share of ``maxsize`` at which fetching stops."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._high = max(1, int(maxsize / self.pressure_high_ratio))
        self._messages: list[Any] = []
        self._on_drop: set[Callable[[], None]] = set()
        self._waiter: asyncio.Future[None] | None = None
        self._wake_at = 1
        self._space: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._messages)

    # -- the conductor's side (what it calls on a channel's queue) -------------------------------------

    def full(self) -> bool:
        return len(self._messages) >= self.maxsize

    def put_nowait_enhanced(
        self, value: Any, *, on_pressure_high: Callable[[], None], on_pressure_drop: Callable[[], None]
    ) -> bool:
        messages = self._messages
        high = len(messages) >= self._high and on_pressure_drop not in self._on_drop
        if high:
            self._on_drop.add(on_pressure_drop)
            on_pressure_high()
        messages.append(value)
        self._arrived()
        return high

    async def put(self, value: Any) -> None:
        """The conductor's way in when the buffer is full: wait until the router took it."""
        while self.full():
            if self._space is None or self._space.done():
                self._space = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._space)  # several puts may wait on it; a cancelled one leaves it be
        self._messages.append(value)
        self._arrived()

    def _arrived(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done() and len(self._messages) >= self._wake_at:
            waiter.set_result(None)

    def clear(self) -> None:
        """faust's flow control empties its queues (``FlowControlEvent.clear``), around a rebalance: so is
        this one. Fetching is not resumed here: the assignment that follows sets which partitions are
        fetched (a revoked partition must not be resumed)."""
        self._messages = []
        self._on_drop = set()
        if self._space is not None and not self._space.done():
            self._space.set_result(None)

    # -- the router's side -----------------------------------------------------------------------------

    def take(self) -> list[Any]:
        """Everything held, in the order it came; fetching resumes where it was stopped."""
        messages, self._messages = self._messages, []
        on_drop, self._on_drop = self._on_drop, set()
        for callback in on_drop:
            callback()
        if self._space is not None and not self._space.done():
            self._space.set_result(None)
        return messages

    async def ready(self, size: int, linger_s: float) -> None:
        """Until ``size`` records are held, or at least one is and ``linger_s`` has passed since this was
        called (or, if none was held then, since the first arrived)."""
        loop = asyncio.get_running_loop()
        if not self._messages:
            await self._until(1, None)
        deadline = loop.time() + linger_s
        while len(self._messages) < size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            await self._until(size, remaining)

    async def _until(self, count: int, timeout_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        self._wake_at = count
        timer = loop.call_later(timeout_s, _settle, waiter) if timeout_s is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()


def log_time_ms(message: Any) -> int:
    """The record's time in the log, in milliseconds, from faust's message (which keeps Kafka's timestamp
    in seconds, as a float); 0 when it has none (a record written without one is not checked)."""
    timestamp = getattr(message, "timestamp", None)
    if not isinstance(timestamp, int | float) or timestamp <= 0:
        return 0
    return round(timestamp * 1000)


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
