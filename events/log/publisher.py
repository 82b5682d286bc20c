"""Publishing events: wrap in an envelope, encode in the CloudEvents binding, append to the log.

Called by every host that emits events (connectors, the API, projections' outputs, the scheduler
host). The clock and the id source are injected so a host can be driven by simulated time and
tests can pin both; the defaults read the wall clock and uuid4, which is fine outside the pure core.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence

from events.catalog.base import Event
from events.log.contract import Appended, EventLog, GroupOffsets, LogProducer, OutRecord
from events.wire.codec import encode
from events.wire.envelope import Envelope

Clock = Callable[[], int]
IdSource = Callable[[], str]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def random_id() -> str:
    return uuid.uuid4().hex


def to_record(envelope: Envelope) -> OutRecord:
    wire = encode(envelope)
    return OutRecord(wire.topic, value=wire.value, key=wire.key, headers=wire.headers)


class Publisher:
    """Appends events of one source. With a transactional id, each ``publish`` is atomic and fences
    earlier instances of the same source."""

    def __init__(
        self,
        log: EventLog,
        source: str,
        *,
        transactional_id: str | None = None,
        clock: Clock = wall_clock_ms,
        ids: IdSource = random_id,
    ) -> None:
        self._log = log
        self.source = source
        self._transactional_id = transactional_id
        self.clock = clock
        self._ids = ids
        self._producer: LogProducer | None = None

    async def start(self) -> None:
        self._producer = await self._log.producer(self._transactional_id)

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.close()
            self._producer = None

    def envelope(
        self,
        data: Event,
        *,
        tenant: str | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        id: str | None = None,
        time_ms: int | None = None,
    ) -> Envelope:
        return Envelope(
            id=id or self._ids(),
            time_ms=self.clock() if time_ms is None else time_ms,
            data=data,
            source=self.source,
            subject=data.partition_key(),
            tenant=tenant,
            correlation_id=correlation_id,
            causation_id=causation_id,
        )

    async def publish(
        self, events: Sequence[Event | Envelope], *, offsets: GroupOffsets | None = None
    ) -> list[Appended]:
        if self._producer is None:
            raise RuntimeError("the publisher is not started")
        envelopes = [e if isinstance(e, Envelope) else self.envelope(e) for e in events]
        return await self._producer.append([to_record(e) for e in envelopes], offsets=offsets)
