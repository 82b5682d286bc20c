"""Audit queries for compliance: a job's timeline, an export of the archive, the fleet at a moment.

Called by ``fedsched audit timeline|export|at`` and the API's AuditService. Reads the hash-chained
archive (``events.audit.archive``) through asyncpg, or folds the log for ``at``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg

from events.catalog.errors import EventError
from events.log.contract import EventLog, TopicPartition
from events.log.headers import unpack_headers
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


def _event(row: asyncpg.Record) -> AuditEvent | None:
    try:
        envelope = decode(unpack_headers(bytes(row["headers"])), bytes(row["value"]))
    except EventError:
        return None
    return AuditEvent(
        topic=row["topic"],
        partition=row["partition"],
        offset=row["offset"],
        time_ms=envelope.time_ms,
        type=envelope.type.rsplit(".", 1)[-1],
        id=envelope.id,
        key=None if row["key"] is None else bytes(row["key"]).decode(errors="replace"),
        data=json.loads(envelope.data.model_dump_json()),
        hash=bytes(row["hash"]).hex(),
    )


async def timeline(pool: asyncpg.Pool, job_id: str) -> list[AuditEvent]:
    """Every archived event about a job (keyed by it on any topic), in event-time order."""
    rows = await pool.fetch(
        'SELECT topic, partition, "offset", key, value, headers, hash FROM fedsched_audit WHERE key = $1',
        job_id.encode(),
    )
    events = [e for e in (_event(row) for row in rows) if e is not None]
    return sorted(events, key=lambda e: (e.time_ms, e.topic, e.partition, e.offset))


async def export(pool: asyncpg.Pool, fmt: str, *, page: int = 5000) -> AsyncIterator[str]:
    """The whole archive, chain order per partition, as JSON lines or CSV (with a header)."""
    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"format must be jsonl or csv, got {fmt!r}")
    columns = ("topic", "partition", "offset", "time_ms", "type", "id", "key", "hash", "data")
    if fmt == "csv":
        yield ",".join(columns) + "\n"
    after: tuple[str, int, int] = ("", -1, -1)
    while True:
        rows = await pool.fetch(
            'SELECT topic, partition, seq, "offset", key, value, headers, hash FROM fedsched_audit'
            " WHERE (topic, partition, seq) > ($1, $2, $3) ORDER BY topic, partition, seq LIMIT $4",
            *after,
            page,
        )
        for row in rows:
            event = _event(row)
            if event is None:
                continue
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
        if len(rows) < page:
            return
        last = rows[-1]
        after = (last["topic"], last["partition"], last["seq"])


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
