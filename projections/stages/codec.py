"""The stage codec: how the projection hosts store entities and send stage inputs, in a typed, versioned
format that can only build the stages' own types. No pickle: the bytes may come from anyone who can
write a changelog topic, a stage topic or the ``projection_state`` table.

Called by the read-model writer (entity states in ``projection_state``), the faust host (its tables'
changelogs, and the packs of inputs on its stage topics: ``projections.faust.wire``) and the tests.
Pure: no I/O. Calls ``projections.stages.codec_types`` (layouts compiled from the registered classes'
annotations) and, for the public events inside a pack, pydantic validation of the catalogue's own JSON
(``events.wire.codec`` for an older schema version).

A record is a 16-byte header and a body:

    b"fS" | format version (1 byte) | kind (b"E" entity, b"P" pack) | layout (8 bytes) | CRC-32 (4 bytes)

- the format version says how the rest is laid out; a reader refuses one it does not know;
- the kind keeps a pack from being read as an entity and the other way round;
- the layout is the registry's fingerprint (``LAYOUT``: every registered class's tag, field names and
  field types), so a record written while a class had other fields is refused as such
  (``LayoutMismatch``), never read into the wrong fields; the hosts also keep it beside their state
  (the read models' format marker, the faust group's name) and replay the log when it changes;
- the CRC-32 covers the whole record but itself: a flipped bit or a cut record is named as such.

An entity's body is the JSON of the entity (``codec_types``: records as ``{"<tag>": [fields]}``).
A pack's body is a 4-byte length, the JSON of ``[topics, events, columns]``, then the JSON bodies of
its public events, one after the other. ``columns`` are the inputs' keys, times, topics (indexes into
``topics``), partitions, offsets, items and envelope ids, one array each (columns, so that each is
checked at once rather than input by input); an item is a delta record, or the index of an event in
``events`` (``[type, schema version, length]``). An event routed to several keys of one pack is
written once.
Public events are never written as our records: they are read back by validating their JSON against
their catalogue class (an older version through the catalogue's upcasters), as when they were read
from the log.

Every failure to read is a ``StateCodecError`` (``projections.stages.codec_errors``) naming the field
and the reason; nothing else escapes ``loads`` or ``decode_inputs``, whatever the bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from events.catalog.base import REGISTRY, Event
from events.catalog.errors import EventError
from events.catalog.types import Health
from events.wire.codec import decode_event, invalid_event
from events.wire.envelope import Latest
from projections.stages import clusters, core, deltas, fleet, jobs, nodes, quota, shapes, usage
from projections.stages.codec_errors import LayoutMismatch, StateCodecError, UnknownFormat, UnknownTypeTag
from projections.stages.codec_types import Registry

FORMAT_VERSION = 1
"""The layout of a record around its JSON (header, pack body). Raise it with a reader for both."""

TYPES = Registry(
    {
        # Tags are written into every record: never change one; a class may move or be renamed freely.
        "Applied": core.Applied,
        # Deltas (the items of stage inputs between stages).
        "NodeAllocation": deltas.NodeAllocation,
        "QueueAllocation": deltas.QueueAllocation,
        "PendingDemand": deltas.PendingDemand,
        "NodeCapacity": deltas.NodeCapacity,
        "UsageInterval": deltas.UsageInterval,
        "UsageSample": deltas.UsageSample,
        "ShapeSeen": deltas.ShapeSeen,
        "PricedUsage": clusters.PricedUsage,
        # Entities and their parts.
        "JobView": jobs.JobView,
        "TimelineEntry": jobs.TimelineEntry,
        "ReplicaSlot": jobs.ReplicaSlot,
        "Submission": jobs.Submission,
        "Placement": jobs.Placement,
        "Fact": jobs.Fact,
        "HeldRun": jobs.HeldRun,
        "NodeProfile": nodes.NodeProfile,
        "Gpu": nodes.Gpu,
        "Allocation": nodes.Allocation,
        "ClusterView": clusters.ClusterView,
        "QueueQuota": quota.QueueQuota,
        "Holding": quota.Holding,
        "QuotaLineState": quota.QuotaLineState,
        "Used": quota.Used,
        "UsageBucket": usage.UsageBucket,
        "FleetState": fleet.FleetState,
        "ShapeCount": shapes.ShapeCount,
        "Latest": Latest,
        "Health": Health,
    }
)
"""The closed set of types the codec builds (besides the JSON types and the persistent collections)."""

LAYOUT = TYPES.layout_id
"""The registry's fingerprint (16 hex digits): changes whenever a registered class's fields do."""

ENTITY_TYPES: Mapping[str, type] = {
    jobs.STAGE: jobs.JobView,
    nodes.STAGE: nodes.NodeProfile,
    clusters.STAGE: clusters.ClusterView,
    quota.STAGE: quota.QueueQuota,
    shapes.STAGE: shapes.ShapeCount,
    fleet.STAGE: fleet.FleetState,
    usage.STAGE: usage.UsageBucket,
}
"""Each stage's entity class: what a stored entity of that stage must be."""

