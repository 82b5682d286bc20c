"""Publishing the connector's events, and following whether the cluster can be reached.

Called by every part of the connector that reports something. ``Reporter`` wraps a ``Publisher``:
each event gets the id its caller derived (so a duplicate after a restart is recognisable); appends
are serialised, because the connector's producer is transactional (one connector per cluster: a
second instance fences the first), and grouped: whatever was submitted while one append was in flight
goes out in the next, so a burst of watch events costs a few transactions, not one each.

``Reachability`` takes the result of every API request. When requests keep failing for
``unreachable_after_s`` it logs one clear error and publishes ``ClusterStatusChanged(unreachable)``;
the first success after that publishes ``reachable`` again. The first success ever also publishes
``reachable`` (the connector's start).

A refusal of the connector itself (``KubeError.denied``: 401, or the authoriser's 403) counts the same
way, but per kind of request (``POST pods``): other requests succeeding do not clear it, only a
success of the same kind does, so a connector that may watch pods but not create them is reported
unreachable and does not flap. A refusal not seen again for ``forget_denied_s`` is forgotten (nothing
retries it any more, e.g. no placement comes to an unreachable cluster), so the cluster is offered
again and the next attempt tells.
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
from events.log.publisher import Publisher
from events.plumbing.outage import transient
from events.plumbing.tasks import cancel_and_wait
from events.wire.envelope import Envelope

log = logging.getLogger("fedsched.connector.kubernetes")


class Reporter:
    """Group commit: events submitted while an append is in flight go out together in the next one.

    ``submit`` queues and returns at once (a future for the caller who needs to know, e.g. before
    annotating a pod); ``publish`` waits for the commit. Order is kept: batches go out in the order
    their events were submitted. One flusher task appends; it retries while the log is down (any
    transient error of Kafka or PostgreSQL, ``events.plumbing.outage``) and stops for good on
    ``ProducerFenced``, which every waiting and later caller then gets.

    ``close`` ends it for good, whenever it comes: what was submitted and not appended fails with "the
    reporter stopped" (its exception taken, so asyncio logs nothing if its submitter stopped waiting),
    and a later ``submit`` raises. A close that comes before the flusher task first ran used to leave
    the queued futures pending forever, and the next ``submit`` started a second flusher that appended
    after the connector had stopped.
    """

    def __init__(
        self, publisher: Publisher, *, backoff: Backoff | None = None, max_batch: int = 500, max_pending: int = 20_000
    ) -> None:
        self.publisher = publisher
        self._backoff = backoff or Backoff(0.2, 10.0)
        self.max_batch = max_batch
        self.max_pending = max_pending
        self._queue: list[tuple[list[Envelope], asyncio.Future[None]]] = []
        self._pending = 0
        self._wakeup = asyncio.Event()
        self._room = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        """Why it stopped (``ProducerFenced``, or "the reporter stopped"): raised by every later submit."""
        self.published = 0
        self.appends = 0

    def submit(self, items: Sequence[tuple[Event, str | None]]) -> asyncio.Future[None]:
        """Queue events, each with its id (None: a fresh one); the future resolves once they are in the log."""
        if self._failure is not None:
            raise self._failure
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        envelopes = [self.publisher.envelope(event, id=ident) for event, ident in items]
        if not envelopes:
            future.set_result(None)
            return future
        self._queue.append((envelopes, future))
        self._pending += len(envelopes)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush_forever())
        return future

    async def publish(self, items: Sequence[tuple[Event, str | None]]) -> None:
        await self.submit(items)

    async def publish_one(self, event: Event, ident: str | None = None) -> None:
        await self.publish([(event, ident)])

    async def room(self) -> None:
        """Wait while more than ``max_pending`` events are queued (back pressure for the watchers); raises
        why the reporter stopped, if it did (nothing would make room)."""
        while self._pending > self.max_pending:
            if self._failure is not None:
                raise self._failure
            self._room.clear()
            await self._room.wait()

    async def close(self) -> None:
        """Stop for good: the flusher is cancelled, what it had not appended fails, later submits raise."""
        task, self._task = self._task, None
        if self._failure is None:
            self._failure = RuntimeError("the reporter stopped")
        if task is not None:
            await cancel_and_wait([task])
        self._fail_all([])  # a flusher cancelled before it first ran failed nothing
        self._room.set()

    def _fail_all(self, batch: list[tuple[list[Envelope], asyncio.Future[None]]]) -> None:
        """Fail ``batch`` (in doubt) and everything queued with the reason the reporter stopped."""
        assert self._failure is not None
        queued, self._queue = self._queue, []
        for _, future in [*batch, *queued]:
            if not future.done():
                future.set_exception(self._failure)
                # Its submitter may have stopped waiting (cancelled with the connector): taken here, so
                # asyncio does not log it as never retrieved; a waiting submitter still gets it.
                future.exception()

    def _take(self) -> list[tuple[list[Envelope], asyncio.Future[None]]]:
        batch: list[tuple[list[Envelope], asyncio.Future[None]]] = []
        size = 0
        while self._queue and (not batch or size + len(self._queue[0][0]) <= self.max_batch):
            entry = self._queue.pop(0)
            batch.append(entry)
            size += len(entry[0])
        return batch

    async def _flush_forever(self) -> None:
        batch: list[tuple[list[Envelope], asyncio.Future[None]]] = []
        try:
            while True:
                if not self._queue:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                batch = self._take()
                await self._append([e for envelopes, _ in batch for e in envelopes])
                for envelopes, future in batch:
                    self._pending -= len(envelopes)
                    if not future.done():
                        future.set_result(None)
                batch = []
                self._room.set()
        except BaseException as error:
            if isinstance(error, ProducerFenced):
                self._failure = error
            elif self._failure is None:
                self._failure = RuntimeError("the reporter stopped")
            self._fail_all(batch)  # the batch being appended too: it is in doubt
            self._room.set()
            raise

    async def _append(self, envelopes: list[Envelope]) -> None:
        while True:
            try:
                await self.publisher.publish(envelopes)
                self._backoff.reset()
                self.published += len(envelopes)
                self.appends += 1
                return
            except ProducerFenced:
                log.error("event=producer_fenced reason=another connector for this cluster took over")
                raise
            except Exception as error:
                if not (transient(error) or isinstance(error, LogError)):
                    raise
                delay = self._backoff.next_delay()
                log.warning("event=publish_retry error=%r retry_in_s=%.1f", str(error), delay)
                await asyncio.sleep(delay)


class Reachability:
    def __init__(
        self,
        cluster: ClusterId,
        reporter: Reporter,
        *,
        unreachable_after_s: float = 5.0,
        forget_denied_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self._reporter = reporter
        self.unreachable_after_s = unreachable_after_s
        self.forget_denied_s = max(forget_denied_s, unreachable_after_s)
        self._clock = clock
        self.status: ClusterStatus | None = None
        self._failing_since: float | None = None
        self._last_error = ""
        self._denied: dict[str, tuple[float, float, str]] = {}
        """Kind of request -> (refused since, last refused, the error) while the connector is refused it."""
        self._changes: asyncio.Queue[ClusterStatusChanged] = asyncio.Queue()

    def result(self, error: KubeError | None, what: str = "") -> None:
        """The outcome of one API request (``None``: it succeeded) and what it was (``POST pods``)."""
        now = self._clock()
        if error is None:
            self._failing_since = None
            self._denied.pop(what, None)
            self._forget(now)
            if self.status is not ClusterStatus.REACHABLE and not self._denied:
                self._reachable()
            return
        if error.denied:
            since = self._denied[what][0] if what in self._denied else now
            self._denied[what] = (since, now, str(error))
        else:
            self._last_error = str(error)
            if self._failing_since is None:
                self._failing_since = now
        self.check()

    def _forget(self, now: float) -> None:
        for what, (_, last, _) in list(self._denied.items()):
            if now - last >= self.forget_denied_s:
                del self._denied[what]

    def _reachable(self) -> None:
        if self.status is ClusterStatus.UNREACHABLE:
            log.warning("event=cluster_reachable cluster=%s", self.cluster)
        self._change(ClusterStatus.REACHABLE, ReasonCode.RECOVERED, "the API server answers")

    def check(self) -> None:
        """Declare the cluster unreachable once failures have lasted long enough (also run on a timer)."""
        now = self._clock()
        self._forget(now)
        if self.status is ClusterStatus.UNREACHABLE:
            if self._failing_since is None and not self._denied:
                self._reachable()  # the refusals were forgotten: offer the cluster again
            return
        if self._failing_since is not None and now - self._failing_since >= self.unreachable_after_s:
            failing_s = now - self._failing_since
            error = self._last_error
            message = f"the API server has not answered for {failing_s:.0f} s: {error}"
        else:
            since, what, error = min(((s, w, e) for w, (s, _, e) in self._denied.items()), default=(now, "", ""))
            failing_s = now - since
            if not what or failing_s < self.unreachable_after_s:
                return
            message = f"the API server has refused the connector ({what}) for {failing_s:.0f} s: {error}"
        log.error("event=cluster_unreachable cluster=%s failing_for_s=%.1f error=%r", self.cluster, failing_s, error)
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
