"""Stateful fuzz of the projections, through the in-process host's read path (``TimeOrderedFollower``:
decode each partition with the event-time check, merge in event-time order) and the stage topology, as
the runner folds a step: streams of valid events with extreme values, late repeats, corrupted and
oversized records and far-future times (``tests.unit.events.test_consumer_fuzz_streams``).

Nothing fails; every record that cannot be read is dead-lettered with its reason; and the entities (but
for the positions they applied) and the latest profile of each, as published, are those of the same
stream without the repeats.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from events.catalog.errors import EventError
from events.log.contract import LogRecord, OutRecord
from events.log.deadletter import CODE, REASON, dead_letter
from events.wire.codec import DEFAULT_SKEW
from projections.inprocess.follower import TimeOrderedFollower
from projections.stages.core import Applied, Output, Position, evolve
from projections.stages.sources import SOURCE_TOPICS
from projections.stages.topology import MemoryStore, Processed, Topology
from tests.unit.events.test_consumer_fuzz_streams import Entry, Stream, a_stream, read

# A hang guard, not a speed bound: 1,000 streams take 70-150 s on a shared two-core machine under load.
pytestmark = [pytest.mark.property, pytest.mark.timeout(600)]


class _NoLog:
    """The follower's log: never called here (the records are handed to its read path directly)."""


def folded(entries: list[Entry]) -> tuple[MemoryStore, list[Output], list[OutRecord]]:
    """One step of the in-process host over ``entries``: its entities, outputs and dead letters."""
    follower = TimeOrderedFollower(_NoLog(), SOURCE_TOPICS)  # type: ignore[arg-type]
    partitions: dict[tuple[str, int], list[LogRecord]] = {}
    for entry in entries:
        record = entry.record
        if record.topic in SOURCE_TOPICS:
            partitions.setdefault((record.topic, record.partition), []).append(record)
    decoded = [TimeOrderedFollower._decoded(records, DEFAULT_SKEW) for _, records in sorted(partitions.items())]
    topology, store, processed = Topology(), MemoryStore(), Processed()
    dead: list[OutRecord] = []
    for _, _, record, envelope in follower._merge(decoded, [False] * len(decoded)):
        if isinstance(envelope, EventError):
            dead.append(dead_letter(record, envelope, "fedsched-projections"))
            continue
        topology.fold(store, envelope, Position(record.topic, record.partition, record.offset), processed)
    topology.flush(store, processed)
    return store, processed.outputs, dead


def entities(store: MemoryStore) -> dict[str, dict[str, Any]]:
    return {
        stage: {key: evolve(entity, applied=Applied()) if hasattr(entity, "applied") else entity for key, entity in t}
        for stage, t in ((stage, sorted(table.items())) for stage, table in sorted(store.tables.items()))
    }


def latest(outputs: list[Output]) -> dict[str, str]:
    last: dict[str, tuple[int, str]] = {}
    for out in outputs:
        entity, _, version = out.id.rpartition(":v")
        if int(version) >= last.get(entity, (0, ""))[0]:
            last[entity] = (int(version), out.event.model_dump_json())
    return {entity: json for entity, (_, json) in sorted(last.items())}


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=a_stream())
def test_the_projections_survive_any_stream_dead_letter_what_they_cannot_read_and_ignore_repeats(
    stream: Stream,
) -> None:
    store, outputs, dead = folded(stream.entries)

    unreadable = {
        (entry.record.topic, entry.record.partition, entry.record.offset)
        for entry, got in read(stream.entries)
        if isinstance(got, EventError) and entry.record.topic in SOURCE_TOPICS
    }
    assert {tuple(letter.key.decode().split("/")) for letter in dead if letter.key} == {
        (topic, str(partition), str(offset)) for topic, partition, offset in unreadable
    }
    assert all(dict(letter.headers)[REASON] and dict(letter.headers)[CODE] for letter in dead)

    reference, reference_outputs, _ = folded(stream.without_repeats())
    assert entities(store) == entities(reference)
    assert latest(outputs) == latest(reference_outputs)
