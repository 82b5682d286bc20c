"""Publishing the connector's events, and following whether the cluster can be reached.

Called by every part of the connector that reports something. ``Reporter`` wraps a ``Publisher``:
each event gets the id its caller derived (so a duplicate after a restart is recognisable) and
publishing retries with backoff while the log is down; publishes are serialised, because the
connector's producer is transactional (one connector per cluster: a second instance fences the first).

``Reachability`` takes the result of every API request. When requests keep failing for
``unreachable_after_s`` it logs one clear error and publishes ``ClusterStatusChanged(unreachable)``;
the first success after that publishes ``reachable`` again. The first success ever also publishes
``reachable`` (the connector's start).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from connectors.kubernetes.kubeapi import KubeError
from connectors.kubernetes.throttle import Backoff
from events.catalog.base import Event
from events.catalog.inventory import ClusterStatus, ClusterStatusChanged
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId
from events.log import LogError, ProducerFenced
from events.publisher import Publisher

log = logging.getLogger("fedsched.connector.kubernetes")


class Reporter:
    def __init__(self, publisher: Publisher, *, backoff: Backoff | None = None) -> None:
        self.publisher = publisher
        self._backoff = backoff or Backoff(0.2, 10.0)
        self._lock = asyncio.Lock()
        self.published = 0

    async def publish(self, items: Sequence[tuple[Event, str | None]]) -> None:
        """Publish events, each with its id (None: a fresh one), as one atomic append; retry until done."""
        if not items:
            return
        envelopes = [self.publisher.envelope(event, id=ident) for event, ident in items]
        async with self._lock:
            while True:
                try:
                    await self.publisher.publish(envelopes)
                    self._backoff.reset()
                    self.published += len(envelopes)
                    return
                except ProducerFenced:
                    log.error("event=producer_fenced reason=another connector for this cluster took over")
                    raise
                except (TimeoutError, LogError, OSError) as error:
                    delay = self._backoff.next_delay()
                    log.warning("event=publish_retry error=%r retry_in_s=%.1f", str(error), delay)
                    await asyncio.sleep(delay)

    async def publish_one(self, event: Event, ident: str | None = None) -> None:
        await self.publish([(event, ident)])


class Reachability:
    def __init__(
        self,
        cluster: ClusterId,
        reporter: Reporter,
        *,
        unreachable_after_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self._reporter = reporter
        self.unreachable_after_s = unreachable_after_s
        self._clock = clock
        self.status: ClusterStatus | None = None
        self._failing_since: float | None = None
        self._last_error = ""
        self._changes: asyncio.Queue[ClusterStatusChanged] = asyncio.Queue()

    def result(self, error: KubeError | None) -> None:
        """The outcome of one API request (``None``: it succeeded)."""
        if error is None:
            self._failing_since = None
            if self.status is not ClusterStatus.REACHABLE:
                if self.status is ClusterStatus.UNREACHABLE:
                    log.warning("event=cluster_reachable cluster=%s", self.cluster)
                self._change(ClusterStatus.REACHABLE, ReasonCode.RECOVERED, "the API server answers")
            return
        self._last_error = str(error)
        if self._failing_since is None:
            self._failing_since = self._clock()
        self.check()

    def check(self) -> None:
        """Declare the cluster unreachable once failures have lasted long enough (also run on a timer)."""
        if self._failing_since is None or self.status is ClusterStatus.UNREACHABLE:
            return
        failing_s = self._clock() - self._failing_since
        if failing_s >= self.unreachable_after_s:
            log.error(
                "event=cluster_unreachable cluster=%s failing_for_s=%.1f error=%r",
                self.cluster,
                failing_s,
                self._last_error,
            )
            message = f"the API server has not answered for {failing_s:.0f} s: {self._last_error}"
            self._change(ClusterStatus.UNREACHABLE, ReasonCode.CLUSTER_API_UNAVAILABLE, message[:4096])

    def _change(self, status: ClusterStatus, reason: ReasonCode, message: str) -> None:
        self.status = status
        self._changes.put_nowait(
            ClusterStatusChanged(cluster=self.cluster, status=status, reason=reason, message=message)
        )

    async def run(self, tick_s: float = 0.5) -> None:
        """Publish status changes in the order they happened; check the failure timer every tick."""
        while True:
            try:
                change = await asyncio.wait_for(self._changes.get(), timeout=tick_s)
            except TimeoutError:
                self.check()
                continue
            await self._reporter.publish_one(change)
