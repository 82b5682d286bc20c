"""Stateful fuzz of the scheduler, through its host's read path (``SchedulerHost._fold``: each record
folded once, decoded without the event-time check: its decisions are a function of the log alone) and
the pure core
(``SchedulerState``, ``decide``): streams of valid events with extreme values, late repeats, corrupted
and oversized records and far-future times (``tests.unit.events.test_consumer_fuzz_streams``), some
batches delivered twice at their positions.

Nothing fails; what cannot be read is not folded; and what the scheduler knows (its facts, its snapshot)
and its next cycle's decision events are those of the same stream without the repeats.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.catalog.base import Event
from events.catalog.errors import EventError
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobStarted, PriorityClass
from events.log.contract import LogRecord
from events.log.reading import decode_record
from events.wire.envelope import Envelope
from services.scheduler.core.decide import INPUT_TOPICS, decide
from services.scheduler.core.state import SchedulerState
from services.scheduler.host import SchedulerHost
from tests.unit.events.test_consumer_fuzz_streams import NOW, Entry, Stream, a_stream
from tests.unit.projections.builders import a_job, a_node, placed

# A hang guard, not a speed bound: 1,000 streams take 70-150 s on a shared two-core machine under load.
pytestmark = [pytest.mark.property, pytest.mark.timeout(600)]


class _NoLog:
    """The host's log: never called here (the records are handed to its read path directly)."""


def folded(entries: list[Entry], again: set[int]) -> SchedulerHost:
    """The host's read path over ``entries``, a record at a time (each is then a batch: the state settles
    what it can after it); the batches at the indexes in ``again`` are delivered twice."""
    host = SchedulerHost(_NoLog())  # type: ignore[arg-type]
    for index, entry in enumerate(entries):
        if entry.record.topic not in INPUT_TOPICS:
            continue
        host._fold([entry.record])
        if index in again:
            host._fold([entry.record])
    return host


def known(state: SchedulerState, now_ms: int) -> dict[str, Any]:
    """What the scheduler knows and decides (not how many records it read)."""
    decided = decide(state, now_ms)
    return {
        "jobs": dict(sorted(state.jobs.items())),
        "nodes": dict(sorted(state.nodes.items())),
        "clusters": (state.clusters, state.cluster_status, state.profiles),
        "governance": (state.tenants, state.quotas, state.policy),
        "settled": state.settled,
        "cycles": state.cycles,
        "snapshot": state.snapshot(now_ms),
        "decisions": [(e.id, e.data.model_dump_json()) for e in decided.events],
    }


def _readable(record: LogRecord) -> bool:
    """Whether the scheduler can fold ``record``: whatever its event time, when it can be read at all."""
    try:
        decode_record(record, None)
    except EventError:
        return False
    return True


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=a_stream(), again=st.sets(st.integers(0, 80), max_size=5))
def test_the_scheduler_survives_any_stream_folds_what_it_can_read_once_and_ignores_repeats(
    stream: Stream, again: set[int]
) -> None:
    host = folded(stream.entries, again)
    inputs = [entry.record for entry in stream.entries if entry.record.topic in INPUT_TOPICS]
    readable = sum(1 for record in inputs if _readable(record))
    assert host.state.events == readable  # each once, whatever was delivered twice
    assert host.metrics.unreadable == len(inputs) - readable

    reference = folded(stream.without_repeats(), set())
    now = NOW + 3_600_000
    assert known(host.state, now) == known(reference.state, now)


def test_a_running_job_on_a_gpu_its_node_no_longer_has_can_be_preempted_without_a_crash() -> None:
    """Found by the fuzz: a node observed again with fewer GPUs than a running job was placed on. The
    scheduler crashed ('index 0 is out of bounds') giving the victim's GPUs back, on every cycle."""
    events: list[Event] = [
        ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"),
        a_node(gpus=8, generation=1),
        a_job("low", gpus=2),
        placed("low", gpus=(0, 6)),
        JobStarted(job_id="low", cluster="c1"),
        a_node(gpus=1, generation=2),  # GPU 6 is gone, GPU 0 is still held by "low"
        a_job("high", gpus=1).model_copy(update={"priority_class": PriorityClass.PRODUCTION_INFERENCE}),
    ]
    state = SchedulerState()
    for i, event in enumerate(events):
        state.fold(Envelope(id=f"e{i}", time_ms=NOW + i, data=event))
    decided = [e.data.event_type for e in decide(state, NOW + 1000).events]
    assert decided == ["io.fedsched.JobPreemptionRequested", "io.fedsched.JobQueued"]


def test_a_stop_request_read_again_after_its_job_settled_names_no_victim_of_the_preemptor() -> None:
    """Found by the fuzz: a job rejected (settled, its facts dropped), a preemption request naming it and
    a placement of its preemptor, then the request appended again by a producer's retry. The retry made
    the dropped job a victim of the placed preemptor again; a settled job's records change nothing."""
    from events.catalog.decisions import JobPreemptionRequested
    from events.catalog.jobs import JobRejected
    from events.catalog.reasons import ReasonCode
    from events.catalog.types import ClusterId, CycleId, JobId

    rejected = JobRejected(job_id=JobId("victim"), tenant="t0", reason=ReasonCode.UNKNOWN_QUEUE, message="no")
    asked = JobPreemptionRequested(
        job_id=JobId("victim"),
        cycle_id=CycleId("cycle-1"),
        cluster=ClusterId("c1"),
        run=1,
        preemptor=JobId("winner"),
        rule="priority",
        grace_period_s=30,
    )
    state = SchedulerState()
    for i, event in enumerate([rejected, asked, placed("winner", node="n1", cluster="c1"), asked]):
        state.fold(Envelope(id=f"e{i}" if i < 3 else "e1", time_ms=NOW + i, data=event, source="urn:test"))
        state.snapshot(NOW + i)  # settles what it can, as the host does after each batch
    assert state.jobs["winner"].victims == ()
