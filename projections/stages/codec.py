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
A pack's body is a 4-byte length, the JSON of ``[topics, events, deltas, columns]``, then the JSON
bodies of its public events, one after the other. ``columns`` are the inputs' keys, times, topics
(indexes into ``topics``), partitions, offsets, items and envelope ids, one array each; ``events`` are
three arrays: the events' types, schema versions and lengths; ``deltas`` holds each delta type's
records as ``[tag, count, one array per field]``. An item is ``-1 - i`` for the ``i``-th event, or the
index of a delta type in ``deltas`` for its next record. Columns, so that each is checked at once rather
than input by input, and a pack's thousands of deltas are a few dozen JSON arrays; an event routed to
several keys of one pack is written once.
Public events are never written as our records: they are read back by validating their JSON against
their catalogue class (an older version through the catalogue's upcasters), as when they were read
from the log.

Every failure to read is a ``StateCodecError`` (``projections.stages.codec_errors``) naming the field
and the reason; nothing else escapes ``loads`` or ``decode_inputs``, whatever the bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate
from typing import Any, TypeVar

from pydantic import ValidationError

from events.catalog.base import REGISTRY, Event
from events.catalog.errors import EventError
from events.catalog.types import Health
from events.wire.codec import decode_event, invalid_event
from events.wire.envelope import Latest
from projections.stages import clusters, core, deltas, documents, fleet, jobs, nodes, quota, shapes, usage
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
        "RunPart": jobs.RunPart,
        "Closure": jobs.Closure,
        "Wait": jobs.Wait,
        "Fact": jobs.Fact,
        "HeldRun": jobs.HeldRun,
        "NodeProfile": nodes.NodeProfile,
        "Gpu": nodes.Gpu,
        "Npu": nodes.Npu,
        "Allocation": nodes.Allocation,
        "Released": nodes.Released,
        "WaitingUsage": nodes.WaitingUsage,
        "ClusterView": clusters.ClusterView,
        "QueueQuota": quota.QueueQuota,
        "Holding": quota.Holding,
        "QuotaLineState": quota.QuotaLineState,
        "Used": quota.Used,
        "UsageBucket": usage.UsageBucket,
        "FleetState": fleet.FleetState,
        "ShapeCount": shapes.ShapeCount,
        "DocumentView": documents.DocumentView,
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
    documents.STAGE: documents.DocumentView,
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
    event_types: list[str] = []
    versions: list[int] = []
    bodies: list[bytes] = []
    groups: dict[type, tuple[int, list[Any]]] = {}
    where: list[int] = []
    things: list[int] = []
    for item in items:
        position = item.position
        if position is None:
            raise ValueError("an input without a position cannot travel between stages")
        topic = topics.get(position.topic)
        if topic is None:
            topic = topics[position.topic] = len(topics)
        where.append(topic)
        thing: Any = item.item
        group = groups.get(type(thing))
        if group is not None:
            group[1].append(thing)
            things.append(group[0])
        elif isinstance(thing, Event):
            index = events.get(id(thing))
            if index is None:
                index = events[id(thing)] = len(bodies)
                bodies.append(thing.model_dump_json().encode())
                event_types.append(thing.event_type)
                versions.append(thing.schema_version)
            things.append(-1 - index)
        else:
            groups[type(thing)] = (len(groups), [thing])
            things.append(len(groups) - 1)
    deltas = []
    for cls, (_, records) in groups.items():
        if cls not in DELTA_TYPES:
            raise TypeError(f"{cls.__qualname__} is not a delta the stage codec writes (not registered)")
        tag, columns = TYPES.to_columns(records)
        deltas.append((tag, len(records), columns))
    rows = (
        [i.key for i in items],
        [i.time_ms for i in items],
        where,
        [i.position.partition for i in items],  # type: ignore[union-attr]
        [i.position.offset for i in items],  # type: ignore[union-attr]
        things,
        [i.envelope_id for i in items],
    )
    described = (event_types, versions, [len(body) for body in bodies])
    text = _to_json((list(topics), described, deltas, rows)).encode("ascii")
    return _frame(_PACK, b"".join((_LENGTH.pack(len(text)), text, *bodies)))


_COLUMNS = ("key", "time_ms", "topic", "partition", "offset", "item", "envelope_id")
_COLUMN_TYPES = (str, int, int, int, int, int, str)
_STR = frozenset({str})
_INT = frozenset({int})
_LIST = frozenset({list})
_EXACT = {str: _STR, int: _INT}
_END = object()


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
    if type(value) is not list or len(value) != 4:
        raise StateCodecError("body", "expected [topics, events, deltas, columns]")
    topics, described, groups, columns = value
    if type(topics) is not list or not _STR.issuperset(map(type, topics)):
        raise StateCodecError("topics", "expected an array of topic names")
    events = _events(described, body, end)
    deltas = _deltas(groups)
    if type(columns) is not list or len(columns) != len(_COLUMNS) or not _LIST.issuperset(map(type, columns)):
        raise StateCodecError("columns", f"expected {len(_COLUMNS)} arrays ({', '.join(_COLUMNS)})")
    count = len(columns[0])
    for name, kind, column in zip(_COLUMNS, _COLUMN_TYPES, columns, strict=True):
        if len(column) != count:
            raise StateCodecError(name, f"{len(column)} values, where the pack has {count} inputs")
        if not _EXACT[kind].issuperset(map(type, column)):
            bad = next(v for v in column if type(v) is not kind)
            raise StateCodecError(name, f"expected {kind.__name__} values, got {type(bad).__name__}")
    keys, times, where, partitions, offsets, things, ids = columns
    if where and not (min(where) >= 0 and max(where) < len(topics)):
        raise StateCodecError("topic", f"an index out of the pack's {len(topics)} topics")
    if things and not (min(things) >= -len(events) and max(things) < len(deltas)):
        raise StateCodecError(
            "item", f"an item that is none of the pack's {len(events)} events and {len(deltas)} delta types"
        )
    iterators = [iter(records) for records in deltas]
    following = [iterator.__next__ for iterator in iterators]
    try:
        things = [events[-1 - thing] if thing < 0 else following[thing]() for thing in things]
    except StopIteration:
        raise StateCodecError("item", "more inputs of a delta type than the pack holds deltas of it") from None
    if any(next(iterator, _END) is not _END for iterator in iterators):
        raise StateCodecError("item", "deltas that no input refers to")
    new, Input, Position = tuple.__new__, core.Input, core.Position  # the named tuples, made directly
    positions = [new(Position, p) for p in zip([topics[t] for t in where], partitions, offsets, strict=True)]
    return [new(Input, row) for row in zip(keys, times, positions, things, ids, strict=True)]


def _deltas(groups: Any) -> list[list[Any]]:
    """Each ``[tag, count, columns]`` of a pack as its deltas; only delta types are built."""
    if type(groups) is not list:
        raise StateCodecError("deltas", "expected an array of [tag, count, columns]")
    out = []
    for index, group in enumerate(groups):
        if type(group) is not list or len(group) != 3:
            raise StateCodecError(f"deltas[{index}]", "expected [tag, count, columns]")
        tag, count, columns = group
        layout = TYPES.layouts.get(tag) if type(tag) is str else None
        if layout is None or layout.cls not in DELTA_TYPES:
            raise UnknownTypeTag(f"deltas[{index}]", f"not a delta type: {str(tag)[:80]!r}")
        out.append(TYPES.from_columns(tag, count, columns))
    return out


_VALIDATORS: dict[tuple[str, int], Callable[[bytes], Event]] = {}
"""How to read an event of each (type, current schema version) met so far (only known ones: bounded)."""


def _events(described: Any, body: bytes, start: int) -> list[Event]:
    if not (type(described) is list and len(described) == 3 and _LIST.issuperset(map(type, described))):
        raise StateCodecError("events", "expected [types, schema versions, lengths]")
    event_types, versions, lengths = described
    if not (len(event_types) == len(versions) == len(lengths)):
        raise StateCodecError("events", "types, schema versions and lengths of different counts")
    if not (_STR.issuperset(map(type, event_types)) and _INT.issuperset(map(type, versions + lengths))):
        raise StateCodecError("events", "expected strings, then integers")
    if lengths and min(lengths) < 0:
        raise StateCodecError("events", "a negative length")
    if start + sum(lengths) != len(body):
        raise StateCodecError("events", f"{sum(lengths)} bytes of events announced, {len(body) - start} present")
    events: list[Event] = []
    stops = list(accumulate(lengths, initial=start))
    for index, (event_type, version) in enumerate(zip(event_types, versions, strict=True)):
        value = body[stops[index] : stops[index + 1]]
        validate = _VALIDATORS.get((event_type, version))
        try:
            if validate is None:
                cls = REGISTRY.get(event_type)
                if version != cls.schema_version:  # another version of the catalogue wrote it: forward, or refused
                    events.append(decode_event(event_type, version, value))
                    continue
                validate = _VALIDATORS[(event_type, version)] = cls.__pydantic_validator__.validate_json
            try:
                events.append(validate(value))
            except ValidationError as error:
                raise invalid_event(event_type, error) from None
        except EventError as error:
            raise StateCodecError(f"events[{index}]", str(error)) from None
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
