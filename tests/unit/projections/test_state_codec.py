"""The stage codec (``projections.stages.codec``): every registered type written and read back equal,
packs of stage inputs with their public events, and whatever bytes come in (random, cut short, with a
flipped bit, or well framed around hostile JSON) either read as a value of the expected type or refused
with a ``StateCodecError`` naming what is wrong, never anything else.

Values are drawn from the classes' annotations by a walk of this module's own (``value_of``), so the
round trip covers every field the stages declare, whatever they declare next."""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
import zlib
from collections.abc import Mapping
from functools import cache
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.catalog.base import REGISTRY, Event
from projections.stages import codec
from projections.stages.codec import (
    ENTITY_TYPES,
    LAYOUT,
    TYPES,
    LayoutMismatch,
    StateCodecError,
    UnknownFormat,
    UnknownTypeTag,
    decode_inputs,
    dumps,
    encode_inputs,
    loads,
)
from projections.stages.codec_types import Registry
from projections.stages.core import Delta, Input, Position
from projections.stages.deltas import NodeAllocation, ShapeSeen
from projections.stages.jobs import JobView, TimelineEntry
from projections.stages.nodes import NodeProfile
from projections.stages.persistent import PMap, RunSet
from projections.stages.topology import default_stages
from tests.unit.events.catalog_samples import samples
from tests.unit.events.catalog_strategies import events_of

pytestmark = pytest.mark.timeout(300)

FUZZ = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- values of the registered types, from their annotations -------------------------------------------------

_text = st.text(max_size=12)
_ints = st.integers() | st.integers(-(2**70), 2**70)


def _deferred(annotation: Any) -> st.SearchStrategy[Any]:
    return st.deferred(lambda: value_of(annotation))


