"""A running job's start is when it started, not when it was submitted (issue 20): a job that waited 10
minutes is expected to end 10 minutes later than its submission plus its runtime, which is what backfill
and reservations read."""

from __future__ import annotations

from events.catalog.jobs import JobStarted
from events.wire.envelope import Envelope
from services.scheduler.core.state import SchedulerState
from tests.unit.projections.builders import a_job, a_node, placed

T0 = 1_900_000_000_000
MIN = 60_000


def test_a_job_that_waited_ten_minutes_runs_from_its_start() -> None:
    state = SchedulerState()
    job = a_job("j1").model_copy(update={"expected_runtime_s": 3600})
    for at, event in (
        (0, a_node()),
        (0, job),
        (10 * MIN, placed("j1")),
        (10 * MIN + 5000, JobStarted(job_id="j1", cluster="c1")),
    ):
        state.fold(Envelope(id=f"e{at}-{type(event).__name__}", time_ms=T0 + at, data=event))
    (running,) = state.snapshot(T0 + 20 * MIN).running
    assert running.started_at_ms == T0 + 10 * MIN + 5000  # its start, not its submission at T0


def test_before_its_start_is_reported_a_run_counts_from_its_placement() -> None:
    state = SchedulerState()
    for at, event in ((0, a_node()), (0, a_job("j1")), (10 * MIN, placed("j1"))):
        state.fold(Envelope(id=f"e{at}-{type(event).__name__}", time_ms=T0 + at, data=event))
    (running,) = state.snapshot(T0 + 11 * MIN).running
    assert running.started_at_ms == T0 + 10 * MIN
