"""How a value of a declared type is written and read back: the stage codec's types, compiled from the
registered classes' annotations.

Called by ``projections.stages.codec``, which names the classes (its registry) and frames the records.
Pure: no I/O. Nothing here is written per class: a class's layout is read from its dataclass fields
and their annotations, so a field added, removed, renamed or retyped changes what is written and read
(and the layout's fingerprint) with no code to change.

A value is written as JSON: a registered record as ``{"<tag>": [field values, in field order]}``, a
tuple, list or frozenset as an array, a mapping (a dict or a ``PMap``) as one flat array of keys and
values, a ``RunSet`` as ``[cap, run, ...]``, an enum as its value; numbers, strings, booleans and null
as themselves. Tags are the registry's explicit names, never a module path, so a class can move or be
renamed without making stored state unreadable. The JSON encoder writes the records (through its
``default`` hook: ``Registry.encode_hook``); the JSON decoder builds them as it meets them
(``Registry.decode_hook``), innermost first, so a record's fields are already values when it is built.
``Registry.to_json`` and ``Registry.from_json`` do both.

Reading is closed: a tag that is not registered, a record with the wrong number of fields, a field
whose value is not of its annotated type (exact types: a bool is not an int), a mapping with an odd
number of items, each raises a ``StateCodecError`` naming the record's tag and field. Only the
registered classes, their enums, the persistent collections and the JSON types are ever built, and
building a record runs nothing but its dataclass ``__init__`` (or plain slot assignment).

Supported annotations: ``int``, ``str``, ``bool``, ``float``, ``None``, a registered record or enum, a
``NewType`` of one of these, unions of them (at most one member that needs converting, such as a
tuple or a mapping), ``tuple[X, ...]``, ``tuple[A, B]``, ``list[X]``, ``frozenset[X]``,
``Mapping[K, V]``/``dict[K, V]``, ``PMap[K, V]`` and ``RunSet`` (its runs: comparable values of one
shape made of the JSON scalars and tuples). Anything else (``Any``, an unregistered class) is refused
when the registry is built, naming the field: the codec never guesses.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any

from projections.stages.codec_errors import StateCodecError, UnknownTypeTag
from projections.stages.persistent import PMap, RunSet

NoneType = type(None)
_LISTS = frozenset({list})
_SCALARS: dict[Any, str] = {int: "int", str: "str", bool: "bool", float: "float", NoneType: "None"}


def _refuse_constant(name: str) -> Any:
    raise StateCodecError("body", f"{name} is not a number this codec writes")


class Invalid(Exception):
    """A value that is not of its declared type. Internal: the record holding it re-raises it as a
    ``StateCodecError`` naming its tag and field (``where`` is the path inside the field, ``[3]``)."""

    def __init__(self, reason: str, where: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.where = where


@dataclass(frozen=True, slots=True)
class Kind:
    """One annotation, compiled. A decoded JSON value whose exact type is in ``accepts`` is kept as it
    is (a scalar, or a record the decoder already built); any other goes through ``decode`` (None: it is
    invalid). ``encode`` turns a value into what the JSON encoder writes (None: it writes it as it is)."""

    describe: str
    """Canonical text of the type (records by tag): what a layout fingerprint is made of."""
    accepts: frozenset[type]
    decode: Callable[[Any], Any] | None = None
    encode: Callable[[Any], Any] | None = None
    python: tuple[type, ...] = ()
    """The Python types of the values a converting kind writes (to tell union members apart)."""
    hashable: bool = True
    reads: frozenset[type] = frozenset()
    """The JSON types ``decode`` reads (an array for a container, a string or number for an enum)."""


def _name(value: object) -> str:
    kind = type(value)
    if kind is list:
        return "an array"
    if kind is dict:
        return "an object"
    return _SCALARS.get(kind) or f"a {kind.__name__}"


def read(kind: Kind, value: Any) -> Any:
    """``value`` as ``kind`` says (raises ``Invalid``)."""
    if type(value) in kind.accepts:
        return value
    if kind.decode is None:
        raise Invalid(f"expected {kind.describe}, got {_name(value)}")
    return kind.decode(value)


def _scalar(python: type) -> Kind:
    return Kind(_SCALARS[python], frozenset({python}))


def _array(value: Any, kind: str) -> list[Any]:
    if type(value) is not list:
        raise Invalid(f"expected {kind} (an array), got {_name(value)}")
    return value


def _items(item: Kind, values: list[Any]) -> list[Any]:
    """Every element of ``values`` read as ``item`` (a new list only if one had to be converted)."""
    accepts, decode = item.accepts, item.decode
    if accepts.issuperset(map(type, values)):
        return values
    if decode is not None and not accepts:
        try:
            return [decode(value) for value in values]
        except Invalid:
            pass  # found again below, with its index
    out = []
    for index, value in enumerate(values):
        if type(value) in accepts:
            out.append(value)
            continue
        if decode is None:
            raise Invalid(f"expected {item.describe}, got {_name(value)}", f"[{index}]")
        try:
            out.append(decode(value))
        except Invalid as error:
            raise Invalid(error.reason, f"[{index}]{error.where}") from None
    return out


def _sequence(item: Kind, python: type, label: str) -> Kind:
    describe = f"{label}[{item.describe}]" if label != "tuple" else f"tuple[{item.describe}, ...]"
    make: Callable[[list[Any]], Any] = tuple if python is tuple else (frozenset if python is frozenset else list)

    def decode(value: Any) -> Any:
        if type(value) is not list:
            raise Invalid(f"expected {describe} (an array), got {_name(value)}")
        return make(_items(item, value))

    encode = None
    if item.encode is not None or python is frozenset:
        element = item.encode or (lambda value: value)

        def encode(value: Any) -> Any:
            return [element(x) for x in value]

    hashable = item.hashable and python is not list
    return Kind(describe, frozenset(), decode, encode, (python,), hashable, frozenset({list}))


def _fixed(items: tuple[Kind, ...]) -> Kind:
    describe = f"tuple[{', '.join(k.describe for k in items)}]"
    count = len(items)
    # Most are tuples of scalars of one type each (``(model, capacity, free)``): checked at once.
    simple = (
        tuple(next(iter(k.accepts)) for k in items)
        if all(len(k.accepts) == 1 and k.decode is None for k in items)
        else None
    )

    def decode(value: Any) -> Any:
        if simple is not None and type(value) is list and tuple(map(type, value)) == simple:
            return tuple(value)
        values = _array(value, describe)
        if len(values) != count:
            raise Invalid(f"expected {describe} ({count} items), got {len(values)} items")
        out = []
        for index, (kind, item) in enumerate(zip(items, values, strict=True)):
            try:
                out.append(read(kind, item))
            except Invalid as error:
                raise Invalid(error.reason, f"[{index}]{error.where}") from None
        return tuple(out)

    encode = None
    if any(k.encode is not None for k in items):
        encoders = [k.encode or (lambda value: value) for k in items]

        def encode(value: Any) -> Any:
            return [e(x) for e, x in zip(encoders, value, strict=True)]

    return Kind(describe, frozenset(), decode, encode, (tuple,), all(k.hashable for k in items), frozenset({list}))


def _pairs(key: Kind, value: Kind, describe: str, values: Any) -> list[tuple[Any, Any]]:
    flat = _array(values, describe)
    if len(flat) % 2:
        raise Invalid(f"expected {describe} (keys and values in turn), got an odd number of items")
    keys = _items(key, flat[0::2])
    if len(set(keys)) != len(keys):
        raise Invalid(f"expected {describe}, got a key twice")
    return list(zip(keys, _items(value, flat[1::2]), strict=True))


def _flatten(key: Kind, value: Kind) -> Callable[[Iterable[tuple[Any, Any]]], list[Any]]:
    encode_key, encode_value = key.encode, value.encode
    if encode_key is None and encode_value is None:
        return lambda items: list(chain.from_iterable(items))
    ek = encode_key or (lambda v: v)
    ev = encode_value or (lambda v: v)
    return lambda items: [x for k, v in items for x in (ek(k), ev(v))]


def _mapping(key: Kind, value: Kind, where: str) -> Kind:
    if not key.hashable:
        raise TypeError(f"{where}: a mapping's keys must be hashable, not {key.describe}")
    describe = f"Mapping[{key.describe}, {value.describe}]"
    flatten = _flatten(key, value)
    return Kind(
        describe,
        frozenset(),
        lambda values: dict(_pairs(key, value, describe, values)),
        lambda mapping: flatten(mapping.items()),
        (Mapping,),
        hashable=False,
        reads=frozenset({list}),
    )


def _pmap(key: Kind, value: Kind, where: str) -> Kind:
    if not key.hashable:
        raise TypeError(f"{where}: a PMap's keys must be hashable, not {key.describe}")
    describe = f"PMap[{key.describe}, {value.describe}]"
    flatten = _flatten(key, value)
    return Kind(
        describe,
        frozenset(),
        lambda values: PMap(_pairs(key, value, describe, values)),
        lambda pmap: flatten(pmap.items()),
        (PMap,),
        reads=frozenset({list}),
    )


_RUN_SCALARS = frozenset({int, str, bool, float})


def _decode_runs(values: Any) -> RunSet:
    """``[cap, width, column, ...]``: runs of ``width`` values (0: scalar runs, one column), one array
    per position, each of one scalar type (the set orders its runs: they must compare)."""
    flat = _array(values, "RunSet")
    if len(flat) < 3 or type(flat[0]) is not int or flat[0] < 1 or type(flat[1]) is not int or flat[1] < 0:
        raise Invalid("expected RunSet ([cap >= 1, width >= 0, column, ...])")
    cap, width, columns = flat[0], flat[1], flat[2:]
    if len(columns) != max(width, 1) or not _LISTS.issuperset(map(type, columns)):
        raise Invalid(f"expected RunSet with {max(width, 1)} columns of runs")
    for index, column in enumerate(columns):
        kinds = set(map(type, column))
        if len(kinds) > 1 or not kinds <= _RUN_SCALARS:
            raise Invalid("expected runs of one shape (one scalar type per position)", f"[{index + 2}]")
    if len({len(column) for column in columns}) > 1:
        raise Invalid("expected as many values in every column of runs")
    runs = columns[0] if width == 0 else list(zip(*columns, strict=True))
    return RunSet(runs, cap)


def _encode_runs(runs: RunSet) -> list[Any]:
    # ``__reduce__`` hands the runs over as the set keeps them (no sort, no copy of the shared state).
    _, (members, cap) = runs.__reduce__()
    if not members or type(members[0]) is not tuple:
        return [cap, 0, list(members)]
    width = len(members[0])
    if {len(run) for run in members} != {width}:
        raise TypeError(f"the runs of a RunSet must all have one width: {members[:3]!r}...")
    return [cap, width, *(list(column) for column in zip(*members, strict=True))]


RUN_SET = Kind("RunSet", frozenset(), _decode_runs, _encode_runs, (RunSet,), reads=frozenset({list}))


def _enum(cls: type[enum.Enum], tag: str) -> Kind:
    values = [member.value for member in cls]
    bases = {type(v) for v in values}
    if len(bases) != 1 or not bases <= {str, int}:
        raise TypeError(f"enum {cls.__qualname__}: its values must be all str or all int")
    (base,) = bases
    by_value = {member.value: member for member in cls}
    describe = f"{tag}{{{','.join(str(v) for v in values)}}}"

    def decode(value: Any) -> Any:
        if type(value) is base:
            member = by_value.get(value)
            if member is not None:
                return member
        raise Invalid(f"expected {describe}, got {value!r}")

    # A str or int enum is written by the JSON encoder as its value; any other enum by us.
    encode = None if issubclass(cls, base) else (lambda member: member.value)
    return Kind(describe, frozenset(), decode, encode, (cls,), reads=frozenset({base}))


def _union(members: list[Kind], where: str) -> Kind:
    accepts: frozenset[type] = frozenset().union(*(m.accepts for m in members))
    converting = [m for m in members if m.decode is not None]
    if len(converting) > 1:
        names = " and ".join(m.describe for m in converting)
        raise TypeError(
            f"{where}: a union may have one member that converts, not {names}: they could not be told apart"
        )
    describe = " | ".join(sorted(m.describe for m in members))
    hashable = all(m.hashable for m in members)
    if not converting:
        return Kind(describe, accepts, None, None, (), hashable)
    (other,) = converting
    if other.reads & accepts:
        raise TypeError(f"{where}: in {describe}, a value of {other.describe} could be read as another member")
    encode = None
    if other.encode is not None:
        python, convert = other.python, other.encode

        def encode(value: Any) -> Any:
            return convert(value) if isinstance(value, python) else value

    return Kind(describe, accepts, other.decode, encode, other.python, hashable, other.reads)


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """A registered record class: its tag, field names and field kinds, compiled."""

    tag: str
    cls: type
    names: tuple[str, ...]
    kinds: tuple[Kind, ...]

    @property
    def describe(self) -> str:
        return f"{self.tag}({', '.join(f'{n}: {k.describe}' for n, k in zip(self.names, self.kinds, strict=True))})"


class Registry:
    """The closed set of types the codec writes and reads, each under an explicit tag: record classes
    (dataclasses, written as tagged objects), named tuples (written as arrays, read where an annotation
    names them) and enums (written as their values). Built once; every annotation reachable from a
    registered class is compiled here, and one that names an unregistered or unsupported type is
    refused (``TypeError`` naming the field)."""

    def __init__(self, types: Mapping[str, type]) -> None:
        self._record_tags: dict[type, str] = {}
        self._tuple_tags: dict[type, str] = {}
        self._enums: dict[type, Kind] = {}
        for tag, cls in types.items():
            if cls in self._record_tags or cls in self._tuple_tags or cls in self._enums:
                raise TypeError(f"{cls.__qualname__} is registered twice (again as {tag})")
            if dataclasses.is_dataclass(cls):
                self._record_tags[cls] = tag
            elif issubclass(cls, tuple) and hasattr(cls, "_fields"):
                self._tuple_tags[cls] = tag
            elif issubclass(cls, enum.Enum):
                self._enums[cls] = _enum(cls, tag)
            else:
                raise TypeError(f"{tag}: {cls!r} is neither a dataclass, a named tuple nor an enum")
        self.classes = frozenset(self._record_tags)
        """Every registered record class (what the decoder builds from a tagged object)."""
        self._tuples: dict[type, tuple[RecordLayout, Kind]] = {}
        self.layouts: dict[str, RecordLayout] = {}
        self._encoders: dict[type, Callable[[Any], Any]] = {}
        self._builders: dict[str, Callable[[Any], Any]] = {}
        self._columns: dict[str, Callable[[int, Any], list[Any]]] = {}
        for cls, tag in self._record_tags.items():
            layout = self._layout(tag, cls)
            self.layouts[tag] = layout
            self._encoders[cls] = _record_encoder(layout, cls)
            self._builders[tag] = _record_builder(layout, cls)
            self._columns[tag] = _columns_builder(layout, cls)
        for cls in self._tuple_tags:
            self._named(cls)
        every = [*self.layouts.values(), *(layout for layout, _ in self._tuples.values())]
        self.fingerprints: dict[str, str] = {
            layout.tag: hashlib.sha256(layout.describe.encode()).hexdigest()[:16] for layout in every
        }
        """Each record's and named tuple's layout fingerprint (its tag, field names and field types)."""
        text = "\n".join(sorted([*(layout.describe for layout in every), *(k.describe for k in self._enums.values())]))
        self.layout_id = hashlib.sha256(text.encode()).hexdigest()[:16]
        """The fingerprint of every layout at once: stored with what is written, compared when read."""

        self._encoder = json.JSONEncoder(
            separators=(",", ":"), check_circular=False, allow_nan=False, default=self.encode_hook
        )
        self._decoder = json.JSONDecoder(object_pairs_hook=self.decode_hook, parse_constant=_refuse_constant)

    def to_json(self, value: Any) -> str:
        """``value`` (registered records, the JSON types, inside one another) as ASCII JSON text.
        ``TypeError`` for a value of a type that is not registered."""
        return self._encoder.encode(value)

    def from_json(self, text: str, where: str = "body") -> Any:
        """The value ``text`` holds, its records built; ``StateCodecError`` naming what is wrong if it
        is not JSON this registry writes (``where``: what to call the text in the error)."""
        try:
            return self._decoder.decode(text)
        except StateCodecError:
            raise
        except RecursionError:
            raise StateCodecError(where, "nested too deeply") from None
        except ValueError as error:  # not JSON, or a number too long to read
            raise StateCodecError(where, f"not JSON this codec writes: {error}") from None

    def tag_of(self, cls: type) -> str:
        return self._record_tags[cls]

    def _layout(self, tag: str, cls: type) -> RecordLayout:
        try:
            hints = typing.get_type_hints(cls)
        except Exception as error:
            raise TypeError(f"{tag}: the annotations of {cls.__qualname__} cannot be resolved: {error}") from error
        fields = dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ()
        names = tuple(f.name for f in fields) if fields else tuple(getattr(cls, "_fields", ()))
        kinds = tuple(self._kind(hints[name], f"{tag}.{name}") for name in names)
        return RecordLayout(tag, cls, names, kinds)

    def _named(self, cls: type) -> Kind:
        known = self._tuples.get(cls)
        if known is None:
            layout = self._layout(self._tuple_tags[cls], cls)
            known = self._tuples[cls] = (layout, _named_tuple(layout))
        return known[1]

    def _kind(self, annotation: Any, where: str) -> Kind:
        if annotation in _SCALARS:
            return _scalar(annotation)
        supertype = getattr(annotation, "__supertype__", None)
        if supertype is not None:  # a NewType
            return self._kind(supertype, where)
        if annotation in self._record_tags:
            tag = self._record_tags[annotation]
            return Kind(tag, frozenset({annotation}), None, None, (annotation,))
        if annotation in self._tuple_tags:
            return self._named(annotation)
        if annotation in self._enums:
            return self._enums[annotation]
        if annotation is RunSet:
            return RUN_SET
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin in (types.UnionType, typing.Union):
            return _union([self._kind(a, where) for a in args], where)
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return _sequence(self._kind(args[0], f"{where}[]"), tuple, "tuple")
            if args and Ellipsis not in args:
                return _fixed(tuple(self._kind(a, f"{where}[{i}]") for i, a in enumerate(args)))
        if origin in (list, frozenset) and len(args) == 1:
            return _sequence(self._kind(args[0], f"{where}[]"), origin, origin.__name__)
        if origin in (Mapping, dict) and len(args) == 2:
            return _mapping(self._kind(args[0], f"{where} key"), self._kind(args[1], f"{where} value"), where)
        if origin is PMap and len(args) == 2:
            return _pmap(self._kind(args[0], f"{where} key"), self._kind(args[1], f"{where} value"), where)
        if isinstance(annotation, type) and (
            dataclasses.is_dataclass(annotation) or issubclass(annotation, enum.Enum | tuple)
        ):
            raise TypeError(
                f"{where}: {annotation.__module__}.{annotation.__qualname__} is not registered with the stage codec"
                " (projections.stages.codec): add it under a tag of its own"
            )
        raise TypeError(f"{where}: the stage codec cannot write {annotation!r} (declare a supported type)")

    def to_columns(self, records: list[Any]) -> tuple[str, list[Any]]:
        """Records of one registered class as its tag and one column (a list) per field, in field order:
        what the JSON encoder writes for many records of one type in far fewer objects."""
        layout = self.layouts[self._record_tags[type(records[0])]]
        names = layout.names
        if len(names) < 2:
            columns: list[Any] = [[getattr(record, name) for record in records] for name in names]
        else:
            columns = list(zip(*map(attrgetter(*names), records), strict=True))
        for index, kind in enumerate(layout.kinds):
            if kind.encode is not None:
                columns[index] = [kind.encode(value) for value in columns[index]]
        return layout.tag, columns

    def from_columns(self, tag: Any, count: Any, columns: Any) -> list[Any]:
        """``count`` records of the class registered as ``tag``, from the columns ``to_columns`` wrote
        (as the JSON decoder read them): each column checked at once, then the records built."""
        build = self._columns.get(tag) if type(tag) is str else None
        if build is None:
            raise UnknownTypeTag("record", f"unknown type tag {str(tag)[:80]!r}")
        if type(count) is not int or count < 0:
            raise StateCodecError(tag, f"expected a count of records, got {_name(count)}")
        return build(count, columns)

    def encode_hook(self, value: Any) -> Any:
        """The JSON encoder's ``default``: a registered record as ``{tag: [fields]}``."""
        encoder = self._encoders.get(type(value))
        if encoder is None:
            raise TypeError(f"{type(value).__qualname__} is not a type the stage codec writes (not registered)")
        return encoder(value)

    def decode_hook(self, pairs: list[tuple[str, Any]]) -> Any:
        """The JSON decoder's ``object_pairs_hook``: ``{tag: [fields]}`` built as the registered record."""
        if len(pairs) == 1:
            tag, payload = pairs[0]
            builder = self._builders.get(tag)
            if builder is not None:
                return builder(payload)
            raise UnknownTypeTag("record", f"unknown type tag {tag[:80]!r}")
        raise StateCodecError("record", f"expected one tag per object, got {len(pairs)} keys")


