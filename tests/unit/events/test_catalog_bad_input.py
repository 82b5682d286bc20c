"""Bad input is refused with a typed error that names the field (as a dotted path) and the reason.

Consumers dead-letter such records with ``error.reason_code`` and ``str(error)``, so both must say
enough for a person to fix the producer without reading our code.
"""

from __future__ import annotations

import json

import pytest
from pydantic import JsonValue

from events.catalog import REGISTRY
from events.catalog.errors import EventError, InvalidEvent, MalformedRecord, UnknownEventType, UnsupportedSchemaVersion
from events.catalog.inventory import GpuHealthReported, NodeObserved
from events.catalog.jobs import JobStarted, JobSubmitted
from events.catalog.reasons import ReasonCode
from events.wire import codec
from events.wire.envelope import Envelope

from .catalog_samples import broken, envelope_for, payload, sample

pytestmark = pytest.mark.timeout(30)


def wire_of(event_type: str = "io.fedsched.JobSubmitted", /, **changes: str | None) -> codec.Headers:
    """The golden headers of a type's sample, with some changed (``None`` removes one)."""
    wire = codec.encode(envelope_for(sample(REGISTRY.get(event_type))))
    headers = dict(wire.headers)
    for name, value in changes.items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value.encode()
    return tuple(headers.items())


def decode(
    body: dict[str, JsonValue] | bytes, event_type: str = "io.fedsched.JobSubmitted", /, **headers: str | None
) -> Envelope:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return codec.decode(wire_of(event_type, **headers), raw)


def invalid(
    body: dict[str, JsonValue], event_type: str = "io.fedsched.JobSubmitted", /, **headers: str | None
) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as caught:
        decode(body, event_type, **headers)
    return caught.value


