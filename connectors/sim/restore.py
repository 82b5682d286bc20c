"""Reading back what the log holds about a simulated cluster, at start-up (``History``).

Called by the host before it publishes anything. Calls the ``EventLog`` reader: every partition of the
decisions, jobs and inventory topics, from the beginning to the end as of the call. Records are picked
by their CloudEvents headers and key before any is decoded, so other clusters' inventory and other
events' bodies cost little; this connector's own inventory records are decoded only when they carry a
node snapshot or a status, the rest give only their time.
"""

from __future__ import annotations

import logging

from connectors.sim.history import History
from events.catalog.errors import EventError
from events.catalog.topics import DECISIONS, INVENTORY, JOBS
from events.log import EventLog, LogRecord, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode
from events.wire.envelope import parse_time

log = logging.getLogger("fedsched.connector.sim")

_SUBMITTED = b"io.fedsched.JobSubmitted"
_REQUEST_TYPES = frozenset(f"io.fedsched.{name}".encode() for name in ("JobSubmitted", "JobCancelRequested"))
_LIFECYCLE_TYPES = frozenset(
    f"io.fedsched.{name}".encode()
    for name in ("JobStarted", "JobSucceeded", "JobFailed", "JobCancelled", "JobPreempted", "JobReclaimed")
)
_DECISION_TYPES = frozenset(
    f"io.fedsched.{name}".encode()
    for name in ("JobPlaced", "JobReplicasAdded", "JobPreemptionRequested", "JobReclaimRequested")
)
_SNAPSHOT_TYPES = frozenset(
    f"io.fedsched.{name}".encode() for name in ("NodeObserved", "NodeRemoved", "ClusterStatusChanged")
)


async def read_history(event_log: EventLog, *histories: History) -> dict[TopicPartition, int]:
    """Fold every relevant record into each of ``histories`` (one read serves every cluster of a fleet):
    the decisions first (so the jobs placed here are
    known before the jobs topic is read, and other jobs' lifecycle records can be skipped undecoded),
    then the jobs and inventory partitions; submissions of jobs not placed here are kept undecoded.

    Partitions are read one after the other: reading several at once through Kafka readers (each one
    prefetching up to 8 MiB per partition) made a loaded broker crawl, and the fold depends only on the
    order within a partition anyway.

    Returns, for the jobs and decisions partitions, an offset up to which everything has been folded:
    the host's consumer group may start there instead of re-reading what the restore already covered."""
    ends: dict[TopicPartition, int] = {}
    for topic in (DECISIONS.name, JOBS.name, INVENTORY.name):
        for partition in range(await event_log.partitions(topic)):
            await _read_partition(event_log, TopicPartition(topic, partition), histories, ends)
    return {tp: offset for tp, offset in sorted(ends.items()) if tp.topic in (JOBS.name, DECISIONS.name)}


async def _read_partition(
    event_log: EventLog, tp: TopicPartition, histories: tuple[History, ...], ends: dict[TopicPartition, int]
) -> None:
    # A reader per partition, closed when done: a Kafka reader keeps fetching what it has open.
    reader = await event_log.reader()
    try:
        ends[tp] = await reader.end_offset(tp)  # read_to_end reads at least this far
        async for batch in read_to_end(reader, tp):
            for record in batch:
                for history in histories:
                    _fold(history, record)
    finally:
        await reader.close()


def _fold(history: History, record: LogRecord) -> None:
    kind = record.header("ce_type")
    if record.topic == JOBS.name:
        if kind == _SUBMITTED and record.key is not None and not _placed_here(history, record):
            history.add_unread(record.key.decode(errors="replace"), record.headers, record.value)
            return
        wanted = kind in _REQUEST_TYPES or (kind in _LIFECYCLE_TYPES and _placed_here(history, record))
    elif record.topic == DECISIONS.name:
        wanted = kind in _DECISION_TYPES
    else:
        wanted = _own_inventory(history, record) and kind in _SNAPSHOT_TYPES
    if not wanted:
        return
    try:
        history.add(decode(record.headers, record.value))
    except EventError as error:
        log.warning("event=restore_skipped topic=%s offset=%d reason=%r", record.topic, record.offset, str(error))


def _placed_here(history: History, record: LogRecord) -> bool:
    return record.key is not None and record.key.decode(errors="replace") in history.placed_jobs


def _own_inventory(history: History, record: LogRecord) -> bool:
    """True for this connector's own inventory records; notes the time of each one."""
    key = (record.key or b"").decode(errors="replace")
    if key != history.cluster and not key.startswith(history.cluster + "/"):
        return False
    if record.header("ce_source") != history.source.encode():
        return False
    stamp = record.header("ce_time")
    if stamp is not None:
        try:
            history.note_own_time(parse_time(stamp.decode()))
        except ValueError:
            return False
    return True


__all__ = ["read_history"]
