"""``WatchJob``: a job's history from the job view, then its events as they are appended to the log.

Called by the jobs servicer. Calls the log's reader. The history and the live part meet exactly: the
job row and the projections' log positions are read from one database snapshot, and the live part
reads the job's partition of the jobs topic and the decisions partition from those positions on, so
no event is shown twice or missed. (Without stored positions, as when the projections run elsewhere,
the live part starts at the current end.) Only records keyed by the job id are decoded.

The status each live event leaves the job in is the lifecycle's (``status_after``): for an inference
service spread over clusters (known from its row, or from its ``JobSubmitted`` read live), a part's end
leaves it as it was, and the scheduler's ``JobRunClosed`` ends the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from events.catalog.errors import EventError
from events.catalog.jobs import JobSubmitted
from events.catalog.lifecycle import FINAL_STATUSES, spreads, status_after
from events.catalog.topics import DECISIONS, JOBS, partition_for
from events.log.contract import EventLog, LogReader, LogRecord, TopicPartition
from events.plumbing.tasks import cancel_and_wait
from events.wire.codec import decode
from services.api.pb import jobs_pb2

"""Statuses after which a watch ends unless it follows on: the catalogue's final statuses (``services.api.jobs``
reads it)."""
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


class _Job:
    """What the watch knows of the job that the status of its events depends on."""

    def __init__(self, job_id: str, spread: bool) -> None:
        self.job_id = job_id
        self.spread = spread


async def live(
    reader: LogReader,
    job_id: str,
    starts: Sequence[tuple[TopicPartition, int]],
    status: str,
    follow: bool,
    spread: bool = False,
) -> AsyncIterator[jobs_pb2.JobEvent]:
    """Events of the job from ``starts`` on, as they come; ends after a final status unless ``follow``.
    ``spread``: the job is an inference service spread over clusters (its row says so).

    One task tails each partition. Before the stream ends on a final event, everything the other
    partitions hold up to their current end is delivered first (a decision read late from the decisions
    topic is not lost behind the connector's report of the end)."""
    queue: asyncio.Queue[jobs_pb2.JobEvent | BaseException] = asyncio.Queue(maxsize=256)
    positions = dict(starts)
    job = _Job(job_id, spread)
    tasks = [asyncio.create_task(_tail(reader, tp, positions, job, queue)) for tp, _ in starts]
    try:
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            status = item.status or status
            item.status = status
            if status in FINAL_STATUSES and not follow:
                await cancel_and_wait(tasks)
                while not queue.empty():
                    earlier = queue.get_nowait()
                    if isinstance(earlier, jobs_pb2.JobEvent):
                        earlier.status = earlier.status or status
                        yield earlier
                async for earlier in _rest(reader, positions, job):
                    yield earlier
                yield item
                return
            yield item
    finally:
        await cancel_and_wait(tasks)


async def _tail(
    reader: LogReader,
    tp: TopicPartition,
    positions: dict[TopicPartition, int],
    job: _Job,
    queue: asyncio.Queue[jobs_pb2.JobEvent | BaseException],
) -> None:
    try:
        while True:
            records = await reader.read(tp, positions[tp], max_records=500, timeout_s=_POLL_S)
            for record in records:
                event = _event(record, job)
                if event is not None:
                    await queue.put(event)
                positions[tp] = record.offset + 1  # after the put: a position never skips an event
    except asyncio.CancelledError:
        raise
    except BaseException as error:  # hand it to the stream, which ends with its status
        await queue.put(error)


async def _rest(reader: LogReader, positions: dict[TopicPartition, int], job: _Job) -> AsyncIterator[jobs_pb2.JobEvent]:
    """The job's events between each partition's position and its current end."""
    for tp, offset in positions.items():
        end = await reader.end_offset(tp)
        while offset < end:
            records = await reader.read(tp, offset, max_records=500, timeout_s=_POLL_S)
            if not records:
                if await reader.caught_up(tp, offset):
                    break
                continue
            for record in records:
                event = _event(record, job)
                if event is not None:
                    yield event
            offset = records[-1].offset + 1


def _event(record: LogRecord, job: _Job) -> jobs_pb2.JobEvent | None:
    job_id = job.job_id
    if record.key != job_id.encode():
        return None
    try:
        envelope = decode(record.headers, record.value)
    except EventError:
        return None  # the consumers dead-letter it; a watcher just skips it
    data = envelope.data
    short = envelope.type.rsplit(".", 1)[-1]
    if isinstance(data, JobSubmitted):  # on the job's partition before any report of its runs
        job.spread = spreads(data)
    after = status_after(data, spread=job.spread)
    reason = str(getattr(data, "reason", "") or "")
    reasons = getattr(data, "reasons", None)
    if not reason and reasons:
        reason = ",".join(r.value for r in reasons)
    return jobs_pb2.JobEvent(
        job_id=job_id,
        time_ms=envelope.time_ms,
        event=short,
        status=after.value if after is not None else "",
        reason=reason,
        message=str(getattr(data, "message", "") or getattr(data, "explanation", "")),
        history=False,
        event_id=envelope.id,
        data_json=data.model_dump_json(),
    )


__all__ = ["history", "live", "start_positions"]
