"""Audit queries for compliance: a job's timeline, an export of the archive, the fleet at a moment.

Called by ``fedsched audit timeline|export|at``. Reads the hash-chained archive through its reader
(``events.audit.reader``) and shapes its events for people (a short type name, the event's fields as
JSON, reasons and messages); folds the log for ``at``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg

from events.audit.reader import ArchivedEvent, ArchiveReader
from events.catalog.errors import EventError
from events.log.contract import EventLog, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode
from services.scheduler.core.decide import INPUT_TOPICS
from services.scheduler.core.state import SchedulerState


@dataclass(frozen=True, slots=True)
class AuditEvent:
    topic: str
    partition: int
    offset: int
    time_ms: int
    type: str
    id: str
    key: str | None
    data: dict[str, object]
    hash: str

    @property
    def reason(self) -> str:
        for name in ("reason", "rule"):
            value = self.data.get(name)
            if isinstance(value, str):
                return value
        reasons = self.data.get("reasons")
        if isinstance(reasons, list):
            return ",".join(str(r) for r in reasons)
        return ""

    @property
    def message(self) -> str:
        for name in ("message", "explanation"):
            value = self.data.get(name)
            if isinstance(value, str) and value:
                return value
        return ""


def _audit_event(archived: ArchivedEvent) -> AuditEvent:
    envelope = archived.envelope
    return AuditEvent(
        topic=archived.topic,
        partition=archived.partition,
        offset=archived.offset,
        time_ms=envelope.time_ms,
        type=envelope.type.rsplit(".", 1)[-1],
        id=envelope.id,
        key=None if archived.key is None else archived.key.decode(errors="replace"),
        data=json.loads(envelope.data.model_dump_json()),
        hash=archived.hash.hex(),
    )


async def timeline(pool: asyncpg.Pool, job_id: str) -> list[AuditEvent]:
    """Every archived event about a job (keyed by it on any topic), in event-time order."""
    return [_audit_event(e) for e in await ArchiveReader(pool).by_key(job_id)]


async def export(pool: asyncpg.Pool, fmt: str, *, page: int = 5000) -> AsyncIterator[str]:
    """The whole archive, chain order per partition, as JSON lines or CSV (with a header)."""
    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"format must be jsonl or csv, got {fmt!r}")
    columns = ("topic", "partition", "offset", "time_ms", "type", "id", "key", "hash", "data")
    if fmt == "csv":
        yield ",".join(columns) + "\n"
    async for archived in ArchiveReader(pool).in_chain_order(page=page):
        event = _audit_event(archived)
        record = {
            "topic": event.topic,
            "partition": event.partition,
            "offset": event.offset,
            "time_ms": event.time_ms,
            "type": event.type,
            "id": event.id,
            "key": event.key,
            "hash": event.hash,
            "data": event.data,
        }
        if fmt == "jsonl":
            yield json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        else:
            buffer = io.StringIO()
            writer = csv.writer(buffer)
            writer.writerow([*(record[c] for c in columns[:-1]), json.dumps(event.data, sort_keys=True)])
            yield buffer.getvalue()


async def state_at(event_log: EventLog, time_ms: int, *, namespace: str = "") -> SchedulerState:
    """The scheduler's view of the federation (fleet, queues, quotas) as it stood at ``time_ms``:
    every input event that happened at or before then, folded."""
    prefix = f"{namespace}." if namespace else ""
    state = SchedulerState()
    reader = await event_log.reader()
    try:
        for topic in INPUT_TOPICS:
            for partition in range(await event_log.partitions(prefix + topic)):
                async for batch in read_to_end(reader, TopicPartition(prefix + topic, partition), max_records=5000):
                    for record in batch:
                        try:
                            envelope = decode(record.headers, record.value)
                        except EventError:
                            continue
                        if envelope.time_ms <= time_ms:
                            state.fold(envelope)
    finally:
        await reader.close()
    return state
