"""What every projection stage is made of: inputs, derived deltas, outputs, and the stage contract.

Called by the stage modules (``projections.stages.jobs``, ``nodes``, ``quota``, ``usage``, ``fleet``,
``shapes``) and by their hosts (``projections.inprocess.runner`` in-process, ``projections.faust.app``
distributed). Pure: no I/O, clock or randomness.

A projection is a small topology of stages. Each stage owns entities under string keys (a job id, a
``cluster/node``, a ``tenant/queue``) and folds inputs into them with a pure reducer:

    reduce(entity or None, input) -> (entity or None, [emitted])

An input is an event read from the log, or a *delta* another stage derived (a job's placement becomes
allocation deltas for its nodes and its queue). Emitted items are deltas for other stages (routed by
key, so a distributed host can send them through a repartition topic) and output events to publish.

Exactly-once effect from at-least-once delivery, with memory that does not grow with the log:
- the same record delivered again (same topic, partition, offset): every input carries the log position
  it came from, and an entity remembers the last position it applied per source partition (``Applied``);
- the same event appended again at a later offset, after any number of other records: each reducer
  recognises it by what it already holds, per event type: a report older than or equal to the one in
  force (a node's generation; the time and id of the latest health, usage, registration, status or quota
  report: ``events.wire.envelope.Latest``), or a step of the job's lifecycle the job has taken already
  (``projections.stages.jobs``). The table of every event type is in ``events.log.reading``.
Deltas carry the position of the event they were derived from, and are stated per job and run (or per
node): a duplicated event emits none, since the stage it reaches first changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, dataclass_transform

from events.catalog.base import Event
from events.wire.envelope import Envelope

R = TypeVar("R")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[R]) -> type[R]:
    """A frozen slotted dataclass, as the type checker sees it (no field can be assigned); at run time
    its instances are not guarded against assignment. The stages make entity versions, deltas and
    their parts in every hot loop, and a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``: ten times the cost of a plain slotted one (5 us against 0.5 for a job view).
    Equal and hashed by value as a frozen one is, and pickled as one was (a list of field values), so
    entities stored before still load."""
    made = dataclass(slots=True, unsafe_hash=True)(cls)
    setattr(made, "__getstate__", _record_getstate)  # noqa: B010 (replacing a method)
    setattr(made, "__setstate__", _record_setstate)  # noqa: B010
    return made


def _record_getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in fields(self)]


def _record_setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(fields(self), state, strict=True):
        object.__setattr__(self, f.name, value)


class Position(NamedTuple):
    """Where an input was read (ordered as a tuple: topic, partition, offset)."""

    topic: str
    partition: int
    offset: int


class Delta:
    """Base of the facts one stage derives for another (never published on public topics)."""

    __slots__ = ()


class Input(NamedTuple):
    """One thing a stage folds into one entity. ``position`` is the log position of an event read from
    the log, and None for a delta: deltas are idempotent by construction (stated per job and run, or
    per node), and a duplicated event is already stopped at the first stage it reaches. (Inputs,
    ``Routed`` and ``Output`` are named tuples: several are made per event, and a tuple is the
    cheapest immutable record to make.) ``envelope_id`` is the id of the event it came from (for a
    delta, of the event that emitted it): the stages that keep an entity's latest report tell a
    repeated report by it."""

    key: str
    time_ms: int
    position: Position | None
    item: Event | Delta
    envelope_id: str = ""


class Routed(NamedTuple):
    """A delta for another stage's entity. Its input takes the time of the input that emitted it, or
    ``time_ms`` when given: when what it states happened (the job stage emits deltas of facts that
    waited for a cause under the input that completed them)."""

    stage: str
    key: str
    delta: Delta
    time_ms: int | None = None


class Output(NamedTuple):
    """An event to publish, with an id derived from its inputs (so a duplicate is recognisable)."""

    event: Event
    id: str


Emitted = Routed | Output

E = TypeVar("E")


class Stage(Protocol, Generic[E]):
    """``reduce`` folds one input and emits everything it causes, outputs included. A host that folds
    a batch at a time calls ``fold`` instead (the same reduction, without building outputs) and then,
    once per entity the batch changed, ``publish`` with the entity as it stood before the batch: the
    outputs are then those of the entity's latest version only (versions are counted per input all
    the same, so they and the entity do not depend on how inputs were batched)."""

    name: str

    def keys(self, envelope: Envelope) -> Sequence[str]:
        """The keys of this stage's entities that a log event touches (none: not for this stage)."""
        ...

    def reduce(self, entity: E | None, item: Input) -> tuple[E | None, list[Emitted]]: ...

    def fold(self, entity: E | None, item: Input) -> tuple[E | None, list[Emitted]]: ...

    def publish(self, before: E | None, after: E | None) -> list[Output]:
        """The outputs of the versions ``after`` reached since ``before`` (the latest of each)."""
        ...


