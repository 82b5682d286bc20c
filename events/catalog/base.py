"""The base of every event in the catalogue.

Called by every catalogue module (to declare events) and by the codec (to find a class by its type
string). Imports nothing outside pydantic and the standard library: this module is part of the pure
core, so it never reads the clock, randomness or the environment.

An event class declares two class variables:

- ``event_type``: the stable type string written on the wire (CloudEvents ``type``). It is never the
  module path, so classes can move and be renamed without breaking years of history.
- ``schema_version``: bumped whenever the payload changes shape; older payloads are brought forward by
  upcasters (``events.catalog.upcasters``) before validation.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from events.catalog.registry import REGISTRY


class Event(BaseModel):
    """A fact (or a request) recorded in the log. Frozen, strict and closed to unknown fields."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        str_strip_whitespace=False,
        validate_default=True,
    )

    event_type: ClassVar[str]
    schema_version: ClassVar[int]
    #: Name of the field whose value is the partition key (for example ``job_id``).
    key_field: ClassVar[str | None] = None
    #: Name of the topic (from ``events.topics``) this event is published to.
    topic: ClassVar[str]

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "event_type" in cls.__dict__:
            REGISTRY.register(cls)

    def partition_key(self) -> str | None:
        """The value that decides the partition: events with the same key keep their order."""
        if self.key_field is None:
            return None
        value = getattr(self, self.key_field)
        return None if value is None else str(value)
