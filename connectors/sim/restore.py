"""Reading back what the log holds about a simulated cluster, at start-up (``History``).

Called by the host before it publishes anything. Calls the ``EventLog`` reader: every partition of the
jobs, decisions and inventory topics, from the beginning to the end as of the call. Records are picked
by their CloudEvents headers and key before any is decoded, so other clusters' inventory and other
events' bodies cost little; this connector's own inventory records are decoded only when they carry a
node snapshot or a status, the rest give only their time.
"""

from __future__ import annotations

import logging

from connectors.sim.history import History
from events.codec import decode
from events.envelope import parse_time
from events.errors import EventError
from events.log import EventLog, LogRecord, TopicPartition
from events.log.reading import read_to_end
from events.topics import DECISIONS, INVENTORY, JOBS

log = logging.getLogger("fedsched.connector.sim")

_JOB_TYPES = frozenset(
    f"io.fedsched.{name}".encode()
    for name in (
        "JobSubmitted",
        "JobCancelRequested",
        "JobStarted",
        "JobSucceeded",
        "JobFailed",
        "JobCancelled",
        "JobPreempted",
        "JobReclaimed",
    )
)
_DECISION_TYPES = frozenset(
    f"io.fedsched.{name}".encode() for name in ("JobPlaced", "JobPreemptionRequested", "JobReclaimRequested")
)
_SNAPSHOT_TYPES = frozenset(
    f"io.fedsched.{name}".encode() for name in ("NodeObserved", "NodeRemoved", "ClusterStatusChanged")
)


async def read_history(event_log: EventLog, history: History) -> History:
    """Fold every relevant record into ``history`` and return it."""
    reader = await event_log.reader()
    try:
        for topic in (JOBS.name, DECISIONS.name, INVENTORY.name):
            for partition in range(await event_log.partitions(topic)):
                async for batch in read_to_end(reader, TopicPartition(topic, partition)):
                    for record in batch:
                        _fold(history, record)
    finally:
        await reader.close()
    return history


def _fold(history: History, record: LogRecord) -> None:
    kind = record.header("ce_type")
    if record.topic == JOBS.name:
        wanted = kind in _JOB_TYPES
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
