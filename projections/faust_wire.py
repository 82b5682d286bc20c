"""What travels on the faust host's internal topics: batches of stage inputs, and where they go.

Called by ``projections.faust_router`` and ``projections.faust_fold``. Pure apart from ``pickle``.

An internal record carries a *pack*: the inputs for one stage's partition that one upstream batch
produced, in order. One record per (stage, partition) per batch instead of one per entity keeps
the per-record cost of Kafka and faust off the hot path; the partition is still the entity key's
(Kafka's murmur2, as ``events.topics.partition_for``), so every entity lives on exactly one
partition and its inputs arrive in the order they were sent.

Serialisation is pickle (protocol 5) of plain tuples, the event or delta dataclass inside. It is
read only by this code from topics only this code writes (the app's own ``<app id>.stage.*``
topics); nothing from outside is ever unpickled. Public events keep the CloudEvents binding.

Positions make every input idempotent at its target (see ``projections.core.Applied``):
- an event read from the log keeps its source position and envelope id, so a record the router
  forwards twice (after a crash) or an event appended twice is recognised by the first stage;
- a delta gets a position derived from where its parent input was read: the internal topic and
  partition, and ``offset``, item index and emission index packed into one increasing integer. A
  redelivered parent record, or a parent folded again after a crash (reducers are pure, so it
  emits the same deltas in the same order), yields the same positions, which the target skips.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

from events.catalog.base import Event
from events.topics import partition_for
from projections.core import Delta, Input, Position

ITEM_BITS = 16
EMIT_BITS = 12
MAX_ITEMS = 1 << ITEM_BITS
"""Inputs per pack (the router and stages split larger groups)."""
MAX_EMITTED = 1 << EMIT_BITS
"""Deltas one input may emit (a job with more replicas than this on one placement is refused)."""


@dataclass(frozen=True, slots=True)
class Item:
    key: str
    time_ms: int
    position: Position
    item: Event | Delta
    envelope_id: str = ""

    def as_input(self) -> Input:
        return Input(self.key, self.time_ms, self.position, self.item, self.envelope_id)


def pack(items: list[Item]) -> bytes:
    rows = [
        (i.key, i.time_ms, i.position.topic, i.position.partition, i.position.offset, i.item, i.envelope_id)
        for i in items
    ]
    return pickle.dumps(rows, protocol=5)


def unpack(value: bytes) -> list[Item]:
    # Our own records on our own internal topics (see the module docstring).
    rows = pickle.loads(value)
    return [
        Item(key, time_ms, Position(topic, part, offset), item, env)
        for key, time_ms, topic, part, offset, item, env in rows
    ]


def delta_position(topic: str, partition: int, offset: int, index: int, emitted: int) -> Position:
    """The position of the ``emitted``-th delta of the ``index``-th input of the record at ``offset``."""
    if index >= MAX_ITEMS or emitted >= MAX_EMITTED:
        raise ValueError(f"pack item {index} emitted {emitted} deltas: over the limits {MAX_ITEMS}/{MAX_EMITTED}")
    return Position(topic, partition, (((offset << ITEM_BITS) | index) << EMIT_BITS) | emitted)


def partition_of(key: str, partitions: int) -> int:
    return partition_for(key.encode(), partitions)


def split(items: list[Item], size: int) -> list[list[Item]]:
    size = min(size, MAX_ITEMS)
    return [items[start : start + size] for start in range(0, len(items), size)]
