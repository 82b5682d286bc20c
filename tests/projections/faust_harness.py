"""Test helpers for the faust projection host: worker processes and quiet detection (from
``projections.bench.workers``), and appending a recorded stream the way live producers would."""

from __future__ import annotations

from collections.abc import Sequence

from events.log import EventLog, OutRecord
from events.log.publisher import to_record
from events.wire.envelope import Envelope
from projections.bench.workers import WorkerProcess, lag, wait_members, wait_quiet

__all__ = ["WorkerProcess", "append_causally", "lag", "wait_members", "wait_quiet"]


async def append_causally(event_log: EventLog, names: dict[str, str], envelopes: Sequence[Envelope]) -> None:
    """Append in event-time slices, each acknowledged before the next is sent: a cause is in the log
    before its effect is produced, as when the scheduler and connectors react to what they read.
    (One append of records for several partitions makes no promise of which becomes visible first.)"""
    producer = await event_log.producer()
    try:
        slice_: list[OutRecord] = []
        slice_time: int | None = None
        for envelope in envelopes:
            if slice_ and envelope.time_ms != slice_time:
                await producer.append(slice_)
                slice_ = []
            slice_time = envelope.time_ms
            record = to_record(envelope)
            slice_.append(OutRecord(names[record.topic], record.value, record.key, record.headers))
        if slice_:
            await producer.append(slice_)
    finally:
        await producer.close()
