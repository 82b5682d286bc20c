"""What travels on the faust host's internal topics: batches of stage inputs, and where they go.

Called by ``projections.faust.router`` and ``projections.faust.fold``. Pure apart from ``pickle``.

An internal record carries a *pack*: the inputs for one stage's partition that one upstream batch
produced, in order. One record per (stage, partition) per batch instead of one per entity keeps
the per-record cost of Kafka and faust off the hot path; the partition is still the entity key's
(Kafka's murmur2, as ``events.catalog.topics.partition_for``), so every entity lives on exactly one
partition and its inputs arrive in the order they were sent.

Serialisation is pickle (protocol 5) of plain tuples, the event or delta dataclass inside. It is
read only by this code from topics only this code writes (the app's own ``<app id>.stage.*``
topics); nothing from outside is ever unpickled. Public events keep the CloudEvents binding.

Positions make every input idempotent at its target (see ``projections.stages.core.Applied``):
- an event read from the log keeps its source position and envelope id, so a record the router
  forwards twice (after a crash) or an event appended twice is recognised by the first stage;
- a delta gets a position derived from where its parent input was read: the internal topic and
  partition, and ``offset``, item index and emission index packed into one increasing integer. A
  redelivered parent record, or a parent folded again after a crash (reducers are pure, so it
  emits the same deltas in the same order), yields the same positions, which the target skips.
"""

from __future__ import annotations

import pickle
from functools import lru_cache

from events.catalog.topics import partition_for
from projections.stages.core import Input, Position
from projections.stages.pickled import dumps

ITEM_BITS = 16
EMIT_BITS = 12
MAX_ITEMS = 1 << ITEM_BITS
"""Inputs per pack (the router and stages split larger groups)."""
MAX_EMITTED = 1 << EMIT_BITS
"""Deltas one input may emit (a job with more replicas than this on one placement is refused)."""


Item = Input
"""A stage input as it travels: the core's ``Input`` (key, time, position, event or delta, envelope id)."""


def pack(items: list[Input]) -> bytes:
    rows = [(i.key, i.time_ms, *_position(i.position), i.item, i.envelope_id) for i in items]
    return dumps(rows)


def _position(position: Position | None) -> tuple[str, int, int]:
    if position is None:  # every input on an internal topic has one (see the module docstring)
        raise ValueError("an input without a position cannot travel between stages")
    return position.topic, position.partition, position.offset


def unpack(value: bytes) -> list[Input]:
    # Our own records on our own internal topics (see the module docstring).
    rows = pickle.loads(value)
    new = tuple.__new__  # the named tuples made directly: half the cost of calling their classes
    return [
        new(Input, (key, time_ms, new(Position, (topic, part, offset)), item, env))
        for key, time_ms, topic, part, offset, item, env in rows
    ]


def delta_position(topic: str, partition: int, offset: int, index: int, emitted: int) -> Position:
    """The position of the ``emitted``-th delta of the ``index``-th input of the record at ``offset``."""
    if index >= MAX_ITEMS or emitted >= MAX_EMITTED:
        raise ValueError(f"pack item {index} emitted {emitted} deltas: over the limits {MAX_ITEMS}/{MAX_EMITTED}")
    return tuple.__new__(Position, (topic, partition, (((offset << ITEM_BITS) | index) << EMIT_BITS) | emitted))


@lru_cache(maxsize=1 << 16)
def partition_of(key: str, partitions: int) -> int:
    """The key's partition (cached: murmur2 in Python, asked for every delta and entity read)."""
    return partition_for(key.encode(), partitions)


def split(items: list[Input], size: int) -> list[list[Input]]:
    size = min(size, MAX_ITEMS)
    return [items[start : start + size] for start in range(0, len(items), size)]
