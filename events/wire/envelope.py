"""The envelope around every event: CloudEvents 1.0 attributes plus our extensions.

Called by producers (the API, connectors, the scheduler host) to wrap an event and by the codec to
carry what it read. The envelope is the only thing ever published. Its attributes are plain data
given by the caller: the time and the id come from the host (clock, id generator) or are derived from
inputs in the pure core, never generated here.

Extension attribute names follow CloudEvents' rule (lowercase letters and digits only): ``tenant``,
``correlationid``, ``causationid`` and ``schemaversion``.

``Latest`` says which of the reports about one entity is in force, for the consumers that keep the
latest report of an entity (a node's GPU health, a cluster's status, a queue's quota): the one with the
latest time, and of several at one millisecond the last read; an envelope whose id is already in force
is the same event again (a producer's retry, a connector re-publishing after a restart) and changes
nothing, however many other records came between.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import NamedTuple, TypeVar

from events.catalog.base import Event
from events.catalog.errors import InvalidEvent

SPEC_VERSION = "1.0"
CONTENT_TYPE = "application/json"
DEFAULT_SOURCE = "urn:fedsched"
#: 9999-12-31T23:59:59.999Z, the last moment RFC 3339 can write.
MAX_TIME_MS = 253_402_300_799_999

_ATTR_LIMIT = 256
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}$")


@dataclass(frozen=True, slots=True)
class Envelope:
    """One event with its CloudEvents context. ``time_ms`` is milliseconds since the epoch (UTC)."""

    id: str
    time_ms: int
    data: Event
    source: str = DEFAULT_SOURCE
    subject: str | None = None
    tenant: str | None = None
    correlation_id: str | None = None
    causation_id: str | None = None
    schema_version: int = field(default=0)

    def __post_init__(self) -> None:
        event_type = self.data.event_type
        if not _ID_RE.fullmatch(self.id):
            raise InvalidEvent(event_type, "id", "must be 1-256 characters of letters, digits and ._:/@+-")
        if not (0 <= self.time_ms <= MAX_TIME_MS):
            raise InvalidEvent(event_type, "time", "must be milliseconds since the epoch, up to the year 9999")
        for name in ("source", "subject", "tenant", "correlation_id", "causation_id"):
            value = getattr(self, name)
            if value is not None and (not value or len(value) > _ATTR_LIMIT):
                raise InvalidEvent(event_type, name, f"must be 1-{_ATTR_LIMIT} characters when given")
        if self.schema_version == 0:
            object.__setattr__(self, "schema_version", self.data.schema_version)

    @property
    def type(self) -> str:
        return self.data.event_type

    @property
    def time_rfc3339(self) -> str:
        return format_time(self.time_ms)

    def caused(self, data: Event, *, id: str, time_ms: int, source: str | None = None) -> Envelope:
        """An envelope for an event caused by this one: same correlation, causation = this id."""
        return Envelope(
            id=id,
            time_ms=time_ms,
            data=data,
            source=source or self.source,
            subject=data.partition_key(),
            tenant=self.tenant,
            correlation_id=self.correlation_id or self.id,
            causation_id=self.id,
        )

    def with_data(self, data: Event) -> Envelope:
        return replace(self, data=data, schema_version=data.schema_version)


LATEST_IDS = 8
"""How many envelope ids of one millisecond ``Latest`` remembers (more reports of one entity in one
millisecond than that are not expected; a repeat of one forgotten would be applied again)."""


Place = TypeVar("Place", int, str)


def mark_after(
    mark: tuple[Place, tuple[str, ...]], place: Place, event_id: str
) -> tuple[Place, tuple[str, ...]] | None:
    """Last-writer-wins by an order of reports (a time, or the scheduler's cycle id): ``mark`` is the place
    of the report in force and the ids applied there. The mark once the report (``place``, ``event_id``)
    is applied, or None when it must not be: it comes before the one in force, or it was applied already."""
    at: Place = mark[0]
    ids: tuple[str, ...] = mark[1]
    if place > at:
        return place, (event_id,)
    if place < at or event_id in ids:
        return None
    return at, (*ids, event_id)[-LATEST_IDS:]


class Latest(NamedTuple):
    """The report in force for one entity: its time, and the ids of the envelopes applied at that time
    (in the order read). ``Latest()`` is before every report. A named tuple: consumers keep one per
    entity and make a new one per report applied."""

    time_ms: int = -1
    ids: tuple[str, ...] = ()

    def after(self, time_ms: int, event_id: str) -> Latest | None:
        """The stamp once the envelope (``time_ms``, ``event_id``) is applied; None when it must not be:
        it is older than the report in force, or it is a report already applied at that time."""
        made = mark_after((self.time_ms, self.ids), time_ms, event_id)
        return None if made is None else Latest(*made)


def format_time(time_ms: int) -> str:
    """RFC 3339 in UTC with millisecond precision, e.g. ``2026-12-02T13:00:00.123Z``."""
    moment = datetime.fromtimestamp(time_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{time_ms % 1000:03d}Z"


def parse_time(text: str) -> int:
    """RFC 3339 text to epoch milliseconds; raises ValueError with the reason."""
    normalised = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    moment = datetime.fromisoformat(normalised)
    if moment.tzinfo is None:
        raise ValueError("time has no UTC offset")
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