@cache
def value_of(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of ``annotation``, as the stages could hold them (independent of the codec's own walk)."""
    if annotation is int:
        return _ints
    if annotation is str:
        return _text
    if annotation is bool:
        return st.booleans()
    if annotation is type(None):
        return st.none()
    if annotation is RunSet:
        runs = st.lists(st.tuples(_text, st.integers()), max_size=12) | st.lists(st.integers(), max_size=12)
        return st.builds(lambda rs, cap: RunSet(rs, cap), runs, st.integers(1, 20))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from(list(annotation))
    if isinstance(annotation, type) and (dataclasses.is_dataclass(annotation) or hasattr(annotation, "_fields")):
        hints = typing.get_type_hints(annotation)
        names = [f.name for f in dataclasses.fields(annotation)] if dataclasses.is_dataclass(annotation) else []
        names = names or list(getattr(annotation, "_fields", ()))
        fields = {name: _deferred(hints[name]) for name in names}
        return st.builds(annotation, **fields)
    supertype = getattr(annotation, "__supertype__", None)
    if supertype is not None:
        return value_of(supertype)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        # None first: Hypothesis shrinks towards it, and recursive records (a job view's base) stay finite.
        ordered = sorted(args, key=lambda a: a is not type(None))
        return st.one_of(*(value_of(a) for a in ordered))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(value_of(args[0]), max_size=4).map(tuple)
    if origin is tuple:
        return st.tuples(*(value_of(a) for a in args))
    if origin in (Mapping, dict):
        return st.dictionaries(value_of(args[0]), value_of(args[1]), max_size=4)
    if origin is PMap:
        return st.dictionaries(value_of(args[0]), value_of(args[1]), max_size=6).map(PMap)
    raise AssertionError(f"no strategy for {annotation!r}")


RECORDS = sorted(TYPES.layouts)


@pytest.mark.parametrize("tag", RECORDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_registered_record_reads_back_equal(tag: str, data: st.DataObject) -> None:
    cls = TYPES.layouts[tag].cls
    value = data.draw(value_of(cls))
    assert loads(dumps(value), cls) == value


def test_the_registry_covers_every_stage_entity_and_every_delta() -> None:
    assert set(ENTITY_TYPES) == {stage.name for stage in default_stages()}
    registered = {layout.cls for layout in TYPES.layouts.values()}
    assert set(ENTITY_TYPES.values()) <= registered

    def subclasses(cls: type) -> set[type]:
        direct: list[type] = cls.__subclasses__()
        return {sub for one in direct for sub in {one, *subclasses(one)}}

    stage_deltas = {cls for cls in subclasses(Delta) if cls.__module__.startswith("projections.stages.")}
    assert stage_deltas and stage_deltas <= registered, stage_deltas - registered


def test_strings_and_numbers_of_every_kind_read_back_exactly() -> None:
    entry = TimelineEntry(-(2**80), "\ud800 lone surrogate", "\x00\n\"'\\", "日本語 🚀", "")
    assert loads(dumps(entry), TimelineEntry) == entry
    assert dumps(entry)[codec.HEADER_SIZE :].isascii()  # after the header, plain ASCII JSON


# -- packs of stage inputs -------------------------------------------------------------------------------------

_deltas = st.one_of(*(value_of(cls) for cls in sorted(codec.DELTA_TYPES, key=lambda c: c.__name__)))  # type: ignore[arg-type]
_current = [cls for cls in REGISTRY.classes()]
_events = st.one_of(*(events_of(cls) for cls in _current))
_positions = st.builds(
    Position, st.sampled_from(["fedsched.jobs", "app.s7.stage.nodes", "x"]), st.integers(0, 64), st.integers(0, 2**62)
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(things=st.lists(_deltas | _events, max_size=8), data=st.data())
def test_a_pack_of_deltas_and_events_reads_back_equal(things: list[Any], data: st.DataObject) -> None:
    items = [
        Input(data.draw(_text), data.draw(st.integers()), data.draw(_positions), thing, data.draw(_text))
        for thing in things
    ]
    assert decode_inputs(encode_inputs(items)) == items


def test_an_event_routed_to_several_keys_is_written_once_and_read_back_once() -> None:
    event = next(iter(samples().values()))
    items = [Input(key, 5, Position("t", 0, 9), event, "env") for key in ("a", "b", "c")]
    written = encode_inputs(items)
    assert written.count(event.model_dump_json().encode()) == 1
    read = decode_inputs(written)
    assert read == items and read[0].item is read[1].item is read[2].item


def test_an_event_of_an_older_schema_version_is_brought_forward_by_the_catalogue() -> None:
    older = [e for (kind, version), e in samples().items() if version < REGISTRY.get(kind).schema_version]
    assert older  # the catalogue keeps superseded versions (events.catalog.legacy)
    for event in older:
        (read,) = decode_inputs(encode_inputs([Input("k", 1, Position("t", 0, 1), event, "e")]))
        assert type(read.item) is REGISTRY.get(event.event_type)


def test_an_input_without_a_position_cannot_travel() -> None:
    with pytest.raises(ValueError, match="position"):
        encode_inputs([Input("k", 1, None, ShapeSeen("j", 1, 2, 3, (), 1), "")])


# -- what a reader refuses, and how it says so ---------------------------------------------------------------


def _framed(body: bytes, kind: bytes = b"E", version: int = 1, layout: str = LAYOUT) -> bytes:
    """A record as the module docstring lays it out, written here independently of the codec."""
    head = b"fS" + bytes((version,)) + kind + bytes.fromhex(layout)
    return head + zlib.crc32(body, zlib.crc32(head)).to_bytes(4, "big") + body


def _pack_body(value: Any, events: bytes = b"") -> bytes:
    text = json.dumps(value, separators=(",", ":")).encode()
    return len(text).to_bytes(4, "big") + text + events


VIEW = JobView("job-1", "queued", timeline=(TimelineEntry(1, "queued", "JobQueued"),))


def test_a_pickle_is_refused_as_a_pickle() -> None:
    import pickle

    with pytest.raises(UnknownFormat, match="pickle"):
        loads(pickle.dumps(VIEW), JobView)
    with pytest.raises(UnknownFormat, match="pickle"):
        decode_inputs(pickle.dumps([("k", 1, "t", 0, 1, None, "")]))


def test_refusals_name_the_field_and_the_reason() -> None:
    body = json.dumps({"JobView": json.loads(codec.TYPES.to_json(VIEW))["JobView"]}).encode()
    assert loads(_framed(body), JobView) == VIEW
    cases: list[tuple[bytes, type[StateCodecError], str, str]] = [
        (_framed(body, version=9), UnknownFormat, "header.version", "format version 9"),
        (_framed(body, kind=b"P"), UnknownFormat, "header.kind", "a pack of inputs where an entity"),
        (_framed(body, layout="00" * 8), LayoutMismatch, "header.layout", "fields changed"),
        (_framed(body)[:-1], StateCodecError, "header.checksum", "checksum"),
        (_framed(body)[:10], UnknownFormat, "header", "shorter than a header"),
        (_framed(b'{"JobVue":[]}'), UnknownTypeTag, "record", "'JobVue'"),
        (_framed(b'{"JobView":["job-1"]}'), StateCodecError, "JobView", "expected 43 fields"),
        (_framed(body.replace(b'"queued"', b"7", 1)), StateCodecError, "JobView.status", "expected str, got int"),
        (_framed(body.replace(b'"JobQueued"', b"null", 1)), StateCodecError, "TimelineEntry.event", "got None"),
        (_framed(b'{"TimelineEntry":[1,"a","b","",""]}'), StateCodecError, "body", "expected JobView, got"),
        (_framed(b'{"JobView":[] , "Gpu":[]}'), StateCodecError, "record", "one tag per object"),
        (_framed(b"[1, NaN]"), StateCodecError, "body", "NaN"),
        (_framed(b"[" * 100_000 + b"]" * 100_000), StateCodecError, "body", "nested too deeply"),
        (_framed(b"9" * 5000), StateCodecError, "body", "not JSON"),
        (_framed('{"JobView": "\u00e9"}'.encode()), StateCodecError, "body", "not ASCII"),
    ]
    fields = len(dataclasses.fields(JobView))
    for data, error, field, reason in cases:
        reason = reason.replace("43", str(fields))
        with pytest.raises(error) as caught:
            loads(data, JobView)
        assert caught.value.field == field and reason in caught.value.reason, (caught.value, field, reason)
        assert caught.value.reason_code == "MalformedRecord"  # what a dead letter's code says


def test_refusals_of_a_pack_name_the_column_or_the_event() -> None:
    none: list[Any] = [[], [], []]
    shapes = [["ShapeSeen", 1, [["j"], [1], [2], [3], [[]], [1]]]]
    columns: list[Any] = [["k"], [1], [0], [0], [5], [0], [""]]
    good: list[Any] = [["t"], none, shapes, columns]
    assert decode_inputs(_framed(_pack_body(good), kind=b"P"))[0].item == ShapeSeen("j", 1, 2, 3, (), 1)

    def event(kind: str, version: int, length: int) -> list[Any]:
        return [[kind], [version], [length]]

    def with_item(item: int) -> list[Any]:
        return [*columns[:5], [item], [""]]

    view = json.loads(TYPES.to_json(VIEW))["JobView"]
    cases: list[tuple[bytes, str, str]] = [
        (_pack_body([["t"], none, shapes, columns[:6]]), "columns", "expected 7 arrays"),
        (_pack_body([["t"], none, shapes, [["k"], [1, 2], *columns[2:]]]), "time_ms", "1 inputs"),
        (_pack_body([["t"], none, shapes, [[1], *columns[1:]]]), "key", "expected str"),
        (_pack_body([["t"], none, shapes, [*columns[:2], [3], *columns[3:]]]), "topic", "out of the pack's 1"),
        (_pack_body([["t"], none, shapes, with_item(1)]), "item", "none of the pack's 0 events and 1 delta"),
        (_pack_body([["t"], none, shapes, with_item(-1)]), "item", "none of the pack's 0 events"),
        (_pack_body([["t"], none, [*shapes, *shapes], with_item(0)]), "item", "deltas that no input refers to"),
        (_pack_body([["t"], none, [["ShapeSeen", 0, [[]] * 6]], columns]), "item", "more inputs of a delta type"),
        (_pack_body([["t"], none, [["JobView", 1, [[v] for v in view]]], columns]), "deltas[0]", "not a delta"),
        (_pack_body([["t"], none, [["ShapeSeen", 1, [["j"], [1], [2], [3], [[]]]]], columns]), "ShapeSeen", "columns"),
        (
            _pack_body([["t"], none, [["ShapeSeen", 1, [["j"], [1], [2], [3], [["x", 1]], [1]]]], columns]),
            "ShapeSeen.gpu_models[0][1]",
            "expected str",
        ),
        (
            _pack_body([["t"], none, [["ShapeSeen", 2, shapes[0][2]]], columns]),
            "ShapeSeen.job_id",
            "1 values where there are 2",
        ),
        (
            _pack_body([["t"], event("io.fedsched.Nope", 1, 2), shapes, columns], b"{}"),
            "events[0]",
            "unknown event type",
        ),
        (
            _pack_body([["t"], event("io.fedsched.JobStarted", 99, 2), shapes, columns], b"{}"),
            "events[0]",
            "version 99",
        ),
        (_pack_body([["t"], event("io.fedsched.JobStarted", 1, 2), shapes, columns], b"{}"), "events[0]", "job_id"),
        (
            _pack_body([["t"], event("io.fedsched.JobStarted", 1, 9), shapes, columns], b"{}"),
            "events",
            "9 bytes of events announced, 2 present",
        ),
        (_pack_body([["t"], event("io.fedsched.JobStarted", 1, -2), shapes, columns], b"{}"), "events", "negative"),
        (_pack_body(good, b"trailing"), "events", "0 bytes of events announced, 8 present"),
        (b"\xff\xff\xff\xff[]", "body", "rows of 4294967295 bytes announced"),
    ]
    for body, field, reason in cases:
        with pytest.raises(StateCodecError) as caught:
            decode_inputs(_framed(body, kind=b"P"))
        assert caught.value.field == field and reason in caught.value.reason, (caught.value, field, reason)


def test_a_value_that_is_not_bytes_is_refused() -> None:
    for value in (None, "text", 7):
        with pytest.raises(UnknownFormat, match="expected bytes"):
            loads(value, JobView)  # type: ignore[arg-type]
        with pytest.raises(UnknownFormat, match="expected bytes"):
            decode_inputs(value)  # type: ignore[arg-type]


# -- whatever the bytes, a value or the typed error ----------------------------------------------------------

PUBLISHED = (((1, 2, 3, 4), (5, 6, 7), (8, 9, 10, 11), (("A100", 8, 1, 2, 3, 4, 5),), 6, 7, True, False, True), 9)
ENTITY = NodeProfile("c", "n", True, 3, 64_000, 512_000, recent_failures_ms=(1, 2), published=PUBLISHED)
PACK = [
    Input("c/n", 1, Position("x.stage.nodes", 2, 3), NodeAllocation("j", 1, True, "t", 1, 2, ((0, 500),)), ""),
    Input("j", 2, Position("fedsched.jobs", 0, 4), next(iter(samples().values())), "e-1"),
]
RECORDS_TO_DAMAGE = [dumps(ENTITY), dumps(VIEW), encode_inputs(PACK)]


def _read(data: bytes) -> object:
    """Either reader, as the record's kind byte says, refusing only with a ``StateCodecError``."""
    try:
        if data[3:4] == b"P":
            return decode_inputs(data)
        return loads(data, NodeProfile if b"NodeProfile" in data else JobView)
    except StateCodecError as error:
        assert str(error).startswith("unreadable stage record: field ")
        return error


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes_are_refused(data: bytes) -> None:
    assert isinstance(_read(data), StateCodecError)
    assert isinstance(_read(_framed(data)), StateCodecError | JobView)
    assert isinstance(_read(_framed(data, kind=b"P")), StateCodecError | list)


@FUZZ
@given(which=st.sampled_from(RECORDS_TO_DAMAGE), data=st.data())
def test_a_record_cut_short_or_with_a_flipped_bit_is_refused(which: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(which) - 1))
    assert isinstance(_read(which[:cut]), StateCodecError)
    bit = data.draw(st.integers(0, len(which) * 8 - 1))
    flipped = bytearray(which)
    flipped[bit // 8] ^= 1 << (bit % 8)
    assert isinstance(_read(bytes(flipped)), StateCodecError)


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.sampled_from([*RECORDS, "Latest", "Health", "x"])
)
_json = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.sampled_from(RECORDS) | st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=40,
)


@FUZZ
@given(value=_json)
def test_well_framed_hostile_json_reads_as_the_expected_type_or_is_refused(value: object) -> None:
    body = json.dumps(value).encode()
    read = _read(_framed(body))
    assert isinstance(read, StateCodecError | JobView)
    packed = _read(_framed(_pack_body([["t"], [[], [], []], value, [[]] * 7]), kind=b"P"))
    assert isinstance(packed, StateCodecError | list)
    packed = _read(_framed(_pack_body([["t"], [[], [], []], [], value]), kind=b"P"))
    assert isinstance(packed, StateCodecError | list)


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, list):
        return [path] + [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    if isinstance(value, dict):
        return [path] + [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    return [path]


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, list):
        return [_replace(v, rest, new) if i == head else v for i, v in enumerate(value)]
    return {k: _replace(v, rest, new) if k == head else v for k, v in value.items()}


@FUZZ
@given(which=st.sampled_from([ENTITY, VIEW]), data=st.data())
def test_an_entity_with_one_value_changed_reads_as_the_expected_type_or_is_refused(
    which: object, data: st.DataObject
) -> None:
    tree = json.loads(TYPES.to_json(which))
    path = data.draw(st.sampled_from(_leaves(tree)))
    new = data.draw(_json)
    read = _read(_framed(json.dumps(_replace(tree, path, new)).encode()))
    assert isinstance(read, StateCodecError | type(which))


@FUZZ
@given(data=st.data())
def test_a_pack_with_one_value_changed_reads_as_inputs_or_is_refused(data: st.DataObject) -> None:
    written = encode_inputs(PACK)
    length = int.from_bytes(written[codec.HEADER_SIZE : codec.HEADER_SIZE + 4], "big")
    start = codec.HEADER_SIZE + 4
    tree, events = json.loads(written[start : start + length]), written[start + length :]
    path = data.draw(st.sampled_from(_leaves(tree)))
    changed = _replace(tree, path, data.draw(_json))
    read = _read(_framed(_pack_body(changed, events), kind=b"P"))
    assert isinstance(read, StateCodecError | list)


# -- the registry ---------------------------------------------------------------------------------------------


def _version_one() -> type:
    @dataclasses.dataclass
    class Thing:
        a: int
        b: tuple[str, ...]

    return Thing


def test_a_layout_fingerprint_follows_the_fields_not_the_class_name_or_module() -> None:
    first = Registry({"Thing": _version_one()})

    @dataclasses.dataclass
    class Renamed:  # the same fields under another name, in another module (this one)
        a: int
        b: tuple[str, ...]

    @dataclasses.dataclass
    class Grown:
        a: int
        b: tuple[str, ...]
        c: int = 0

    @dataclasses.dataclass
    class Retyped:
        a: int
        b: tuple[int, ...]

    assert Registry({"Thing": Renamed}).layout_id == first.layout_id
    assert Registry({"Thing": Grown}).layout_id != first.layout_id
    assert Registry({"Thing": Retyped}).fingerprints["Thing"] != first.fingerprints["Thing"]
    assert len(LAYOUT) == 16 and TYPES.layout_id == LAYOUT


class _Point(NamedTuple):
    x: int
    y: int


def test_a_registry_refuses_what_it_could_not_read_back_naming_the_field() -> None:
    @dataclasses.dataclass
    class Loose:
        anything: Any

    @dataclasses.dataclass
    class Ambiguous:
        either: tuple[int, ...] | Mapping[str, int]

    @dataclasses.dataclass
    class Unregistered:
        point: _Point

    @dataclasses.dataclass
    class Unhashable:
        by: Mapping[tuple[int, list[int]], int]

    for cls, field, reason in (
        (Loose, "Loose.anything", "cannot write"),
        (Ambiguous, "Ambiguous.either", "could not be told apart"),
        (Unregistered, "Unregistered.point", "is not registered"),
        (Unhashable, "Unhashable.by", "must be hashable"),
    ):
        with pytest.raises(TypeError, match=reason) as caught:
            Registry({cls.__name__: cls})
        assert str(caught.value).startswith(field)
    assert Registry({"Unregistered": Unregistered, "Point": _Point}).layout_id


def test_a_named_tuple_field_reads_back_as_its_class() -> None:
    @dataclasses.dataclass
    class Holds:
        point: _Point
        points: tuple[_Point, ...]

    registry = Registry({"Holds": Holds, "Point": _Point})
    value = Holds(_Point(1, 2), (_Point(3, 4),))
    read = registry.from_json(registry.to_json(value))
    assert read == value and type(read.point) is _Point and type(read.points[0]) is _Point
    with pytest.raises(StateCodecError) as caught:
        registry.from_json('{"Holds":[[1,"2"],[]]}')
    assert caught.value.field == "Holds.point.y"


def test_events_are_never_written_as_records() -> None:
    event = next(iter(samples().values()))
    assert isinstance(event, Event)
    with pytest.raises(TypeError, match="not registered"):
        dumps(event)
