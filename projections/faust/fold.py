"""One stage folding one batch of its internal records: the part of a faust stage agent that is not I/O.

Called by ``projections.faust.app`` (the stage agents). Pure: entities come from a getter (the
agent's faust table), results go back to the caller, which sends, writes and acknowledges them in
the order that keeps the effect exactly once (see ``projections.faust.app``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from projections.faust.wire import Item, delta_position, partition_of
from projections.stages.core import Batch, Output, Routed, Stage

_ABSENT = object()


@dataclass
class Folded:
    entities: dict[str, Any] = field(default_factory=dict)
    """The new state of every entity that changed (None: removed)."""
    owner: dict[str, int] = field(default_factory=dict)
    """For each changed entity, the index of the last record that changed it (its table partition)."""
    packs: dict[tuple[str, int], list[Item]] = field(default_factory=dict)
    """Deltas for other stages, by (stage, partition), in emission order."""
    outputs: list[tuple[Output, int]] = field(default_factory=list)
    """Events to publish, each with the time of the last input that changed its entity: the latest
    version of every entity the batch changed (``projections.stages.core.Batch``)."""
    inputs: int = 0


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    items: list[Item]


def fold(stage: Stage[Any], records: list[Record], get: Callable[[str], Any], partitions: Mapping[str, int]) -> Folded:
    """Fold ``records`` in order. Deltas get their positions from the emission index among the deltas
    an input emits (outputs are not counted), so a batch folded again derives the same positions."""
    out = Folded()
    entities, owner = out.entities, out.owner
    batch = Batch(stage)
    fold_one = batch.fold
    new = tuple.__new__  # an ``Item`` made directly (half the cost of calling the named tuple's class)
    for index, record in enumerate(records):
        for position, item in enumerate(record.items):
            key = item.key
            before = entities.get(key, _ABSENT)
            if before is _ABSENT:
                before = get(key)
            after, emitted = fold_one(before, item)
            out.inputs += 1
            if after is not before:
                entities[key] = after
                owner[key] = index
            n = 0
            for thing in emitted:
                if isinstance(thing, Routed):
                    where = delta_position(record.topic, record.partition, record.offset, position, n)
                    n += 1
                    target = (thing.stage, partition_of(thing.key, partitions[thing.stage]))
                    time_ms = item.time_ms if thing.time_ms is None else thing.time_ms
                    delta = new(Item, (thing.key, time_ms, where, thing.delta, ""))
                    out.packs.setdefault(target, []).append(delta)
                elif isinstance(thing, Output):
                    out.outputs.append((thing, item.time_ms))
    out.outputs += batch.publish(entities.__getitem__)
    return out
