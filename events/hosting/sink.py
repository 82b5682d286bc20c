"""Where a host's step ends: its outputs and its new positions, written in one transaction.

Called by the hosts that write to the log: the scheduler (decisions and its group's offsets), governance
(its actions), the intake and the connectors' consumers (answers, dead letters and their group's offsets)
and the in-process projection runner (its published profiles and dead letters). The hosts that write to
PostgreSQL have sinks of the same shape beside their tables: the read models
(``projections.readmodel.writer.ReadModelSink``) and the audit archive
(``events.audit.archive.ArchiveSink``). Calls the ``EventLog`` ports.

A ``LogSink`` appends through one producer. With a transactional id it fences every earlier producer of
that id when it starts (a second instance of the host, or this one's predecessor), and an append is
atomic with the offsets it commits. A failed append leaves nothing or, when it was in doubt, what the
host's next read finds committed: the producer is dropped and the next commit opens a new one, whose
start aborts whatever the old one left open. ``ProducerFenced`` is never retried: another instance took
over, and the host stops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from events.log.contract import Appended, EventLog, GroupOffsets, LogProducer, OutRecord, TopicPartition
from events.plumbing.outage import transient

Out_contra = TypeVar("Out_contra", contravariant=True)


class Sink(Protocol[Out_contra]):
    """The shape every host's sink has: a step's outputs and the positions they cover, committed
    together or not at all."""

    async def commit(self, outputs: Out_contra, positions: Mapping[TopicPartition, int]) -> object: ...


class LogSink:
    """Appends records, with a consumer group's offsets when the host has one, in one transaction.

    ``namespace`` prefixes every topic written (several deployments, or tests, on one log); ``group``
    names the consumer group whose offsets ``commit`` stores (None: the host keeps its positions
    elsewhere and ``commit`` appends only)."""

    def __init__(
        self,
        log: EventLog,
        transactional_id: str | None,
        *,
        namespace: str = "",
        group: str | None = None,
    ) -> None:
        self._log = log
        self.transactional_id = transactional_id
        self._prefix = f"{namespace}." if namespace else ""
        self.group = group
        self._producer: LogProducer | None = None

    async def start(self) -> None:
        """Open the producer now (fencing earlier holders of the transactional id) rather than at the
        first commit."""
        await self._open()

    async def commit(
        self, outputs: Sequence[OutRecord], positions: Mapping[TopicPartition, int] | None = None
    ) -> list[Appended]:
        """Append ``outputs`` (and the group's ``positions``, when given) atomically; each record's place."""
        producer = await self._open()
        records = [replace(r, topic=self._prefix + r.topic) for r in outputs] if self._prefix else list(outputs)
        offsets = GroupOffsets(self.group, positions) if self.group is not None and positions else None
        try:
            return await producer.append(records, offsets=offsets)
        except Exception as error:
            if transient(error):
                # Aborted, or in doubt: a new producer's start aborts whatever this one left open.
                await self.drop()
            raise

    async def drop(self) -> None:
        """Forget the producer (it failed, or the host lost the right to write): the next commit, or
        ``start``, opens a new one."""
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(Exception):  # fenced, or the log is away: closing is only tidying up
                await producer.close()

    @property
    def open(self) -> bool:
        return self._producer is not None

    async def close(self) -> None:
        await self.drop()

    async def _open(self) -> LogProducer:
        if self._producer is None:
            self._producer = await self._log.producer(self.transactional_id)
        return self._producer


__all__ = ["LogSink", "Sink"]