@pytest.mark.parametrize(
    ("path", "value", "field", "reason"),
    [
        ("resources.gpus", 65, "resources.gpus", "less than or equal to 64"),
        ("replicas", "2", "replicas", "valid integer"),
        ("replicas", 2.5, "replicas", "valid integer"),
        ("gang", 1, "gang", "valid boolean"),
        ("kind", "quantum", "kind", "'training'"),
        ("tenant", "ML Research", "tenant", "should match pattern"),
        ("resources.gpu_milli", 500, "resources", "exclusive"),
        ("max_runtime_s", 60, "data", "expected_runtime_s is more than max_runtime_s"),
        ("datasets", ["a", "a"], "datasets", "unique"),
        ("labels", {"Bad Key!": "x"}, "labels.Bad Key!.[key]", "should match pattern"),
        ("tolerations.0.effect", "Sometimes", "tolerations.0.effect", "'NoSchedule'"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_an_invalid_payload_names_the_dotted_field_and_the_reason(
    path: str, value: JsonValue, field: str, reason: str
) -> None:
    error = invalid(broken(JobSubmitted, path, value))
    assert error.field == field
    assert reason in error.reason
    assert error.event_type == "io.fedsched.JobSubmitted"
    assert f"field {field!r}" in str(error) and reason in str(error)
    assert error.reason_code == "InvalidEvent"


def test_an_error_inside_a_list_of_objects_names_the_item() -> None:
    error = invalid(broken(NodeObserved, "gpus.3.memory_mib", -1), "io.fedsched.NodeObserved")
    assert error.field == "gpus.3.memory_mib"
    assert "greater than or equal to 0" in error.reason


def test_devices_out_of_order_or_repeated_are_refused() -> None:
    gpus = payload(NodeObserved)["gpus"]
    assert isinstance(gpus, list)
    error = invalid({**payload(NodeObserved), "gpus": list(reversed(gpus))}, "io.fedsched.NodeObserved")
    assert (error.field, "increasing order" in error.reason) == ("gpus", True)
    error = invalid({**payload(NodeObserved), "gpus": [gpus[0], gpus[0]]}, "io.fedsched.NodeObserved")
    assert (error.field, "values of index must be unique" in error.reason) == ("gpus", True)


def test_the_reason_counts_the_other_failures() -> None:
    body = broken(JobSubmitted, "replicas", 0)
    body["gang"] = "yes"
    assert "(and 1 more error)" in invalid(body).reason


def test_an_extra_field_is_refused_by_name_at_any_depth() -> None:
    error = invalid({**payload(JobSubmitted), "priority": 7})
    assert (error.field, error.reason) == ("priority", "Extra inputs are not permitted")
    error = invalid(broken(JobSubmitted, "resources.tpus", 4))
    assert error.field == "resources.tpus"


def test_a_missing_required_field_is_named() -> None:
    body = payload(JobSubmitted)
    del body["tenant"]
    assert (invalid(body).field, invalid(body).reason) == ("tenant", "Field required")


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        ("job_id", "j" * 129, "at most 128 characters"),
        ("name", "n" * 257, "at most 256 characters"),
        ("datasets", [f"d{i}" for i in range(65)], "at most 64 items"),
        ("labels", {f"k{i}": "v" for i in range(65)}, "at most 64 items"),
        ("tolerations", [{"key": f"k{i}"} for i in range(33)], "at most 32 items"),
        ("template", {"blob": "x" * 70_000}, "more than the limit of 65536"),
        ("template", {"n": 2**60}, "integer beyond 2**53 - 1"),
    ],
    ids=lambda v: str(v)[:20],
)
def test_oversize_strings_lists_and_documents_are_refused(path: str, value: JsonValue, reason: str) -> None:
    error = invalid(broken(JobSubmitted, path, value))
    assert error.field == path
    assert reason in error.reason


def test_an_unknown_type_is_named() -> None:
    with pytest.raises(UnknownEventType) as caught:
        decode(payload(JobSubmitted), ce_type="io.fedsched.JobTeleported")
    assert "io.fedsched.JobTeleported" in str(caught.value)
    assert caught.value.reason_code == "UnknownEventType"


@pytest.mark.parametrize(
    ("event_type", "version"), [("io.fedsched.JobSubmitted", "3"), ("io.fedsched.GpuHealthReported", "4")]
)
def test_a_newer_schema_version_than_the_reader_knows_is_refused(event_type: str, version: str) -> None:
    body = payload(REGISTRY.get(event_type))
    with pytest.raises(UnsupportedSchemaVersion) as caught:
        decode(body, event_type, ce_schemaversion=version)
    error = caught.value
    assert (error.version, error.known) == (int(version), REGISTRY.get(event_type).schema_version)
    assert f"schema version {version}" in str(error) and event_type in str(error)


@pytest.mark.parametrize("version", ["0", "-1"])
def test_a_schema_version_below_one_is_refused(version: str) -> None:
    with pytest.raises(UnsupportedSchemaVersion):
        decode(payload(JobSubmitted), ce_schemaversion=version)


def test_a_schema_version_that_is_not_a_number_is_named() -> None:
    error = invalid(payload(JobSubmitted), ce_schemaversion="one")
    assert (error.field, "not an integer" in error.reason) == ("schemaversion", True)


def test_a_bare_payload_of_a_newer_version_is_refused_too() -> None:
    with pytest.raises(UnsupportedSchemaVersion):
        codec.decode_event("io.fedsched.JobStarted", 2, sample(JobStarted).model_dump_json().encode())


def test_an_old_record_that_is_invalid_is_named_in_its_own_version_s_terms() -> None:
    body: dict[str, JsonValue] = {"cluster": "c1", "node": "n1", "gpus": [{"index": 0, "health": "ok", "errors": -4}]}
    error = invalid(body, "io.fedsched.GpuHealthReported", ce_schemaversion="1")
    assert error.field == "gpus.0.errors"
    assert "(in a v1 record)" in error.reason


@pytest.mark.parametrize("body", [b"\xff not json", b'{"job_id": ', b"", b"nul\x00l"])
def test_a_body_that_is_not_json_is_a_malformed_record(body: bytes) -> None:
    with pytest.raises(MalformedRecord) as caught:
        decode(body)
    assert caught.value.field == "data"
    assert "not JSON" in caught.value.reason
    with pytest.raises(MalformedRecord):  # the same through the upcasting path
        decode(body, "io.fedsched.GpuHealthReported", ce_schemaversion="1")


@pytest.mark.parametrize("body", [b"[]", b"42", b"null", b'"text"'])
def test_a_json_body_that_is_not_an_object_is_named_as_data(body: bytes) -> None:
    with pytest.raises(InvalidEvent) as caught:
        decode(body)
    assert caught.value.field == "data"


@pytest.mark.parametrize("header", ["ce_id", "ce_source", "ce_type", "ce_specversion", "ce_time"])
def test_a_missing_required_ce_header_is_named(header: str) -> None:
    with pytest.raises(MalformedRecord) as caught:
        decode(payload(JobSubmitted), **{header: None})
    assert caught.value.field == header
    assert "missing" in caught.value.reason


def test_a_missing_schema_version_header_means_the_current_version() -> None:
    envelope = decode(payload(JobSubmitted), ce_schemaversion=None)
    assert envelope.data == sample(JobSubmitted)


@pytest.mark.parametrize(
    ("header", "value", "field"),
    [("ce_specversion", "0.3", "ce_specversion"), ("ce_time", "yesterday", "time"), ("ce_id", "has space", "id")],
)
def test_bad_envelope_attributes_are_named(header: str, value: str, field: str) -> None:
    with pytest.raises(EventError) as caught:
        decode(payload(JobSubmitted), **{header: value})
    assert caught.value.field == field  # type: ignore[attr-defined]


def test_a_header_that_is_not_utf8_is_named() -> None:
    headers = (*wire_of(), ("ce_subject", b"\xff\xfe"))
    with pytest.raises(MalformedRecord) as caught:
        codec.decode(headers, json.dumps(payload(JobSubmitted)).encode())
    assert caught.value.field == "ce_subject"


def test_an_envelope_cannot_be_built_around_a_bad_id() -> None:
    with pytest.raises(InvalidEvent) as caught:
        Envelope(id="", time_ms=0, data=sample(JobStarted))
    assert caught.value.field == "id"


def test_every_event_layer_error_code_is_in_the_wire_vocabulary() -> None:
    for error in (EventError, InvalidEvent, UnknownEventType, UnsupportedSchemaVersion, MalformedRecord):
        assert ReasonCode(error.reason_code).value == error.reason_code


def test_a_health_report_needs_at_least_one_gpu_or_npu() -> None:
    error = invalid({**payload(GpuHealthReported), "gpus": [], "npus": []}, "io.fedsched.GpuHealthReported")
    assert "at least one GPU or NPU" in error.reason and "gpus, npus" in str(error)
    # NPUs alone are a report.
    decode_ok = {**payload(GpuHealthReported), "gpus": []}
    assert decode_ok["npus"]
