"""The router: source records in, stage inputs out, causes first; unreadable records to the dead letters.

Called by the router task of ``projections.faust.app``. Calls the codec and the stages' ``keys``;
sends through an injected outbox, so it runs the same under faust, in agent test contexts and in
plain unit tests.

Each record read from a source topic is decoded with our codec and held in an ``Aligner`` until
the event-time order allows it through. Then, for every stage that owns keys of it, an input with
the record's source position and envelope id goes into that stage's pack for the key's partition
(one internal record per stage partition per release); an unreadable record goes, whole and with
the reason, to the dead-letter topic at its place in the order. Only after the outbox has
delivered all of that are the source records acknowledged, so their offsets are committed only
once their effect is in Kafka.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from events.catalog.errors import EventError
from events.log.contract import Headers, LogRecord, OutRecord
from events.log.deadletter import dead_letter
from events.log.reading import decode_record, skew_from_environment
from events.wire.codec import TimeSkew
from events.wire.envelope import Envelope
from projections.faust.align import TP, Aligner
from projections.faust.wire import Item, pack, partition_of, split
from projections.stages.core import KeyedBy, Position, Stage

log = logging.getLogger("fedsched.projections.router")


class Outbox(Protocol):
    async def deliver(self, records: Sequence[OutRecord], *, tombstones: bool = False) -> None:
        """Send and wait until the broker has every record (``tombstones``: an empty value is none)."""
        ...


@dataclass(frozen=True, slots=True)
class Held:
    event: Any
    """What to acknowledge once the record's effect is delivered (faust's ``Message`` of the record)."""
    record: LogRecord
    envelope: Envelope | None
    error: EventError | None


@dataclass
class RouterCounts:
    routed: int = 0
    dead_lettered: int = 0
    packs: int = 0


class Router:
    def __init__(
        self,
        stages: Iterable[Stage[Any]],
        *,
        stage_topics: Mapping[str, str],
        partitions: Mapping[str, int],
        rank: Callable[[str], int],
        dead_letters: str,
        group: str,
        outbox: Outbox,
        pack_size: int = 2000,
        skew: TimeSkew | None = None,
    ) -> None:
        self._stages = tuple(stages)
        self._skew = skew if skew is not None else skew_from_environment(os.environ)
        self._keyed_by = KeyedBy(self._stages)
        self._stage_topics = dict(stage_topics)
        self._partitions = dict(partitions)
        self._dead_letters = dead_letters
        self._group = group
        self._outbox = outbox
        self._pack_size = pack_size
        self.aligner: Aligner[Held] = Aligner(rank)
        self.counts = RouterCounts()

    def receive(
        self,
        event: Any,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes,
        headers: Headers,
        timestamp_ms: int = 0,
    ) -> None:
        """``timestamp_ms``: the record's time in the log (0: unknown, the event's time is not checked)."""
        record = LogRecord(topic, partition, offset, key, value, headers, timestamp_ms)
        try:
            envelope: Envelope | None = decode_record(record, self._skew)
            error = None
        except EventError as problem:
            envelope, error = None, problem
        time_ms = envelope.time_ms if envelope is not None else None
        self.aligner.add(topic, partition, offset, time_ms, Held(event, record, envelope, error))

    async def release(
        self, owned: Iterable[TP], caught_up: Callable[[TP], bool], ack: Callable[[Any], Awaitable[object]]
    ) -> int:
        """Route what the order allows, wait for its delivery, then acknowledge it. Returns how many."""
        ready = self.aligner.release(owned, caught_up)
        if not ready:
            return 0
        await self._outbox.deliver(self.route(ready))
        for held in ready:
            await ack(held.event)
        return len(ready)

    def route(self, ready: Sequence[Held]) -> list[OutRecord]:
        packs: dict[tuple[str, int], list[Item]] = {}
        out: list[OutRecord] = []
        for held in ready:
            record, envelope = held.record, held.envelope
            if envelope is None:
                assert held.error is not None
                log.warning(
                    "event=dead_letter topic=%s partition=%d offset=%d reason=%r",
                    record.topic,
                    record.partition,
                    record.offset,
                    str(held.error),
                )
                dead = dead_letter(record, held.error, self._group)
                out.append(OutRecord(self._dead_letters, dead.value, dead.key, dead.headers, 0))
                self.counts.dead_lettered += 1
                continue
            position = Position(record.topic, record.partition, record.offset)
            for stage in self._keyed_by(type(envelope.data)):
                for key in stage.keys(envelope):
                    where = (stage.name, partition_of(key, self._partitions[stage.name]))
                    item = Item(key, envelope.time_ms, position, envelope.data, envelope.id)
                    packs.setdefault(where, []).append(item)
            self.counts.routed += 1
        for (stage_name, partition), items in packs.items():
            for chunk in split(items, self._pack_size):
                out.append(OutRecord(self._stage_topics[stage_name], pack(chunk), None, (), partition))
                self.counts.packs += 1
        return out

    def drop(self) -> list[Held]:
        return self.aligner.drop()