def _named_tuple(layout: RecordLayout) -> Kind:
    """A named tuple: written as the array of its fields (the JSON encoder writes any tuple so), read
    back as the class the annotation names."""
    cls, names, kinds = layout.cls, layout.names, layout.kinds
    fields = _fixed(kinds)
    decode_fields = fields.decode
    assert decode_fields is not None
    new = tuple.__new__

    def decode(value: Any) -> Any:
        try:
            return new(cls, decode_fields(value))
        except Invalid as error:
            if type(value) is list and len(value) == len(names) and error.where.startswith("["):
                index = int(error.where[1 : error.where.index("]")])
                where = f".{names[index]}{error.where[error.where.index(']') + 1 :]}"
                raise Invalid(error.reason, where) from None
            raise Invalid(f"expected {layout.tag} ({', '.join(names)}): {error.reason}", error.where) from None

    return Kind(layout.tag, frozenset(), decode, fields.encode, (cls,), fields.hashable, frozenset({list}))


def _record_encoder(layout: RecordLayout, cls: type) -> Callable[[Any], Any]:
    tag, names = layout.tag, layout.names
    read: Callable[[Any], Any]
    if not names:
        return lambda value: {tag: ()}
    if len(names) == 1:
        single = attrgetter(names[0])
        read = lambda value: (single(value),)  # noqa: E731
    else:
        read = attrgetter(*names)
    converting = [(i, k.encode) for i, k in enumerate(layout.kinds) if k.encode is not None]
    if not converting:
        return lambda value: {tag: read(value)}

    def encode(value: Any) -> Any:
        values = list(read(value))
        for index, convert in converting:
            values[index] = convert(values[index])
        return {tag: values}

    return encode


