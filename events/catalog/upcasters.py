"""Pure functions that bring an older payload of an event type forward one schema version.

Called by the codec before validation. Each upcaster takes the JSON object of version N and returns
the object of version N+1; a chain takes any old version to the current one. Retired fields are
dropped here, never reused with another meaning. Upcasters live next to the superseded class they read
(``events.catalog.legacy``); they must be pure and must leave a value they cannot interpret in place, so
that validation, not the upcaster, reports what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import JsonValue

from events.catalog.errors import UnsupportedSchemaVersion

Payload = dict[str, JsonValue]
Upcaster = Callable[[Payload], Payload]

#: (event type, from version) -> function producing from version + 1
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    def register(fn: Upcaster) -> Upcaster:
        key = (event_type, from_version)
        if key in UPCASTERS:
            raise TypeError(f"two upcasters for {event_type} v{from_version}")
        UPCASTERS[key] = fn
        return fn

    return register


def upcast(event_type: str, version: int, target: int, payload: Payload) -> Payload:
    while version < target:
        step = UPCASTERS.get((event_type, version))
        if step is None:
            raise UnsupportedSchemaVersion(event_type, version, target)
        payload = step(dict(payload))
        version += 1
    return payload
