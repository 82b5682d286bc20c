"""The projection topology: which stages there are and how one log event flows through them.

Called by the in-process runner (embedded mode); the faust host wires the same stages as agents with
repartition topics between them. Pure: entities live in a store the host provides.

``process`` folds one event into the stages that own it, then the deltas they emit into their target
entities, breadth first, in emission order; outputs (events to publish) are collected in that order.
A host that works in batches calls ``fold`` for each event and ``flush`` once at the end of the batch
instead: the same entities, and one output per changed entity (its latest version) rather than one per
input (see ``projections.stages.core.Stage``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from events.wire.envelope import Envelope
from projections.stages.clusters import ClusterStage
from projections.stages.core import Input, KeyedBy, Output, Position, Routed, Stage
from projections.stages.documents import DocumentStage
from projections.stages.fleet import FleetStage
from projections.stages.jobs import JobStage
from projections.stages.nodes import NodeStage
from projections.stages.quota import QuotaStage
from projections.stages.shapes import ShapeStage
from projections.stages.usage import UsageStage

Key = tuple[str, str]
_new = tuple.__new__  # a delta's ``Input`` made directly (half the cost of calling the named tuple's class)


class EntityStore(Protocol):
    def get(self, stage: str, key: str) -> Any: ...

    def put(self, stage: str, key: str, entity: Any) -> None: ...


@dataclass
class MemoryStore:
    """Entities in dictionaries, one per stage (the in-process runner's store)."""

    tables: dict[str, dict[str, Any]] = field(default_factory=dict)

    def get(self, stage: str, key: str) -> Any:
        table = self.tables.get(stage)
        return None if table is None else table.get(key)

    def put(self, stage: str, key: str, entity: Any) -> None:
        table = self.tables.setdefault(stage, {})
        if entity is None:
            table.pop(key, None)
        else:
            table[key] = entity


@dataclass
class Processed:
    outputs: list[Output] = field(default_factory=list)
    changed: set[Key] = field(default_factory=set)
    before: dict[Key, Any] = field(default_factory=dict)
    """For ``fold``: each entity the batch changed, as it stood before (None: absent), in order."""


def default_stages() -> tuple[Stage[Any], ...]:
    return (
        JobStage(),
        NodeStage(),
        ClusterStage(),
        QuotaStage(),
        ShapeStage(),
        FleetStage(),
        UsageStage(),
        DocumentStage(),
    )


class Topology:
    def __init__(self, stages: Iterable[Stage[Any]] | None = None) -> None:
        self.stages: Mapping[str, Stage[Any]] = {stage.name: stage for stage in (stages or default_stages())}
        self._keyed_by = KeyedBy(list(self.stages.values()))

    def process(self, store: EntityStore, envelope: Envelope, position: Position, into: Processed) -> None:
        queue: deque[tuple[str, Input]] = deque()
        for stage in self._keyed_by(type(envelope.data)):
            for key in stage.keys(envelope):
                queue.append((stage.name, Input(key, envelope.time_ms, position, envelope.data, envelope.id)))
        while queue:
            name, item = queue.popleft()
            stage = self.stages[name]
            before = store.get(name, item.key)
            after, emitted = stage.reduce(before, item)
            if after is not before:
                store.put(name, item.key, after)
                into.changed.add((name, item.key))
            for out in emitted:
                if isinstance(out, Routed):
                    time_ms = item.time_ms if out.time_ms is None else out.time_ms
                    queue.append((out.stage, _new(Input, (out.key, time_ms, None, out.delta, item.envelope_id))))
                elif isinstance(out, Output):
                    into.outputs.append(out)

    def fold(self, store: EntityStore, envelope: Envelope, position: Position, into: Processed) -> None:
        """``process`` without building outputs; ``flush`` builds them for the whole batch."""
        queue: list[tuple[str, Input]] = [
            (stage.name, Input(key, envelope.time_ms, position, envelope.data, envelope.id))
            for stage in self._keyed_by(type(envelope.data))
            for key in stage.keys(envelope)
        ]
        stages, before_batch, changed = self.stages, into.before, into.changed
        # The in-process store's tables are read and written here directly (two calls fewer per input).
        tables = store.tables if type(store) is MemoryStore else None
        get, put = store.get, store.put
        for name, item in queue:  # grows while it is read: breadth first
            stage = stages[name]
            key = item.key
            if tables is None:
                before = get(name, key)
            else:
                table = tables.get(name)
                before = None if table is None else table.get(key)
            after, emitted = stage.fold(before, item)
            if after is not before:
                entity = (name, key)
                if entity not in before_batch:
                    before_batch[entity] = before
                    changed.add(entity)  # (an entity in ``before`` is in ``changed`` already)
                if after is None:
                    # Gone: publish what it reached first, as ``process`` would have; a new one starts afresh.
                    into.outputs += stage.publish(before_batch[entity], before)
                    before_batch[entity] = None
                if tables is None or after is None:
                    put(name, key, after)
                else:
                    tables.setdefault(name, {})[key] = after
            for out in emitted:
                if isinstance(out, Routed):
                    time_ms = item.time_ms if out.time_ms is None else out.time_ms
                    queue.append((out.stage, _new(Input, (out.key, time_ms, None, out.delta, item.envelope_id))))
                else:
                    into.outputs.append(out)

    def flush(self, store: EntityStore, into: Processed, *, publish: bool = True) -> None:
        """The outputs of every entity the batch changed, in the order they first changed (none are
        built if they would not be published)."""
        if publish:
            for (name, key), before in into.before.items():
                into.outputs += self.stages[name].publish(before, store.get(name, key))
        into.before.clear()
