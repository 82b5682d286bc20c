"""Golden fixtures: every type and version has one, each still decodes, and current ones re-encode exactly.

An accidental change of a schema (a renamed field, a new default, a changed order) fails here loudly.
A deliberate change means a new schema version with an upcaster, or, for a type not yet released, a
rewritten fixture. Fixtures live in ``tests/golden/events/<type>/v<N>.json`` (the body, byte for byte)
and ``v<N>.headers.json`` (topic, key and ``ce_*`` headers). To write fixtures on purpose, from the
repository root:

    python -m tests.unit.events.catalog_golden                  # the missing ones only
    python -m tests.unit.events.catalog_golden --force TYPE...  # rewrite these types' current version
"""

from __future__ import annotations

import json

import pytest

from events.catalog import REGISTRY, Event
from events.catalog.decisions import JobQueued
from events.catalog.inventory import GpuHealthReported, GpuHealthSample
from events.catalog.legacy import queued_v1_to_v2
from events.catalog.pending_reasons import PendingReason
from events.catalog.profiles import ResourceProfileUpdated
from events.catalog.types import ClusterId, Health, NodeId
from events.wire import codec

from .catalog_golden import GOLDEN_DIR, body_path, headers_path, read, wire_files, wire_headers
from .catalog_samples import envelope_for

pytestmark = [pytest.mark.golden, pytest.mark.timeout(30)]

DECLARED = [(cls.event_type, cls.schema_version) for cls in REGISTRY.all_classes()]
IDS = [f"{t}.v{v}" for t, v in DECLARED]


@pytest.mark.parametrize(("event_type", "version"), DECLARED, ids=IDS)
def test_every_declared_type_and_version_has_a_golden_fixture(event_type: str, version: int) -> None:
    assert body_path(event_type, version).is_file(), "write it: python -m tests.unit.events.catalog_golden"
    assert headers_path(event_type, version).is_file()


def test_no_fixture_is_left_without_a_declared_type_and_version() -> None:
    expected = {body_path(t, v) for t, v in DECLARED} | {headers_path(t, v) for t, v in DECLARED}
    found = {path for path in GOLDEN_DIR.rglob("*") if path.is_file()}
    assert sorted(found - expected) == []


@pytest.mark.parametrize(("event_type", "version"), DECLARED, ids=IDS)
def test_every_golden_fixture_decodes_through_the_codec(event_type: str, version: int) -> None:
    body, meta = read(event_type, version)
    headers = dict(wire_headers(meta))
    assert headers["ce_type"].decode() == event_type
    assert headers["ce_schemaversion"].decode() == str(version)
    envelope = codec.decode(wire_headers(meta), body)
    assert envelope.type == event_type
    assert envelope.schema_version == REGISTRY.get(event_type).schema_version
    assert meta["topic"] == envelope.data.topic


@pytest.mark.parametrize(("event_type", "version"), DECLARED, ids=IDS)
def test_every_golden_body_still_matches_its_own_version_byte_for_byte(event_type: str, version: int) -> None:
    # The class of each version, superseded ones included, must read its fixture and write it back
    # unchanged: neither the current schema nor a kept old one may drift.
    body, _ = read(event_type, version)
    cls = REGISTRY.get_version(event_type, version)
    assert cls.model_validate_json(body).model_dump_json().encode() == body


@pytest.mark.parametrize("event_type", REGISTRY.types())
def test_reencoding_the_current_golden_gives_identical_bytes_and_headers(event_type: str) -> None:
    version = REGISTRY.get(event_type).schema_version
    body, meta = read(event_type, version)
    envelope = codec.decode(wire_headers(meta), body)
    wire = codec.encode(envelope)
    assert wire.value == body
    assert wire.headers == wire_headers(meta)
    assert wire.topic == meta["topic"]
    assert (None if wire.key is None else wire.key.decode()) == meta["key"]
    # ... and the fixture is what the sample gives today (the writer and the fixture agree).
    assert wire_files(envelope.data) == (
        body_path(event_type, version).read_bytes(),
        headers_path(event_type, version).read_bytes(),
    )
    assert envelope == envelope_for(envelope.data)


def test_the_v1_gpu_health_golden_reads_as_v2_with_xid_counts_and_unknown_ecc() -> None:
    body, meta = read("io.fedsched.GpuHealthReported", 1)
    data: Event = codec.decode(wire_headers(meta), body).data
    assert data == GpuHealthReported(
        cluster=ClusterId("eu-west-a100"),
        node=NodeId("gpu-node-017"),
        gpus=(
            GpuHealthSample(index=0, health=Health.OK, xid_errors=0, temperature_c=58),
            GpuHealthSample(index=5, health=Health.DEGRADED, xid_errors=3, temperature_c=81),
        ),
    )


def test_the_v1_profile_golden_reads_as_v2_with_its_recent_failures_not_said() -> None:
    body, meta = read("io.fedsched.ResourceProfileUpdated", 1)
    data = codec.decode(wire_headers(meta), body).data
    assert isinstance(data, ResourceProfileUpdated) and data.recent_failures is None
    assert data.health_milli == 875 and data.failures_per_kgpu_hour_milli == 2_500


def test_the_v1_wait_golden_reads_as_v2_its_position_the_federations_and_its_category_from_the_binding() -> None:
    body, meta = read("io.fedsched.JobQueued", 1)
    data = codec.decode(wire_headers(meta), body).data
    assert isinstance(data, JobQueued)
    # v1's one position was the job's place in the whole federation's order; its own queue's, unknown.
    assert (data.federation_position, data.tenant_queue_position) == (3, None)
    assert data.pending_reason is PendingReason.CAPACITY  # its binding: InsufficientGpu
    v2, _ = read("io.fedsched.JobQueued", 2)
    now = data.model_copy(update={"federation_position": 12, "tenant_queue_position": 3})
    assert now == JobQueued.model_validate_json(v2)  # the rest as the v2 golden says it


@pytest.mark.parametrize(
    ("binding", "reasons", "expected"),
    [
        ({"reason": "QuotaExceeded"}, ["QuotaExceeded", "InsufficientGpu"], "quota"),
        (None, ["WaitingForPreemption"], "preemption_pending"),
        (None, ["Placed"], None),  # not a waiting reason: no category, never a guessed one
    ],
)
def test_a_v1_wait_takes_the_category_of_its_binding_else_of_its_first_reason(
    binding: dict[str, str] | None, reasons: list[str], expected: str | None
) -> None:
    v1 = {"job_id": "j", "cycle_id": "c", "reasons": reasons, "message": "m", "binding": binding}
    upcast = queued_v1_to_v2(v1)
    assert upcast["pending_reason"] == expected and "queue_position" not in upcast
    assert JobQueued.model_validate_json(json.dumps(upcast)).pending_reason == expected
