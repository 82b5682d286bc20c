"""Envelope <-> log record, in the CloudEvents Kafka protocol binding (binary content mode).

Called by every producer and consumer. Attributes travel as ``ce_*`` headers, the event data as the
JSON body, the partition key as the record key: any CloudEvents SDK can read our topics. Pure: no I/O.

Reading brings older schema versions forward through the upcasters, refuses newer ones and unknown
types, and turns every validation failure into an ``InvalidEvent`` that names the field and the reason.

Given the record's time in the log (Kafka's record timestamp, the embedded log's append time) and a
``TimeSkew``, reading also refuses an event whose own time lies further from it than the skew allows
(field ``time``): a producer's clock gone wrong, or a hostile year 9999, never reaches a consumer's
state. The consumers' one way in is ``events.log.reading.decode_record``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pydantic import ValidationError

from events import catalog
from events.catalog.base import REGISTRY, Event
from events.catalog.errors import EventError, InvalidEvent, MalformedRecord, UnsupportedSchemaVersion
from events.catalog.topics import topic
from events.catalog.upcasters import upcast
from events.wire.envelope import CONTENT_TYPE, SPEC_VERSION, Envelope, format_time, parse_time

Headers = tuple[tuple[str, bytes], ...]

_REQUIRED = ("ce_id", "ce_source", "ce_type", "ce_specversion", "ce_time")
_OPTIONAL = {
    "ce_subject": "subject",
    "ce_tenant": "tenant",
    "ce_correlationid": "correlation_id",
    "ce_causationid": "causation_id",
}

assert catalog  # the import registers every event class


@dataclass(frozen=True, slots=True)
class WireRecord:
    """What a producer writes: topic, key, value and headers. The partition is the log's choice."""

    topic: str
    key: bytes | None
    value: bytes
    headers: Headers


def encode(envelope: Envelope) -> WireRecord:
    event = envelope.data
    headers: list[tuple[str, bytes]] = [
        ("ce_specversion", SPEC_VERSION.encode()),
        ("ce_id", envelope.id.encode()),
        ("ce_source", envelope.source.encode()),
        ("ce_type", event.event_type.encode()),
        ("ce_time", _time_header(envelope.time_ms)),
        ("ce_schemaversion", str(event.schema_version).encode()),
        ("content-type", CONTENT_TYPE.encode()),
    ]
    for header, attribute in _OPTIONAL.items():
        value = getattr(envelope, attribute)
        if value is not None:
            headers.append((header, value.encode()))
    key = event.partition_key()
    return WireRecord(
        topic=event.topic,
        key=None if key is None else key.encode(),
        value=event.model_dump_json().encode(),
        headers=tuple(headers),
    )


_DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class TimeSkew:
    """How far an event's own time may lie from its record's time in the log, each way (None: no
    bound that way). The default allows a day ahead (clocks out of step, a cluster's connector catching
    up) and ten years behind (history imported late)."""

    ahead_ms: int | None = _DAY_MS
    behind_ms: int | None = 3650 * _DAY_MS

    def __post_init__(self) -> None:
        for name in ("ahead_ms", "behind_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be 0 or more (or None: unbounded), got {value}")

    def problem(self, time_ms: int, log_time_ms: int) -> str | None:
        """Why ``time_ms`` is too far from ``log_time_ms``, or None when it is within the skew."""
        ahead = time_ms - log_time_ms
        if self.ahead_ms is not None and ahead > self.ahead_ms:
            return f"{ahead // 1000} s ahead of the log's time, more than the allowed skew of {self.ahead_ms // 1000} s"
        if self.behind_ms is not None and -ahead > self.behind_ms:
            return f"{-ahead // 1000} s behind the log's time, more than the allowed skew of {self.behind_ms // 1000} s"
        return None


DEFAULT_SKEW = TimeSkew()
UNCHECKED = TimeSkew(None, None)
"""No bound either way: for a log whose producers run on a simulated clock faster than the log's."""

_DURATION = re.compile(r"^(\d{1,12})([smhd])$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": _DAY_MS}


def parse_skew(text: str) -> TimeSkew:
    """A skew from its configuration text: ``off``, or ``AHEAD[,BEHIND]`` where each is a number with a
    unit (``s``, ``m``, ``h``, ``d``) or ``none`` (unbounded that way); a missing BEHIND keeps the default.
    Raises ValueError naming what is wrong."""
    text = text.strip().lower()
    if text == "off":
        return UNCHECKED
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 2:
        raise ValueError(f"time skew {text!r}: at most two durations, AHEAD,BEHIND")
    bounds = [_duration(part) for part in parts]
    return TimeSkew(bounds[0], bounds[1] if len(bounds) == 2 else DEFAULT_SKEW.behind_ms)


def _duration(text: str) -> int | None:
    if text == "none":
        return None
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"time skew: {text!r} is not a duration such as 90s, 30m, 24h, 3650d or none")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def check_time(envelope: Envelope, log_time_ms: int, skew: TimeSkew) -> None:
    """Raise ``InvalidEvent`` (field ``time``) when the envelope's time is further from the record's
    time in the log than ``skew`` allows. A record with no time in the log (0 or less: one not read
    from a log, or a Kafka record written without a timestamp) is not checked."""
    if log_time_ms > 0:
        problem = skew.problem(envelope.time_ms, log_time_ms)
        if problem is not None:
            raise InvalidEvent(envelope.type, "time", problem)