def _columns_builder(layout: RecordLayout, cls: type) -> Callable[[int, Any], list[Any]]:
    tag, names, kinds = layout.tag, layout.names, layout.kinds
    positional = _positional(cls, len(names))

    def build(count: int, columns: Any) -> list[Any]:
        if type(columns) is not list or len(columns) != len(names) or not _LISTS.issuperset(map(type, columns)):
            raise StateCodecError(tag, f"expected {len(names)} columns ({', '.join(names)})")
        read = []
        for name, kind, column in zip(names, kinds, columns, strict=True):
            if len(column) != count:
                raise StateCodecError(f"{tag}.{name}", f"{len(column)} values where there are {count} records")
            try:
                read.append(_items(kind, column))
            except Invalid as error:
                raise StateCodecError(f"{tag}.{name}{error.where}", error.reason) from None
        if not names:
            return [cls() for _ in range(count)]
        if positional:
            return list(map(cls, *read))
        made = []
        for values in zip(*read, strict=True):
            record: Any = object.__new__(cls)
            for name, value in zip(names, values, strict=True):
                object.__setattr__(record, name, value)
            made.append(record)
        return made

    return build


def _positional(cls: type, count: int) -> bool:
    """Whether ``cls(*values)`` sets every field and does nothing else (a generated ``__init__``
    taking every field by position, no ``__post_init__``)."""
    init = getattr(cls, "__init__", None)
    code = getattr(init, "__code__", None)
    every = dataclasses.fields(cls)
    return (
        code is not None
        and code.co_filename.startswith("<")  # made by dataclasses, not written by hand
        and not hasattr(cls, "__post_init__")
        and all(f.init for f in every)
        and not code.co_kwonlyargcount
        and code.co_argcount == count + 1
    )


