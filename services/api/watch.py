"""``WatchJob``: a job's history from the job view, then its events as they are appended to the log.

Called by the jobs servicer. Calls the log's reader. The history and the live part meet exactly: the
job row and the projections' log positions are read from one database snapshot, and the live part
reads the job's partition of the jobs topic and the decisions partition from those positions on, so
no event is shown twice or missed. (Without stored positions, as when the projections run elsewhere,
the live part starts at the current end.) Only records keyed by the job id are decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from events.codec import decode
from events.errors import EventError
from events.log.contract import EventLog, LogReader, TopicPartition
from events.topics import DECISIONS, JOBS, partition_for
from services.api.pb import jobs_pb2

FINAL = frozenset({"succeeded", "failed", "cancelled", "rejected"})
_STATUS_AFTER = {
    "JobSubmitted": "submitted",
    "JobQueued": "queued",
    "JobPlaced": "placed",
    "JobStarted": "running",
    "JobSucceeded": "succeeded",
    "JobFailed": "failed",
    "JobCancelled": "cancelled",
    "JobRejected": "rejected",
    "JobPreempted": "queued",
    "JobReclaimed": "queued",
}
_POLL_S = 1.0


def history(row: Mapping[str, Any]) -> list[jobs_pb2.JobEvent]:
    return [
        jobs_pb2.JobEvent(
            job_id=row["entity_key"],
            time_ms=int(t),
            event=str(event),
            status=str(status),
            reason=str(reason),
            message=str(message),
            history=True,
        )
        for t, status, event, reason, message in row.get("timeline") or ()
    ]


async def start_positions(
    log: EventLog, reader: LogReader, job_id: str, stored: Mapping[tuple[str, int], int], from_now: bool
) -> list[tuple[TopicPartition, int]]:
    jobs_tp = TopicPartition(JOBS.name, partition_for(job_id.encode(), await log.partitions(JOBS.name)))
    decisions_tp = TopicPartition(DECISIONS.name, 0)
    out = []
    for tp in (jobs_tp, decisions_tp):
        offset = stored.get((tp.topic, tp.partition))
        out.append((tp, await reader.end_offset(tp) if offset is None or from_now else offset))
    return out


async def live(
    reader: LogReader, job_id: str, starts: Sequence[tuple[TopicPartition, int]], status: str, follow: bool
) -> AsyncIterator[jobs_pb2.JobEvent]:
    """Events of the job from ``starts`` on, as they come; ends after a final status unless ``follow``."""
    queue: asyncio.Queue[jobs_pb2.JobEvent | BaseException] = asyncio.Queue(maxsize=256)
    tasks = [asyncio.create_task(_tail(reader, tp, offset, job_id, queue)) for tp, offset in starts]
    try:
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            status = item.status or status
            item.status = status
            yield item
            if status in FINAL and not follow:
                return
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _tail(
    reader: LogReader,
    tp: TopicPartition,
    offset: int,
    job_id: str,
    queue: asyncio.Queue[jobs_pb2.JobEvent | BaseException],
) -> None:
    key = job_id.encode()
    try:
        while True:
            records = await reader.read(tp, offset, max_records=500, timeout_s=_POLL_S)
            for record in records:
                offset = record.offset + 1
                if record.key != key:
                    continue
                try:
                    envelope = decode(record.headers, record.value)
                except EventError:
                    continue  # the consumers dead-letter it; a watcher just skips it
                short = envelope.type.rsplit(".", 1)[-1]
                reason = str(getattr(envelope.data, "reason", "") or "")
                if not reason and hasattr(envelope.data, "reasons"):
                    reason = ",".join(r.value for r in envelope.data.reasons)
                await queue.put(
                    jobs_pb2.JobEvent(
                        job_id=job_id,
                        time_ms=envelope.time_ms,
                        event=short,
                        status=_STATUS_AFTER.get(short, ""),
                        reason=reason,
                        message=str(getattr(envelope.data, "message", "") or getattr(envelope.data, "explanation", "")),
                        history=False,
                        event_id=envelope.id,
                        data_json=envelope.data.model_dump_json(),
                    )
                )
    except asyncio.CancelledError:
        raise
    except BaseException as error:  # hand it to the stream, which ends with its status
        await queue.put(error)


__all__ = ["history", "live", "start_positions"]