def decode(headers: Headers, value: bytes, *, log_time_ms: int = 0, skew: TimeSkew | None = None) -> Envelope:
    """Read one record. Raises an ``EventError`` subclass naming the field and the reason. With a
    ``skew``, an event time too far from ``log_time_ms`` (the record's time in the log) is refused too."""
    attrs = _header_map(headers)
    for name in _REQUIRED:
        if name not in attrs:
            raise MalformedRecord(name, "required CloudEvents header is missing")
    if attrs["ce_specversion"] != SPEC_VERSION:
        raise MalformedRecord("ce_specversion", f"must be {SPEC_VERSION}, got {attrs['ce_specversion']!r}")
    event_type = attrs["ce_type"]
    schema_version = attrs.get("ce_schemaversion")
    if _TYPES_AS_OF[0] != REGISTRY.changes:
        _TYPES.clear()
        _TYPES_AS_OF[0] = REGISTRY.changes
    known = _TYPES.get((event_type, schema_version))
    if known is None:
        cls = REGISTRY.get(event_type)
        version = _schema_version(event_type, schema_version)
        if len(_TYPES) < _CACHE_LIMIT:
            _TYPES[(event_type, schema_version)] = (cls, version)
    else:
        cls, version = known
    data = _validate(cls, version, value)
    text = attrs["ce_time"]
    time_ms = _TIMES.get(text)
    if time_ms is None:
        try:
            time_ms = parse_time(text)
        except ValueError as error:
            raise InvalidEvent(event_type, "time", f"not an RFC 3339 timestamp: {error}") from None
        if len(_TIMES) >= _CACHE_LIMIT:
            _TIMES.clear()
        _TIMES[text] = time_ms
    envelope = Envelope(
        id=attrs["ce_id"],
        time_ms=time_ms,
        data=data,
        source=attrs["ce_source"],
        subject=attrs.get("ce_subject"),
        tenant=attrs.get("ce_tenant"),
        correlation_id=attrs.get("ce_correlationid"),
        causation_id=attrs.get("ce_causationid"),
    )
    if skew is not None:
        check_time(envelope, log_time_ms, skew)
    return envelope


# Memos of pure functions of their keys (a record's time repeats across the events of one cycle or
# batch; a type and version across nearly all records), bounded so a hostile log cannot grow them.
_CACHE_LIMIT = 4096
_TYPES: dict[tuple[str, str | None], tuple[type[Event], int]] = {}
_TYPES_AS_OF = [-1]  # the registry's changes count _TYPES was filled at
_TIMES: dict[str, int] = {}
_TIME_HEADERS: dict[int, bytes] = {}


def _time_header(time_ms: int) -> bytes:
    header = _TIME_HEADERS.get(time_ms)
    if header is None:
        header = format_time(time_ms).encode()
        if len(_TIME_HEADERS) >= _CACHE_LIMIT:
            _TIME_HEADERS.clear()
        _TIME_HEADERS[time_ms] = header
    return header


def decode_event(event_type: str, version: int, value: bytes) -> Event:
    """Validate a bare payload of a given type and version (used by golden fixtures and the intake)."""
    return _validate(REGISTRY.get(event_type), _schema_version(event_type, str(version)), value)


def _header_map(headers: Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, raw in headers:
        try:
            out[name] = raw.decode()
        except UnicodeDecodeError:
            raise MalformedRecord(name, "header value is not UTF-8") from None
    return out


def _schema_version(event_type: str, text: str | None) -> int:
    current = REGISTRY.get(event_type).schema_version
    if text is None:
        return current
    try:
        version = int(text)
    except ValueError:
        raise InvalidEvent(event_type, "schemaversion", f"not an integer: {text!r}") from None
    if version < 1 or version > current:
        raise UnsupportedSchemaVersion(event_type, version, current)
    return version


def _validate(cls: type[Event], version: int, value: bytes) -> Event:
    if version != cls.schema_version:
        value = _upcast(cls, version, value)
    try:
        return cls.model_validate_json(value)
    except ValidationError as error:
        raise invalid_event(cls.event_type, error) from None


def _upcast(cls: type[Event], version: int, value: bytes) -> bytes:
    """An older version's body, checked against that version's own class, brought to the current one."""
    try:
        old = REGISTRY.get_version(cls.event_type, version)
    except UnsupportedSchemaVersion:
        old = None  # no class kept for that version: the upcasters alone bring it forward
    if old is not None:
        try:
            payload: object = old.model_validate_json(value).model_dump(mode="json")
        except ValidationError as error:
            raise invalid_event(cls.event_type, error, version) from None
    else:
        try:
            payload = json.loads(value)
        except ValueError as error:
            raise MalformedRecord("data", f"body is not JSON: {error}") from None
    if not isinstance(payload, dict):
        raise InvalidEvent(cls.event_type, "data", "body must be a JSON object")
    return json.dumps(upcast(cls.event_type, version, cls.schema_version, payload)).encode()


def invalid_event(event_type: str, error: ValidationError, version: int | None = None) -> EventError:
    """The first validation failure, with its dotted field path and the reason, as an ``EventError``.

    A body that is not JSON at all is a ``MalformedRecord``; anything else an ``InvalidEvent``. The
    reason says how many other failures there were and, for an old record, which version it was.
    """
    errors = error.errors(include_url=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        return MalformedRecord("data", f"body is not JSON: {first['msg']}")
    path = ".".join(str(part) for part in first["loc"]) or "data"
    reason = first["msg"]
    if version is not None:
        reason += f" (in a v{version} record)"
    if len(errors) > 1:
        reason += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return InvalidEvent(event_type, path, reason)


def topic_of(envelope: Envelope) -> str:
    return topic(envelope.data.topic).name
