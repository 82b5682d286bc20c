"""The step of a consumer-group host whose work is per event: decode, hand good events on, dead-letter bad ones.

Called by the connectors (the simulated cluster and the Kubernetes connector act on the decisions and job
requests of their cluster). Calls ``GroupFollower`` (the group's records) and ``LogSink`` (the dead
letters with the group's offsets). For each poll: every record is decoded; valid ones go to the handler
in log order; invalid ones go to the dead-letter topic with the reason, an event whose time lies
further from its record's time in the log than the allowed skew among them (``decode_record``). The
dead letters and the group's new offsets are committed in one transaction, so a crash never loses a bad
record nor skips a good one (the handler sees a record at least once; handlers are idempotent).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from events.catalog.errors import EventError
from events.hosting.follower import GroupFollower, after
from events.hosting.sink import LogSink
from events.log.contract import EventLog, LogRecord, TopicPartition
from events.log.deadletter import dead_letter
from events.log.reading import decode_record, skew_from_environment
from events.wire.codec import TimeSkew
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
        skew: TimeSkew | None = None,
    ) -> None:
        """``skip_types``: event types the handler never reads, passed over without decoding when the
        record's ``ce_type`` header names one (a record without that header is decoded, and
        dead-lettered if it is bad, as any other). ``skew``: how far an event's time may lie from its
        record's time in the log (None: as the environment says, see ``events.log.reading``)."""
        self._group_id = group_id
        self._handler = handler
        self._skip = frozenset(t.encode() for t in skip_types)
        self._skew = skew if skew is not None else skew_from_environment(os.environ)
        self._follower = GroupFollower(event_log, group_id, topics)
        self._sink = LogSink(event_log, f"{group_id}-dlq-{instance}", group=group_id)
        self._started = False
        self.positions: dict[TopicPartition, int] = {}
        """The next offset to handle of every partition this member has read records of (its lag's measure)."""
        self.handled = 0
        self.dead_lettered = 0

    async def start(self) -> None:
        await self._follower.start()
        await self._sink.start()
        self._started = True

    async def close(self) -> None:
        try:
            await self._follower.close()
        finally:
            await self._sink.close()

    async def poll_once(self, *, max_records: int = 500, timeout_s: float = 1.0) -> PollResult:
        if not self._started:
            raise RuntimeError("the consumer is not started")
        records = await self._follower.poll(max_records=max_records, timeout_s=timeout_s)
        if not records:
            return PollResult(0, 0)
        dead = []
        handled = 0
        skip = self._skip
        for record in records:
            if skip and any(name == "ce_type" and value in skip for name, value in record.headers):
                continue
            try:
                envelope = decode_record(record, self._skew)
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
        done = after(records)
        await self._sink.commit(dead, done)
        self.positions.update(done)
        self.handled += handled
        self.dead_lettered += len(dead)
        return PollResult(handled, len(dead))
