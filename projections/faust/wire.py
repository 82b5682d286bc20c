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

import io
import pickle
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from functools import lru_cache
from operator import attrgetter
from typing import Any

from events.catalog.topics import partition_for
from projections.stages.core import Input, Position

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


def dumps(value: object) -> bytes:
    """``pickle.dumps`` (protocol 5), with slotted dataclasses (our deltas, entities and their parts)
    pickled as a call of their constructor with their field values: the standard
    ``__getstate__``/``__setstate__`` of such a dataclass looks its fields up on every call, which
    made pickling the largest cost of a pack. ``pickle.loads`` reads either."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=5).dump(value)
    return buffer.getvalue()


_GETTERS: dict[type, Callable[[Any], tuple[object, ...]] | None] = {}


def _getter(cls: type) -> Callable[[Any], tuple[object, ...]] | None:
    """How to read the constructor's arguments of a slotted dataclass whose generated ``__init__`` sets
    every field and nothing else (None: another type, pickled as usual)."""
    getstate = getattr(cls, "__getstate__", None)
    init = getattr(cls, "__init__", None)
    if not (
        is_dataclass(cls)
        and getattr(getstate, "__qualname__", "") in ("_dataclass_getstate", "_record_getstate")
        and getattr(getattr(init, "__code__", None), "co_filename", "") == "<string>"  # generated
        and not hasattr(cls, "__post_init__")
    ):
        return None
    every = fields(cls)
    code = init.__code__  # type: ignore[union-attr]
    if not all(f.init for f in every) or code.co_kwonlyargcount or code.co_argcount != len(every) + 1:
        return None  # keyword-only fields, or init-only variables: not a call by position
    names = [f.name for f in every]
    if not names:
        return lambda obj: ()
    read = attrgetter(*names)
    return (lambda obj: (read(obj),)) if len(names) == 1 else read


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        try:
            getter = _GETTERS[cls]
        except KeyError:
            getter = _GETTERS[cls] = _getter(cls)
        if getter is None:
            return NotImplemented
        return cls, getter(obj)


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
