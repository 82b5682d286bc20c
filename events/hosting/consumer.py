"""The one consuming loop every host uses: decode, hand good events on, dead-letter bad ones.

Called by the projection runner, the scheduler host, the audit service and connectors. Calls the
``EventLog`` ports. For each poll: every record is decoded; valid ones go to the handler in log order;
invalid ones go to the dead-letter topic with the reason. The dead letters and the group's new offsets
are committed in one transaction, so a crash never loses a bad record nor skips a good one (the
handler sees a record at least once; handlers are idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from events.catalog.errors import EventError
from events.log.contract import EventLog, GroupConsumer, GroupOffsets, LogProducer, LogRecord, TopicPartition
from events.log.deadletter import dead_letter
from events.wire.codec import decode
from events.wire.envelope import Envelope

log = logging.getLogger("fedsched.consumer")

Handler = Callable[[LogRecord, Envelope], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class PollResult:
    handled: int
    dead_lettered: int


class EventConsumer:
    def __init__(
        self,
        event_log: EventLog,
        group_id: str,
        topics: Sequence[str],
        handler: Handler,
        *,
        instance: str = "0",
        skip_types: frozenset[str] = frozenset(),
    ) -> None:
        """``skip_types``: event types the handler never reads, passed over without decoding when the
        record's ``ce_type`` header names one (a record without that header is decoded, and
        dead-lettered if it is bad, as any other)."""
        self._log = event_log
        self._group_id = group_id
        self._topics = tuple(topics)
        self._handler = handler
        self._skip = frozenset(t.encode() for t in skip_types)
        self._transactional_id = f"{group_id}-dlq-{instance}"
        self._consumer: GroupConsumer | None = None
        self._producer: LogProducer | None = None

    async def start(self) -> None:
        self._consumer = await self._log.group_consumer(self._group_id, self._topics)
        self._producer = await self._log.producer(self._transactional_id)

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.close()
        if self._producer is not None:
            await self._producer.close()

    async def poll_once(self, *, max_records: int = 500, timeout_s: float = 1.0) -> PollResult:
        if self._consumer is None or self._producer is None:
            raise RuntimeError("the consumer is not started")
        records = await self._consumer.poll(max_records=max_records, timeout_s=timeout_s)
        if not records:
            return PollResult(0, 0)
        dead = []
        handled = 0
        next_offsets: dict[TopicPartition, int] = {}
        skip = self._skip
        for record in records:
            next_offsets[record.tp] = record.offset + 1
            if skip and any(name == "ce_type" and value in skip for name, value in record.headers):
                continue
            try:
                envelope = decode(record.headers, record.value)
            except EventError as error:
                log.warning(
                    "event=dead_letter topic=%s partition=%d offset=%d code=%s reason=%r",
                    record.topic,
                    record.partition,
                    record.offset,
                    error.reason_code,
                    str(error),
                )
                dead.append(dead_letter(record, error, self._group_id))
                continue
            await self._handler(record, envelope)
            handled += 1
        await self._producer.append(dead, offsets=GroupOffsets(self._group_id, next_offsets))
        return PollResult(handled, len(dead))
