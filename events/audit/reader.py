"""The audit archive read back as events: a job's by its key, and all of them in chain order.

Called by the audit queries (``services.audit.queries``: ``fedsched audit timeline`` and ``fedsched audit
export``). Calls asyncpg on the archive's table, which ``events.audit.archive`` creates, writes and
reads raw to verify its chain (``iter_archive``), and decodes each record (``events.wire.codec``).

A record that is not an event of the catalogue (a dead letter's junk, a type this version does not
know) is left out of what is read here; it stays in the archive and in its chain.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg

from events.catalog.errors import EventError
from events.log.headers import unpack_headers
from events.wire.codec import decode
from events.wire.envelope import Envelope

_COLUMNS = 'topic, partition, seq, "offset", key, value, headers, hash'


@dataclass(frozen=True, slots=True)
class ArchivedEvent:
    """An archived record and the event it carries: where it was in the log and in its partition's chain."""

    topic: str
    partition: int
    seq: int
    offset: int
    key: bytes | None
    envelope: Envelope
    hash: bytes


class ArchiveReader:
    """Reads of the archive for people; the archiver's own reads (its heads, the chain) stay in ``archive``."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def by_key(self, key: str) -> list[ArchivedEvent]:
        """Every archived event keyed by ``key`` (a job's id keys its events on every topic), in event-time
        order; read through the archive's key index, not the whole archive."""
        rows = await self._pool.fetch(f"SELECT {_COLUMNS} FROM fedsched_audit WHERE key = $1", key.encode())
        events = [e for e in (_event(row) for row in rows) if e is not None]
        return sorted(events, key=lambda e: (e.envelope.time_ms, e.topic, e.partition, e.offset))

    async def in_chain_order(self, *, page: int = 5000) -> AsyncIterator[ArchivedEvent]:
        """Every archived event, partition by partition (by topic, then partition) in chain order, a page of
        ``page`` records at a time (bounded memory)."""
        after: tuple[str, int, int] = ("", -1, -1)
        while True:
            rows = await self._pool.fetch(
                f"SELECT {_COLUMNS} FROM fedsched_audit"
                " WHERE (topic, partition, seq) > ($1, $2, $3) ORDER BY topic, partition, seq LIMIT $4",
                *after,
                page,
            )
            for row in rows:
                event = _event(row)
                if event is not None:
                    yield event
            if len(rows) < page:
                return
            last = rows[-1]
            after = (last["topic"], last["partition"], last["seq"])


def _event(row: asyncpg.Record) -> ArchivedEvent | None:
    try:
        envelope = decode(unpack_headers(bytes(row["headers"])), bytes(row["value"]))
    except EventError:
        return None
    return ArchivedEvent(
        topic=row["topic"],
        partition=row["partition"],
        seq=row["seq"],
        offset=row["offset"],
        key=None if row["key"] is None else bytes(row["key"]),
        envelope=envelope,
        hash=bytes(row["hash"]),
    )
