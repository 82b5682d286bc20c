"""Type string -> event class, filled as catalogue modules are imported.

Called by ``events.catalog.base`` when a class is declared and by the codec when a record is read. Each
type may have several versions declared (the current one and superseded ones kept for their schema):
``get`` and ``classes`` answer with the current (highest) version, ``get_version`` and ``all_classes``
reach the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from events.catalog.errors import UnknownEventType, UnsupportedSchemaVersion

if TYPE_CHECKING:
    from events.catalog.base import Event


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