def _record_builder(layout: RecordLayout, cls: type) -> Callable[[Any], Any]:
    tag, names, kinds = layout.tag, layout.names, layout.kinds
    count = len(names)
    checks = tuple((i, k.accepts) for i, k in enumerate(kinds) if k.decode is None)
    converts = tuple((i, k.accepts, k.decode) for i, k in enumerate(kinds) if k.decode is not None)
    described = tuple(k.describe for k in kinds)
    positional = _positional(cls, count)
    new, assign = object.__new__, object.__setattr__
    valid: set[tuple[type, ...]] = set()
    """The field types of records found valid: one check of them all at once for most records. Only
    combinations of the annotated types get in, so it stays as small as the class allows."""

    def build(values: Any) -> Any:
        if type(values) is not list or len(values) != count:
            got = f"{len(values)} fields" if type(values) is list else _name(values)
            raise StateCodecError(tag, f"expected {count} fields ({', '.join(names)}), got {got}")
        signature = tuple(map(type, values))
        if signature not in valid:
            for index, accepts in checks:
                if signature[index] not in accepts:
                    value = values[index]
                    raise StateCodecError(f"{tag}.{names[index]}", f"expected {described[index]}, got {_name(value)}")
            if len(valid) < 4096:
                valid.add(signature)
        if converts:
            index = -1
            try:
                for index, accepts, decode in converts:
                    if signature[index] not in accepts:
                        values[index] = decode(values[index])
            except Invalid as error:
                raise StateCodecError(f"{tag}.{names[index]}{error.where}", error.reason) from None
        if positional:
            return cls(*values)
        made: Any = new(cls)
        for name, value in zip(names, values, strict=True):
            assign(made, name, value)
        return made

    return build


__all__ = ["Invalid", "Kind", "RecordLayout", "Registry", "read"]
