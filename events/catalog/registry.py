"""Type string -> event class, filled as catalogue modules are imported.

Called by ``events.catalog.base`` when a class is declared and by the codec when a record is read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from events.errors import UnknownEventType

if TYPE_CHECKING:
    from events.catalog.base import Event


class EventRegistry:
    """Holds each event class under its stable type string; two classes may not share one."""

    def __init__(self) -> None:
        self._by_type: dict[str, type[Event]] = {}

    def register(self, cls: type[Event]) -> None:
        existing = self._by_type.get(cls.event_type)
        if existing is not None and existing is not cls:
            raise TypeError(
                f"event type {cls.event_type!r} is declared twice: {existing.__qualname__} and {cls.__qualname__}"
            )
        self._by_type[cls.event_type] = cls

    def get(self, event_type: str) -> type[Event]:
        try:
            return self._by_type[event_type]
        except KeyError:
            raise UnknownEventType(event_type) from None

    def __contains__(self, event_type: object) -> bool:
        return event_type in self._by_type

    def types(self) -> list[str]:
        """Every registered type string, sorted (never in registration or hash order)."""
        return sorted(self._by_type)

    def classes(self) -> list[type[Event]]:
        return [self._by_type[name] for name in self.types()]


REGISTRY = EventRegistry()
