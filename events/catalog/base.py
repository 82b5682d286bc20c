"""The base of every event in the catalogue, and the registry every event class is entered in.

Called by every catalogue module (to declare events) and by the codec (to find a class by its type
string in ``REGISTRY``). Imports nothing outside pydantic, the standard library and the topic catalogue: this module is
part of the pure core, so it never reads the clock, randomness or the environment.

An event class declares four class variables, checked when the class is declared:

- ``event_type``: the stable type string written on the wire (CloudEvents ``type``), ``io.fedsched.``
  plus a PascalCase name. It is never the module path, so classes can move and be renamed without
  breaking years of history.
- ``schema_version``: bumped whenever the payload changes shape; older payloads are brought forward by
  upcasters (``events.catalog.upcasters``) before validation. A superseded version stays declared as a
  class of its own (``events.catalog.legacy``) so its schema and golden fixture stay checkable.
- ``topic``: the name of its topic in ``events.catalog.topics``.
- ``key_field``: the field whose value is the partition key, or several joined by ``/`` (for example
  ``cluster/node``: the key is ``"<cluster>/<node>"``, leaving out parts that are ``None``).

``retired_fields`` lists dotted paths of fields that earlier versions had: they stay reserved, and a test
fails if a current field takes one of their names.
"""

from __future__ import annotations

import functools
import re
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from events.catalog.errors import UnknownEventType, UnsupportedSchemaVersion
from events.catalog.topics import topic as topic_spec

_TYPE_RE = re.compile(r"^io\.fedsched\.[A-Z][A-Za-z0-9]{1,95}\Z")


class EventRegistry:
    """Holds each event class under its stable type string and version; two may not share both."""

    def __init__(self) -> None:
        self._by_type: dict[str, dict[int, type[Event]]] = {}
        self.changes = 0
        """Bumped by every registration, so a memo of lookups knows when to start over."""

    def register(self, cls: type[Event]) -> None:
        versions = self._by_type.setdefault(cls.event_type, {})
        existing = versions.get(cls.schema_version)
        if existing is not None and existing is not cls:
            raise TypeError(
                f"event type {cls.event_type!r} v{cls.schema_version} is declared twice: "
                f"{existing.__qualname__} and {cls.__qualname__}"
            )
        versions[cls.schema_version] = cls
        self.changes += 1

    def get(self, event_type: str) -> type[Event]:
        """The current version's class of a type."""
        try:
            versions = self._by_type[event_type]
        except KeyError:
            raise UnknownEventType(event_type) from None
        return versions[max(versions)]

    def get_version(self, event_type: str, version: int) -> type[Event]:
        """The class that declares one version of a type (current or superseded)."""
        versions = self._by_type.get(event_type)
        if versions is None:
            raise UnknownEventType(event_type)
        if version not in versions:
            raise UnsupportedSchemaVersion(event_type, version, max(versions))
        return versions[version]

    def versions(self, event_type: str) -> list[int]:
        """Every declared version of a type, oldest first."""
        self.get(event_type)
        return sorted(self._by_type[event_type])

    def __contains__(self, event_type: object) -> bool:
        return event_type in self._by_type

    def types(self) -> list[str]:
        """Every registered type string, sorted (never in registration or hash order)."""
        return sorted(self._by_type)

    def classes(self) -> list[type[Event]]:
        """The current class of every type, sorted by type string."""
        return [self.get(name) for name in self.types()]

    def all_classes(self) -> list[type[Event]]:
        """Every declared class, current and superseded, sorted by type string then version."""
        return [self._by_type[name][v] for name in self.types() for v in sorted(self._by_type[name])]


REGISTRY = EventRegistry()
"""Type string -> event class, filled as catalogue modules are imported (each type may have several
versions declared: ``get`` and ``classes`` answer with the current one, ``get_version`` and
``all_classes`` reach the others)."""


class Event(BaseModel):
    """A fact (or a request) recorded in the log. Frozen, strict and closed to unknown fields."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        str_strip_whitespace=False,
        validate_default=True,
        use_attribute_docstrings=True,
    )

    event_type: ClassVar[str]
    schema_version: ClassVar[int]
    key_field: ClassVar[str | None] = None
    """Name of the field whose value is the partition key (``a/b`` joins several fields)."""
    topic: ClassVar[str]
    """Name of the topic (from ``events.catalog.topics``) this event is published to."""
    retired_fields: ClassVar[tuple[str, ...]] = ()
    """Dotted paths of fields earlier versions had; never reused with another meaning."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: object) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "event_type" in cls.__dict__:
            cls._check_declaration()
            REGISTRY.register(cls)

    @classmethod
    def _check_declaration(cls) -> None:
        name = cls.__qualname__
        if not _TYPE_RE.match(cls.event_type):
            raise TypeError(f"{name}: event_type {cls.event_type!r} must be io.fedsched.<PascalCaseName>")
        version = cls.__dict__.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise TypeError(f"{name}: schema_version must be declared on the class as an integer >= 1")
        topic_spec(cls.topic)  # raises KeyError naming the known topics
        for part in cls.key_parts():
            if part not in cls.model_fields:
                raise TypeError(f"{name}: key_field part {part!r} is not a field")

    @classmethod
    def key_parts(cls) -> tuple[str, ...]:
        return () if cls.key_field is None else tuple(cls.key_field.split("/"))

    @classmethod
    def doc_line(cls) -> str:
        """The first line of the class docstring (what the event says happened), as plain text."""
        lines = (cls.__doc__ or "").strip().splitlines()
        return lines[0].strip().replace("``", "") if lines else ""

    def partition_key(self) -> str | None:
        """The value that decides the partition: events with the same key keep their order."""
        values = [getattr(self, part) for part in self.key_parts()]
        present = [str(value) for value in values if value is not None]
        return "/".join(present) if present else None


@functools.cache
def has_field(kind: type[Event], name: str) -> bool:
    """Whether events of ``kind`` carry the field ``name``. Asked per class once by the folds that read
    a field some events have (``getattr`` with a default on a pydantic model that lacks the field goes
    through its slow ``__getattr__`` fallback)."""
    return name in kind.model_fields
