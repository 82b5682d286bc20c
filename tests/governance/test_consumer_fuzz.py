"""Stateful fuzz of governance, through its host's read path (``GovernanceHost._fold``: each record
folded once, decoded with the event-time check) and its pure core (``GovState``, the rules' ``evaluate``):
streams of valid events with extreme values, late repeats, corrupted and oversized records and
far-future times (``tests.unit.events.test_consumer_fuzz_streams``), some batches delivered twice.

Nothing fails; what cannot be read is not folded; and governance's state and what its rules decide are
those of the same stream without the repeats.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.catalog.errors import EventError
from events.wire.codec import DEFAULT_SKEW
from services.governance.core.config import GovConfig, IdleRule
from services.governance.core.rules import evaluate
from services.governance.core.state import GovState
from services.governance.host import INPUT_TOPICS, GovernanceHost
from tests.unit.events.test_consumer_fuzz_streams import Entry, Stream, a_stream, read

# A hang guard, not a speed bound: 1,000 streams take 70-150 s on a shared two-core machine under load.
pytestmark = [pytest.mark.property, pytest.mark.timeout(600)]

MIN = 60_000
RULES = GovConfig(idle=(IdleRule(idle_after_ms=5 * MIN, grace_ms=MIN),))


class _NoLog:
    """The host's log: never called here (the records are handed to its read path directly)."""


def folded(entries: list[Entry], again: set[int]) -> GovernanceHost:
    """The host's read path over ``entries``; the batches at the indexes in ``again`` delivered twice."""
    host = GovernanceHost(_NoLog(), RULES, skew=DEFAULT_SKEW)  # type: ignore[arg-type]
    for index, entry in enumerate(entries):
        if entry.record.topic not in INPUT_TOPICS:
            continue
        host._fold([entry.record])
        if index in again:
            host._fold([entry.record])
    return host


def known(state: GovState) -> dict[str, Any]:
    return {
        "now": state.now_ms,
        "jobs": dict(sorted(state.jobs.items())),
        "active": state.active,
        "lost": state.lost_nodes,
        "unreachable": state.unreachable,
        "quota": (state.base_quota, state.base_versions, state.granted_ms),
        "requests": state.requests,
        "emitted": state.emitted,
        "settled": state.settled,
        "failures": (state.workload_failures, state.node_failures),
        "outputs": [(o.id, o.time_ms, o.event.model_dump_json()) for o in evaluate(state, RULES)],
    }


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=a_stream(), again=st.sets(st.integers(0, 80), max_size=5))
def test_governance_survives_any_stream_folds_what_it_can_read_once_and_ignores_repeats(
    stream: Stream, again: set[int]
) -> None:
    host = folded(stream.entries, again)
    inputs = [(entry, got) for entry, got in read(stream.entries) if entry.record.topic in INPUT_TOPICS]
    assert host.metrics.unreadable == sum(1 for _, got in inputs if isinstance(got, EventError))

    reference = folded(stream.without_repeats(), set())
    assert known(host.state) == known(reference.state)