DELTA_TYPES = frozenset(cls for cls in (layout.cls for layout in TYPES.layouts.values()) if issubclass(cls, core.Delta))

_MAGIC = b"fS"
_ENTITY, _PACK = b"E", b"P"
_HEADER = struct.Struct(">2sBc8sI")
HEADER_SIZE = _HEADER.size
_LAYOUT_BYTES = bytes.fromhex(LAYOUT)
_LENGTH = struct.Struct(">I")

_to_json, _from_json = TYPES.to_json, TYPES.from_json

E = TypeVar("E")


# -- entities ------------------------------------------------------------------------------------------


def dumps(entity: object) -> bytes:
    """One registered record (an entity) as a record of this codec. ``TypeError`` for any other value."""
    if type(entity) not in TYPES.classes:
        raise TypeError(f"{type(entity).__qualname__} is not a type the stage codec writes (not registered)")
    return _frame(_ENTITY, _to_json(entity).encode("ascii"))


def loads(data: bytes, expected: type[E]) -> E:
    """The entity of type ``expected`` that ``data`` holds; ``StateCodecError`` if it holds anything else
    (or nothing readable)."""
    value = _json(_body(data, _ENTITY), "body")
    if type(value) is not expected:
        found = TYPES.tag_of(type(value)) if type(value) in TYPES.classes else type(value).__name__
        raise StateCodecError("body", f"expected {TYPES.tag_of(expected)}, got {found}")
    return value


# -- packs of stage inputs -------------------------------------------------------------------------------


def encode_inputs(items: Sequence[core.Input]) -> bytes:
    """Stage inputs as one pack. Each must have a position (``ValueError`` otherwise)."""
    topics: dict[str, int] = {}
    events: dict[int, int] = {}  # id of an event object -> its index (objects alive for the call)
    described: list[tuple[str, int, int]] = []
    bodies: list[bytes] = []
    where: list[int] = []
    things: list[Any] = []
    for item in items:
        position = item.position
        if position is None:
            raise ValueError("an input without a position cannot travel between stages")
        topic = topics.get(position.topic)
        if topic is None:
            topic = topics[position.topic] = len(topics)
        where.append(topic)
        thing: Any = item.item
        if isinstance(thing, Event):
            index = events.get(id(thing))
            if index is None:
                index = events[id(thing)] = len(bodies)
                body = thing.model_dump_json().encode()
                bodies.append(body)
                described.append((thing.event_type, thing.schema_version, len(body)))
            thing = index
        things.append(thing)
    columns = (
        [i.key for i in items],
        [i.time_ms for i in items],
        where,
        [i.position.partition for i in items],  # type: ignore[union-attr]
        [i.position.offset for i in items],  # type: ignore[union-attr]
        things,
        [i.envelope_id for i in items],
    )
    text = _to_json((list(topics), described, columns)).encode("ascii")
    return _frame(_PACK, b"".join((_LENGTH.pack(len(text)), text, *bodies)))


_COLUMNS = ("key", "time_ms", "topic", "partition", "offset", "item", "envelope_id")
_COLUMN_TYPES = (str, int, int, int, int, None, str)


def decode_inputs(data: bytes) -> list[core.Input]:
    """The stage inputs a pack holds, in order; ``StateCodecError`` naming what is wrong otherwise."""
    body = _body(data, _PACK)
    if len(body) < _LENGTH.size:
        raise StateCodecError("body", "truncated before the length of its rows")
    (length,) = _LENGTH.unpack_from(body)
    end = _LENGTH.size + length
    if end > len(body):
        raise StateCodecError("body", f"rows of {length} bytes announced, {len(body) - _LENGTH.size} present")
    value = _json(body[_LENGTH.size : end], "rows")
    if type(value) is not list or len(value) != 3:
        raise StateCodecError("body", "expected [topics, events, columns]")
    topics, described, columns = value
    if type(topics) is not list or not _STR.issuperset(map(type, topics)):
        raise StateCodecError("topics", "expected an array of topic names")
    events = _events(described, body, end)
    if type(columns) is not list or len(columns) != len(_COLUMNS) or not _LIST.issuperset(map(type, columns)):
        raise StateCodecError("columns", f"expected {len(_COLUMNS)} arrays ({', '.join(_COLUMNS)})")
    count = len(columns[0])
    for name, kind, column in zip(_COLUMNS, _COLUMN_TYPES, columns, strict=True):
        if len(column) != count:
            raise StateCodecError(name, f"{len(column)} values, where the pack has {count} inputs")
        if kind is not None and not _EXACT[kind].issuperset(map(type, column)):
            bad = next(v for v in column if type(v) is not kind)
            raise StateCodecError(name, f"expected {kind.__name__} values, got {type(bad).__name__}")
    keys, times, where, partitions, offsets, things, ids = columns
    if where and not (min(where) >= 0 and max(where) < len(topics)):
        raise StateCodecError("topic", f"an index out of the pack's {len(topics)} topics")
    if not _DELTAS_OR_INT.issuperset(map(type, things)):
        bad = next(v for v in things if type(v) not in _DELTAS_OR_INT)
        found = TYPES.tag_of(type(bad)) if type(bad) in TYPES.classes else type(bad).__name__
        raise StateCodecError("item", f"expected a delta or an event, got {found}")
    if events or _INT_ONLY.intersection(map(type, things)):
        things = [_event(events, t) if type(t) is int else t for t in things]
    new, Input, Position = tuple.__new__, core.Input, core.Position
    positions = [new(Position, p) for p in zip([topics[t] for t in where], partitions, offsets, strict=True)]
    return [new(Input, row) for row in zip(keys, times, positions, things, ids, strict=True)]


