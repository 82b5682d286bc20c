"""How far a host is behind the log: records committed but not yet folded (``fedsched_consumer_lag``).

Called by the composition roots (``fedsched up`` and each component's command), which hand it to
``events.plumbing.metrics.serving`` with the host's positions (a ``Follower``'s, or what a host's sink
stored). Calls the ``EventLog`` ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from events.log.contract import EventLog, LogReader, TopicPartition
from events.plumbing.metrics import Sample

log = logging.getLogger("fedsched.metrics")


class Lag:
    """Records committed but not yet folded by one component (``fedsched_consumer_lag``), measured every
    ``every_s`` in the background: the end offsets are a round trip to the log, not a thing to do at
    scrape time. A partition whose only records left are transaction markers counts 0."""

    def __init__(
        self,
        event_log: EventLog,
        component: str,
        positions: Callable[[], Mapping[TopicPartition, int]],
        every_s: float = 15.0,
    ) -> None:
        self._log = event_log
        self.component = component
        self._positions = positions
        self.every_s = every_s
        self.value: int | None = None
        self._measured_at = time.monotonic()  # counted from the start: fresh until the first try is due
        self._reader: LogReader | None = None  # kept: an idle Kafka reader's partitions are paused
        # (position, end) of partitions found to hold only markers there: not fetched again until either moves.
        self._settled: dict[TopicPartition, tuple[int, int]] = {}

    def fresh(self) -> bool:
        """Measured within three periods: the log answers (the health check of a process with a lag)."""
        return time.monotonic() - self._measured_at <= 3 * self.every_s

    async def measure(self) -> int:
        if self._reader is None:
            self._reader = await self._log.reader()
        reader = self._reader
        total = 0
        positions = sorted(self._positions().items())
        ends = await reader.end_offsets([tp for tp, _ in positions])
        for tp, position in positions:
            end = ends[tp]
            gap = max(0, end - position)
            # Perhaps only the commit marker(s) of what was folded.
            settled = 0 < gap <= 2 and (
                self._settled.get(tp) == (position, end) or await reader.caught_up(tp, position)
            )
            if settled:
                self._settled[tp] = (position, end)
                gap = 0
            total += gap
        self.value, self._measured_at = total, time.monotonic()
        return total

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
            self._reader = None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    await self.measure()
                except Exception as error:  # the log may be away for a while: the gauge keeps its last value
                    log.warning("event=lag_unmeasured component=%s error=%r", self.component, str(error))
                    await self.close()  # a fresh reader next time
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.every_s)
        finally:
            await self.close()

    def samples(self) -> list[Sample]:
        if self.value is None:
            return []
        return [("fedsched_consumer_lag", {"component": self.component}, float(self.value))]


__all__ = ["Lag"]
