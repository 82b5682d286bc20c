"""The base of every event in the catalogue.

Called by every catalogue module (to declare events) and by the codec (to find a class by its type
string). Imports nothing outside pydantic, the standard library and the topic catalogue: this module is
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

from events.catalog.registry import REGISTRY
from events.catalog.topics import topic as topic_spec

_TYPE_RE = re.compile(r"^io\.fedsched\.[A-Z][A-Za-z0-9]{1,95}\Z")


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
