"""JSON Schema of every event type and version, for integrators.

Called by ``fedsched events schema`` and by the tests. Pure: builds documents, writes nothing. Each
document is pydantic's validation schema of the payload (the CloudEvents ``data``) with an ``$id`` and a
title naming the type and version, and ``x-fedsched-*`` keys giving the topic and the partition key.
"""

from __future__ import annotations

from pydantic import JsonValue

from events.catalog.base import REGISTRY, Event

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def schema_id(cls: type[Event]) -> str:
    return f"urn:fedsched:schema:{cls.event_type}:v{cls.schema_version}"


def file_name(cls: type[Event]) -> str:
    """``io.fedsched.JobSubmitted.v1.json``."""
    return f"{cls.event_type}.v{cls.schema_version}.json"


def json_schema(cls: type[Event]) -> dict[str, JsonValue]:
    body: dict[str, JsonValue] = dict(cls.model_json_schema(mode="validation"))
    current = REGISTRY.get(cls.event_type).schema_version
    head: dict[str, JsonValue] = {
        "$schema": DIALECT,
        "$id": schema_id(cls),
        "title": f"{cls.event_type} v{cls.schema_version}",
        "description": cls.doc_line(),
        "x-fedsched-type": cls.event_type,
        "x-fedsched-schema-version": cls.schema_version,
        "x-fedsched-current": cls.schema_version == current,
        "x-fedsched-topic": cls.topic,
        "x-fedsched-key": cls.key_field,
    }
    body.pop("title", None)
    body.pop("description", None)
    return head | body


def all_schemas() -> dict[str, dict[str, JsonValue]]:
    """File name -> schema, for every declared type and version, in a stable order."""
    return {file_name(cls): json_schema(cls) for cls in REGISTRY.all_classes()}
