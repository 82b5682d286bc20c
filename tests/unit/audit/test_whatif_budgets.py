"""``audit whatif`` under the GPU-hour budgets in force in the recorded history: replayed with the policy in
force, a hard budget holds back the job the live scheduler held back, and it starts when the live one did,
at the next window's opening; what the recorded runs held before ``--since`` counts in the window. The
history is recorded here by the scheduler's own ``decide()``, as the live scheduler records it."""

from __future__ import annotations

from typing import Any

import pytest

from events.catalog.budget_windows import window_at
from events.catalog.configuration import event_of
from events.catalog.decisions import JobPlaced, JobQueued
from events.catalog.documents import BudgetWindow, DocumentChange, parse
from events.catalog.governance import BudgetWindowOpened
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobStarted, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.wire.envelope import Envelope
from services.audit.whatif import history_of, simulate
from services.scheduler.core.decide import decide
from services.scheduler.core.state import SchedulerState
from tests.unit.projections.builders import a_job, a_node

pytestmark = pytest.mark.timeout(60)

HOUR = 3_600_000
T0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z
NEXT_DAY = T0 + 24 * HOUR


class Recording:
    """A log the scheduler's ``decide()`` writes its decisions into, kept as the envelopes whatif reads."""

    def __init__(self) -> None:
        self.state = SchedulerState()
        self.envelopes: list[Envelope] = []

    def add(self, event: Any, at_ms: int) -> None:
        envelope = Envelope(id=f"e{len(self.envelopes)}", time_ms=at_ms, data=event)
        self.envelopes.append(envelope)
        self.state.fold(envelope)

    def decide(self, now_ms: int) -> dict[str, Any]:
        """The cycle at ``now_ms``; each job placed starts at once. Job id -> its decision."""
        for envelope in decide(self.state, now_ms).events:
            self.add(envelope.data, now_ms)
            if isinstance(envelope.data, JobPlaced):
                self.add(JobStarted(job_id=envelope.data.job_id, cluster="c1", run=1), now_ms)
        return {e.data.job_id: e.data for e in self.envelopes if isinstance(e.data, JobPlaced | JobQueued)}

    def open_window(self, at_ms: int) -> None:
        """Governance opens the day's window as the log's time enters it."""
        w = window_at(BudgetWindow.DAY, at_ms)
        opened = BudgetWindowOpened(
            budget="team-a-daily", window=BudgetWindow.DAY, label=w.label, start_ms=w.start_ms, end_ms=w.end_ms,
            opened_by="governance",
        )  # fmt: skip
        self.add(opened, at_ms)


def daily_budget(gpu_hours: int) -> Any:
    spec = {"tenant": "team-a", "window": "day", "timezone": "UTC", "gpu_hours": gpu_hours, "mode": "hard"}
    document = parse(
        {"api_version": "fedsched.io/v1", "kind": "Budget", "metadata": {"name": "team-a-daily"}, "spec": spec}
    )
    return event_of(document, DocumentChange(kind=document.kind, name=document.name, generation=1, author="ops"))


def job(job_id: str, gpus: int = 4, hours: int = 2) -> Any:
    return a_job(job_id, gpus=gpus).model_copy(update={"expected_runtime_s": hours * 3600})


def recorded_fleet() -> Recording:
    log = Recording()
    log.add(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"), T0)
    log.add(a_node(gpus=8), T0)
    log.add(daily_budget(10), T0)
    log.open_window(T0)
    return log


def test_whatif_holds_back_the_job_the_live_scheduler_held_back_and_starts_it_when_the_next_day_opens() -> None:
    log = recorded_fleet()
    log.add(job("j1"), T0 + 1000)  # 8 of the day's 10 GPU-hours
    log.add(job("j2"), T0 + 1000)  # 8 more: over
    live = log.decide(T0 + 1000)
    assert isinstance(live["j2"], JobQueued) and ReasonCode.BUDGET_EXCEEDED in live["j2"].reasons
    log.add(JobSucceeded(job_id="j1", cluster="c1", run=1), T0 + 1000 + 2 * HOUR)
    assert isinstance(log.decide(T0 + 1000 + 2 * HOUR)["j2"], JobQueued)  # 8 used of 10: still over
    log.open_window(NEXT_DAY)
    assert isinstance(log.decide(NEXT_DAY)["j2"], JobPlaced)
    log.add(JobSucceeded(job_id="j2", cluster="c1", run=1), NEXT_DAY + 2 * HOUR)

    history = history_of(log.envelopes)
    replayed = simulate(history, history.state.policy_config())

    assert history.actual.held_by_budget == replayed.held_by_budget == {"j2"}
    assert dict(replayed.waits_ms) == dict(history.actual.waits_ms) == {"standard": [0, NEXT_DAY - T0 - 1000]}
    assert replayed.gpu_milli_ms == history.actual.gpu_milli_ms


def test_without_the_budget_whatif_would_have_started_both_at_once() -> None:
    """The same history with the budget deleted before the end: whatif takes the budgets in force."""
    log = recorded_fleet()
    log.add(job("j1"), T0 + 1000)
    log.add(job("j2"), T0 + 1000)
    log.decide(T0 + 1000)
    deleted = daily_budget(10).model_copy(
        update={"change": daily_budget(10).change.model_copy(update={"deleted": True})}
    )
    log.add(deleted, T0 + HOUR)

    history = history_of(log.envelopes)
    replayed = simulate(history, history.state.policy_config())
    assert history.actual.held_by_budget == {"j2"} and replayed.held_by_budget == set()
    assert dict(replayed.waits_ms) == {"standard": [0, 0]}


def test_what_the_recorded_runs_held_before_the_window_whatif_replays_counts_in_the_budget() -> None:
    log = recorded_fleet()
    log.add(job("j1"), T0)
    log.decide(T0)
    log.add(JobSucceeded(job_id="j1", cluster="c1", run=1), T0 + 2 * HOUR)  # 8 of the day's 10 GPU-hours
    log.add(job("j2"), T0 + 3 * HOUR)
    assert isinstance(log.decide(T0 + 3 * HOUR)["j2"], JobQueued)

    history = history_of(log.envelopes, since_ms=T0 + 3 * HOUR)
    replayed = simulate(history, history.state.policy_config())
    assert [j.job_id for j, _, _ in history.arrivals] == ["j2"]  # j1 ran before the window replayed
    assert replayed.held_by_budget == history.actual.held_by_budget == {"j2"}
