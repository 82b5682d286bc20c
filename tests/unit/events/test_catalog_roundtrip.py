"""Property: every event type survives encode -> decode unchanged, in any envelope.

Strategies come from the models themselves (``catalog_strategies``), so a new type or field is covered
without touching this file.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.catalog import REGISTRY
from events.catalog.inventory import GpuHealthReported
from events.catalog.legacy import GpuHealthReportedV1
from events.wire import codec
from events.wire.envelope import Envelope

from .catalog_strategies import envelopes, events_of

pytestmark = [pytest.mark.property, pytest.mark.timeout(60)]

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("event_type", REGISTRY.types())
def test_every_event_type_round_trips_through_the_wire_unchanged(event_type: str) -> None:
    cls = REGISTRY.get(event_type)

    @FAST
    @given(envelopes(events_of(cls)))
    def round_trip(envelope: Envelope) -> None:
        wire = codec.encode(envelope)
        decoded = codec.decode(wire.headers, wire.value)
        assert decoded == envelope
        # Canonical: what was read encodes to the very same bytes (the audit chain hashes them).
        assert codec.encode(decoded) == wire
        assert wire.topic == cls.topic
        key = envelope.data.partition_key()
        assert wire.key == (None if key is None else key.encode())

    round_trip()


@FAST
@given(envelopes(events_of(GpuHealthReportedV1)))
def test_a_v1_gpu_health_record_decodes_as_the_current_version_with_its_count_as_xid_errors(envelope: Envelope) -> None:
    wire = codec.encode(envelope)  # written as a v1 producer wrote it
    assert dict(wire.headers)["ce_schemaversion"] == b"1"
    decoded = codec.decode(wire.headers, wire.value)
    v1 = envelope.data
    assert isinstance(v1, GpuHealthReportedV1)
    assert isinstance(decoded.data, GpuHealthReported)
    assert decoded.schema_version == GpuHealthReported.schema_version and decoded.data.npus == ()
    assert (decoded.data.cluster, decoded.data.node) == (v1.cluster, v1.node)
    assert [(g.index, g.health, g.xid_errors, g.temperature_c) for g in decoded.data.gpus] == [
        (g.index, g.health, g.errors, g.temperature_c) for g in v1.gpus
    ]
    assert all(g.ecc_corrected is None and g.ecc_uncorrected is None for g in decoded.data.gpus)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 253_402_300_799_999))
def test_envelope_time_survives_rfc3339_to_the_millisecond(time_ms: int) -> None:
    from events.wire.envelope import format_time, parse_time

    assert parse_time(format_time(time_ms)) == time_ms
