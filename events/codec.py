"""Envelope <-> log record, in the CloudEvents Kafka protocol binding (binary content mode).

Called by every producer and consumer. Attributes travel as ``ce_*`` headers, the event data as the
JSON body, the partition key as the record key: any CloudEvents SDK can read our topics. Pure: no I/O.

Reading brings older schema versions forward through the upcasters, refuses newer ones and unknown
types, and turns every validation failure into an ``InvalidEvent`` that names the field and the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from events import catalog
from events.catalog.base import Event
from events.catalog.registry import REGISTRY
from events.catalog.upcasters import upcast
from events.envelope import CONTENT_TYPE, SPEC_VERSION, Envelope, format_time, parse_time
from events.errors import InvalidEvent, MalformedRecord, UnsupportedSchemaVersion
from events.topics import topic

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
        ("ce_time", format_time(envelope.time_ms).encode()),
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


def decode(headers: Headers, value: bytes) -> Envelope:
    """Read one record. Raises an ``EventError`` subclass naming the field and the reason."""
    attrs = _header_map(headers)
    for name in _REQUIRED:
        if name not in attrs:
            raise MalformedRecord(name, "required CloudEvents header is missing")
    if attrs["ce_specversion"] != SPEC_VERSION:
        raise MalformedRecord("ce_specversion", f"must be {SPEC_VERSION}, got {attrs['ce_specversion']!r}")
    event_type = attrs["ce_type"]
    cls = REGISTRY.get(event_type)
    version = _schema_version(event_type, attrs.get("ce_schemaversion"))
    data = _validate(cls, version, value)
    try:
        time_ms = parse_time(attrs["ce_time"])
    except ValueError as error:
        raise InvalidEvent(event_type, "time", f"not an RFC 3339 timestamp: {error}") from None
    optional = {attribute: attrs.get(header) for header, attribute in _OPTIONAL.items()}
    return Envelope(id=attrs["ce_id"], time_ms=time_ms, data=data, source=attrs["ce_source"], **optional)


def decode_event(event_type: str, version: int, value: bytes) -> Event:
    """Validate a bare payload of a given type and version (used by golden fixtures and the intake)."""
    return _validate(REGISTRY.get(event_type), version, value)


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
        try:
            payload: Any = json.loads(value)
        except ValueError as error:
            raise MalformedRecord("data", f"body is not JSON: {error}") from None
        if not isinstance(payload, dict):
            raise InvalidEvent(cls.event_type, "data", "body must be a JSON object")
        value = json.dumps(upcast(cls.event_type, version, cls.schema_version, payload)).encode()
    try:
        return cls.model_validate_json(value)
    except ValidationError as error:
        raise invalid_event(cls.event_type, error) from None


def invalid_event(event_type: str, error: ValidationError) -> InvalidEvent:
    """The first validation failure, with its dotted field path, as an ``InvalidEvent``."""
    first = error.errors(include_url=False)[0]
    path = ".".join(str(part) for part in first["loc"]) or "data"
    if first["type"] == "json_invalid":
        path = "data"
    return InvalidEvent(event_type, path, first["msg"])


def topic_of(envelope: Envelope) -> str:
    return topic(envelope.data.topic).name