class KeyedBy:
    """The stages that may own keys of a log event, by event type: a stage may name the types its ``keys``
    answers (an ``event_types`` attribute: a tuple of classes); a stage without one is always asked.
    Most events concern two stages of seven, and asking each costs a call per stage and event."""

    def __init__(self, stages: Sequence[Stage[Any]]) -> None:
        self._stages = tuple(stages)
        self._by_type: dict[type, tuple[Stage[Any], ...]] = {}

    def __call__(self, event_type: type) -> tuple[Stage[Any], ...]:
        found = self._by_type.get(event_type)
        if found is None:
            found = self._by_type[event_type] = tuple(
                stage
                for stage in self._stages
                if getattr(stage, "event_types", None) is None or issubclass(event_type, stage.event_types)  # type: ignore[attr-defined]
            )
        return found


@record
class Applied:
    """The last offset an entity applied per source partition: a record delivered again at its position
    changes nothing. (An event appended again at a later offset is recognised by each stage's reducer:
    see the module's docstring.) Deltas are not tracked: see ``Input``."""

    offsets: tuple[tuple[str, int, int], ...] = ()

    def seen(self, item: Input) -> bool:
        position = item.position
        if position is None:
            return False
        topic, partition = position.topic, position.partition
        for entry in self.offsets:
            if entry[1] == partition and entry[0] == topic:
                return position.offset <= entry[2]
        return False

    def after(self, item: Input) -> Applied:
        position = item.position
        if position is None:
            return self
        entry = (position.topic, position.partition, position.offset)
        offsets = self.offsets
        for index, (topic, partition, _) in enumerate(offsets):
            if partition == entry[1] and topic == entry[0]:
                # One entry per partition, sorted: replacing it in place keeps the order.
                offsets = (*offsets[:index], entry, *offsets[index + 1 :])
                break
        else:
            offsets = tuple(sorted((*offsets, entry)))
        return Applied(offsets)


class Batch(Generic[E]):
    """One stage's inputs folded a batch at a time, for a host that keeps the entities itself (the faust
    stage agents): ``fold`` each input in order (deltas are emitted as they are folded), then ``publish``
    once with the entities as the batch left them. Outputs come with the time of the last input that
    changed their entity."""

    def __init__(self, stage: Stage[E]) -> None:
        self.stage = stage
        self.before: dict[str, E | None] = {}
        self.times: dict[str, int] = {}
        self.gone: list[tuple[Output, int]] = []

    def fold(self, entity: E | None, item: Input) -> tuple[E | None, list[Emitted]]:
        after, emitted = self.stage.fold(entity, item)
        if after is not entity:
            key = item.key
            if key not in self.before:
                self.before[key] = entity
            self.times[key] = item.time_ms
            if after is None:  # gone: publish what it reached first; a new one starts afresh
                self.gone += [(out, item.time_ms) for out in self.stage.publish(self.before[key], entity)]
                self.before[key] = None
        return after, emitted

    def publish(self, entities: Callable[[str], E | None]) -> list[tuple[Output, int]]:
        """The outputs of every entity the batch changed; ``entities`` gives each one's latest state."""
        outputs = self.gone
        for key, before in self.before.items():
            outputs += [(out, self.times[key]) for out in self.stage.publish(before, entities(key))]
        self.before, self.times, self.gone = {}, {}, []
        return outputs


class Silent(Generic[E]):
    """Folding and publishing for a stage that emits no outputs: its ``reduce`` already folds."""

    def reduce(self, entity: E | None, item: Input) -> tuple[E | None, list[Emitted]]:
        raise NotImplementedError

    def fold(self, entity: E | None, item: Input) -> tuple[E | None, list[Emitted]]:
        return self.reduce(entity, item)

    def publish(self, before: E | None, after: E | None) -> list[Output]:
        return []


T = TypeVar("T")
_LAYOUTS: dict[type, tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]]] = {}


def evolve(entity: T, **changes: Any) -> T:
    """``dataclasses.replace`` for the stages' entities, several times cheaper (it is in every hot loop):
    the fields are read at once by an ``attrgetter`` and passed to the constructor by position."""
    cls = type(entity)
    layout = _LAYOUTS.get(cls)
    if layout is None:
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        layout = _LAYOUTS[cls] = (attrgetter(*names), {name: index for index, name in enumerate(names)})
    read, index = layout
    values = list(read(entity))
    for name, value in changes.items():
        values[index[name]] = value
    return cls(*values)


def split_key(key: str) -> tuple[str, str]:
    left, _, right = key.partition("/")
    return left, right