_STR = frozenset({str})
_LIST = frozenset({list})
_INT_ONLY = frozenset({int})
_EXACT = {str: _STR, int: _INT_ONLY}
_DELTAS_OR_INT = DELTA_TYPES | _INT_ONLY


def _event(events: list[Event], index: int) -> Event:
    if not 0 <= index < len(events):
        raise StateCodecError("item", f"event {index} is not one of the pack's {len(events)}")
    return events[index]


_EVENT_CLASSES: dict[str, type[Event]] = {}
"""Catalogue classes by type string, for the types met so far (only known types: bounded)."""


def _events(described: Any, body: bytes, start: int) -> list[Event]:
    if type(described) is not list:
        raise StateCodecError("events", "expected an array of [type, version, length]")
    events: list[Event] = []
    at = start
    for index, entry in enumerate(described):
        if not (
            type(entry) is list
            and len(entry) == 3
            and type(entry[0]) is str
            and type(entry[1]) is int
            and type(entry[2]) is int
            and entry[2] >= 0
        ):
            raise StateCodecError(f"events[{index}]", "expected [type, schema version, length]")
        event_type, version, length = entry
        if at + length > len(body):
            raise StateCodecError(f"events[{index}]", f"{length} bytes announced, {len(body) - at} left")
        value = body[at : at + length]
        at += length
        try:
            cls = _EVENT_CLASSES.get(event_type)
            if cls is None:
                cls = _EVENT_CLASSES[event_type] = REGISTRY.get(event_type)
            if version == cls.schema_version:
                try:
                    events.append(cls.model_validate_json(value))
                except ValidationError as error:
                    raise invalid_event(event_type, error) from None
            else:  # written by another version of the catalogue: brought forward, or refused
                events.append(decode_event(event_type, version, value))
        except EventError as error:
            raise StateCodecError(f"events[{index}]", str(error)) from None
    if at != len(body):
        raise StateCodecError("events", f"{len(body) - at} bytes after the last event")
    return events


# -- framing ---------------------------------------------------------------------------------------------


_CRC = struct.Struct(">I")
_CRC_AT = HEADER_SIZE - _CRC.size


def _frame(kind: bytes, body: bytes) -> bytes:
    head = _MAGIC + bytes((FORMAT_VERSION,)) + kind + _LAYOUT_BYTES
    return head + _CRC.pack(zlib.crc32(body, zlib.crc32(head))) + body


def _body(data: bytes, kind: bytes) -> bytes:
    """The body of a record of ``kind``, its header checked."""
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise UnknownFormat("record", f"expected bytes, got {type(data).__name__}")
        data = bytes(data)  # from a driver that hands out buffers
    if len(data) < HEADER_SIZE:
        raise UnknownFormat("header", f"{len(data)} bytes: shorter than a header ({HEADER_SIZE} bytes)")
    magic, version, found, layout, crc = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        if data[:1] == b"\x80":
            raise UnknownFormat("header", "a pickle: refused (this reader never unpickles)")
        raise UnknownFormat("header", f"not a stage record (it starts with {data[:4]!r})")
    if version != FORMAT_VERSION:
        raise UnknownFormat("header.version", f"format version {version}: this reader reads {FORMAT_VERSION} only")
    body = data[HEADER_SIZE:]
    if zlib.crc32(body, zlib.crc32(data[:_CRC_AT])) != crc:
        raise StateCodecError("header.checksum", "the record does not match its checksum: altered or cut short")
    if found != kind:
        names = {_ENTITY: "an entity", _PACK: "a pack of inputs"}
        raise UnknownFormat("header.kind", f"{names.get(found, repr(found))} where {names[kind]} was expected")
    if layout != _LAYOUT_BYTES:
        raise LayoutMismatch(
            "header.layout",
            f"written with the stages' layout {layout.hex()}, this reader's is {LAYOUT}: a class's fields changed"
            " since (the hosts replay the log into a new layout)",
        )
    return body


def _json(text: bytes, where: str) -> Any:
    try:
        decoded = text.decode("ascii")
    except UnicodeDecodeError as error:
        raise StateCodecError(where, f"not ASCII JSON (byte {error.start})") from None
    return _from_json(decoded, where)


__all__ = [
    "DELTA_TYPES",
    "ENTITY_TYPES",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "LAYOUT",
    "TYPES",
    "LayoutMismatch",
    "StateCodecError",
    "UnknownFormat",
    "UnknownTypeTag",
    "decode_inputs",
    "dumps",
    "encode_inputs",
    "loads",
]
