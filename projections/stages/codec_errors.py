"""What the stage codec raises when it cannot read a record: one typed error naming what is wrong.

Raised by ``projections.stages.codec`` and ``projections.stages.codec_types``; the faust host turns
one into a dead letter of a stage record (``reason_code`` and ``str(error)``, as for a public record),
and the read-model writer into a replay of the log. Pure.

Each error has the ``field`` it is about (``header.version``, ``JobView.status``, ``rows[3].item``) and
the ``reason``. Reading never executes anything: the codec only builds the registered types, so
whatever the bytes say ends in a value of those types or in one of these errors.
"""

from __future__ import annotations

from events.catalog.errors import MalformedRecord


class StateCodecError(MalformedRecord):
    """A stage record (an entity, a pack of stage inputs) that cannot be read, with where and why.

    A ``MalformedRecord`` of the event layer: dead letters carry its code, ``MalformedRecord``."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        # The event layer's message says "malformed record"; say which kind of record.
        self.args = (f"unreadable stage record: field {field!r}: {reason}",)


class UnknownFormat(StateCodecError):
    """Not a record of this codec, or one of a format version this reader does not know."""


class UnknownTypeTag(StateCodecError):
    """A type tag that is not in the registry: this reader builds no type it was not told of."""


class LayoutMismatch(StateCodecError):
    """A record written while a registered class had other fields (the layout fingerprints differ)."""


__all__ = ["LayoutMismatch", "StateCodecError", "UnknownFormat", "UnknownTypeTag"]
