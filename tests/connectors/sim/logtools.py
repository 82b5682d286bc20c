"""Test helpers on the real log: a tail that collects one cluster's events, and a client that publishes
submissions, placements and requests the way the API and the scheduler would."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from events.catalog.base import Event
from events.catalog.errors import EventError
from events.catalog.topics import INVENTORY, JOBS
from events.log import EventLog, LogReader, TopicPartition
from events.log.publisher import Publisher
from events.wire.codec import decode
from events.wire.envelope import Envelope

E = TypeVar("E", bound=Event)


def unique(prefix: str) -> str:
    """A cluster or job id no other test (or earlier run on the same broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Tail:
    """Follows the jobs and inventory topics from where they end now and keeps the events about one
    cluster (its inventory, and lifecycle facts naming it)."""

    def __init__(self, event_log: EventLog, cluster: str) -> None:
        self._log = event_log
        self.cluster = cluster
        self.envelopes: list[Envelope] = []
        self._offsets: dict[TopicPartition, int] = {}
        self._reader: LogReader | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    async def __aenter__(self) -> Tail:
        self._reader = await self._log.reader()
        for topic in (JOBS.name, INVENTORY.name):
            for partition in range(await self._log.partitions(topic)):
                tp = TopicPartition(topic, partition)
                self._offsets[tp] = await self._reader.end_offset(tp)
        self._task = asyncio.create_task(self._pump())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._reader is not None:
            await self._reader.close()

    async def _pump(self) -> None:
        assert self._reader is not None
        while True:
            got = 0
            for tp, offset in list(self._offsets.items()):
                records = await self._reader.read(tp, offset, max_records=2000, timeout_s=0.0)
                if records:
                    self._offsets[tp] = records[-1].offset + 1
                    got += len(records)
                for record in records:
                    with contextlib.suppress(EventError):
                        envelope = decode(record.headers, record.value)
                        if getattr(envelope.data, "cluster", None) == self.cluster:
                            self.envelopes.append(envelope)
            if got:
                self._changed.set()
            await asyncio.sleep(0 if got else 0.02)

    def of(self, kind: type[E], job: str | None = None) -> list[Envelope]:
        return [e for e in self.envelopes if isinstance(e.data, kind) and (job is None or _job_of(e) == job)]

    def events(self, kind: type[E], job: str | None = None) -> list[E]:
        return [e.data for e in self.of(kind, job)]  # type: ignore[misc]

    async def wait_for(self, condition: Callable[[], object], what: str, timeout_s: float = 20.0) -> None:
        """Wait until ``condition()`` is true; fail naming ``what`` and what arrived."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = [type(e.data).__name__ for e in self.envelopes[-20:]]
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last events: {seen}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))


class Client:
    """Publishes the inputs of a simulated cluster (what the API and the scheduler would publish)."""

    def __init__(self, event_log: EventLog) -> None:
        self._publisher = Publisher(event_log, "urn:fedsched:test")

    async def __aenter__(self) -> Client:
        await self._publisher.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._publisher.close()

    async def send(self, *events: Event) -> None:
        await self._publisher.publish(list(events))


def _job_of(envelope: Envelope) -> str | None:
    return getattr(envelope.data, "job_id", None)


async def drain(tail: Tail, timeout_s: float = 20.0) -> None:
    """Wait until the tail has read everything committed so far."""
    assert tail._reader is not None
    deadline = time.monotonic() + timeout_s
    while True:
        pending = [tp for tp, offset in tail._offsets.items() if not await tail._reader.caught_up(tp, offset)]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the tail did not catch up on {pending}")
        await asyncio.sleep(0.02)
