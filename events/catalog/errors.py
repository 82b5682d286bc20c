"""Typed errors of the event layer, each naming what was wrong and why.

Raised by the codec, the registry and the upcasters; consumers turn them into dead-letter records
whose reason is ``str(error)``.
"""

from __future__ import annotations


class EventError(Exception):
    """Base of every error about an event that could not be read or written."""

    reason_code: str = "InvalidEvent"


class InvalidEvent(EventError):
    """A payload or envelope attribute failed validation. ``field`` is a dotted path."""

    reason_code = "InvalidEvent"

    def __init__(self, event_type: str, field: str, reason: str) -> None:
        self.event_type = event_type
        self.field = field
        self.reason = reason
        super().__init__(f"{event_type}: field {field!r}: {reason}")


class UnknownEventType(EventError):
    reason_code = "UnknownEventType"

    def __init__(self, event_type: str) -> None:
        self.event_type = event_type
        super().__init__(f"unknown event type {event_type!r}: not in the catalogue")


class UnsupportedSchemaVersion(EventError):
    """The record was written by a newer producer than this reader knows, or has no upcaster path."""

    reason_code = "UnsupportedSchemaVersion"

    def __init__(self, event_type: str, version: int, known: int) -> None:
        self.event_type = event_type
        self.version = version
        self.known = known
        super().__init__(
            f"{event_type}: schema version {version} is not supported by this reader (it knows up to {known})"
        )


class MalformedRecord(EventError):
    """The bytes on the log are not a CloudEvent at all (bad JSON, missing required header)."""

    reason_code = "MalformedRecord"

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"malformed record: field {field!r}: {reason}")
