"""GPU-hour budgets (issue 20): a hard budget keeps a job from starting while the GPU-hours it is expected
to use exceed what its window has left, and says so with the budget, what is left and what it needs; a
soft one does not; a new window admits the waiting job. What a window has used counts the GPUs runs hold
from placement to end, running ones as they run, whatever order the log's topics are read in."""

from __future__ import annotations

from typing import Any

from events.catalog.budget_windows import MILLI_MS_PER_GPU_HOUR, HeldLedger, Window, window_at
from events.catalog.configuration import event_of
from events.catalog.decisions import JobPlaced, JobQueued
from events.catalog.documents import BudgetWindow, DocumentChange, parse
from events.catalog.governance import BudgetWindowOpened
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobSucceeded
from events.catalog.reasons import ReasonCode
from events.wire.envelope import Envelope
from services.scheduler.core.decide import decide
from services.scheduler.core.state import SchedulerState
from tests.unit.projections.builders import a_job, a_node, placed

HOUR = 3_600_000
T0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z


class Log:
    def __init__(self) -> None:
        self.state = SchedulerState()
        self.count = 0

    def add(self, event: Any, at_ms: int) -> None:
        self.count += 1
        self.state.fold(Envelope(id=f"e{self.count}", time_ms=at_ms, data=event))

    def decide(self, now_ms: int) -> list[Any]:
        decided = decide(self.state, now_ms)
        for envelope in decided.events:
            self.add(envelope.data, now_ms)
        return [e.data for e in decided.events if isinstance(e.data, JobPlaced | JobQueued)]


def budget(mode: str = "hard", gpu_hours: int = 10, **spec: Any) -> Any:
    body = {
        "api_version": "fedsched.io/v1",
        "kind": "Budget",
        "metadata": {"name": "team-a-monthly"},
        "spec": {
            "tenant": "team-a",
            "window": "month",
            "timezone": "UTC",
            "gpu_hours": gpu_hours,
            "mode": mode,
            **spec,
        },
    }
    document = parse(body)
    return event_of(document, DocumentChange(kind=document.kind, name=document.name, generation=1, author="ops"))


def opened(at_ms: int) -> BudgetWindowOpened:
    w = window_at(BudgetWindow.MONTH, at_ms)
    return BudgetWindowOpened(
        budget="team-a-monthly",
        window=BudgetWindow.MONTH,
        label=w.label,
        start_ms=w.start_ms,
        end_ms=w.end_ms,
        opened_by="g",
    )


def fleet(mode: str = "hard") -> Log:
    log = Log()
    log.add(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"), T0)
    log.add(a_node(gpus=8), T0)
    log.add(budget(mode), T0)
    log.add(opened(T0), T0)
    return log


def job(job_id: str, gpus: int = 4, hours: int = 2) -> Any:
    return a_job(job_id, gpus=gpus).model_copy(update={"expected_runtime_s": hours * 3600})


def test_a_hard_budget_keeps_a_job_that_would_exceed_it_waiting_and_says_why() -> None:
    log = fleet()
    log.add(job("j1"), T0 + 1000)  # 4 GPUs x 2 h = 8 of the 10 GPU-hours
    log.add(job("j2"), T0 + 1000)  # 8 more: over
    decisions = log.decide(T0 + 2000)
    assert [type(d).__name__ for d in decisions] == ["JobPlaced", "JobQueued"]
    wait = decisions[1]
    assert wait.job_id == "j2" and ReasonCode.BUDGET_EXCEEDED in wait.reasons
    assert "budget team-a-monthly (2027-01) has 2 GPU-hours left of 10" in wait.message
    assert "expected to need 8" in wait.message


def test_a_soft_budget_lets_the_job_start() -> None:
    log = fleet("soft")
    log.add(job("j1"), T0 + 1000)
    log.add(job("j2"), T0 + 1000)
    assert [type(d).__name__ for d in log.decide(T0 + 2000)] == ["JobPlaced", "JobPlaced"]


def test_a_new_window_admits_the_waiting_job() -> None:
    log = fleet()
    log.add(job("j1"), T0 + 1000)
    log.add(job("j2"), T0 + 1000)
    log.decide(T0 + 2000)
    log.add(JobSucceeded(job_id="j1", cluster="c1", run=1), T0 + 2 * HOUR)
    month = window_at(BudgetWindow.MONTH, T0)
    assert not any(isinstance(d, JobPlaced) for d in log.decide(T0 + 3 * HOUR))  # 8 used of 10
    late = log.decide(month.end_ms + 1000)  # the month is over, the next one not opened yet
    assert not any(isinstance(d, JobPlaced) for d in late)  # it still waits (its reason unchanged: no new wait)
    log.add(opened(month.end_ms), month.end_ms)
    assert [type(d).__name__ for d in log.decide(month.end_ms + 1000)] == ["JobPlaced"]


def test_a_job_near_the_windows_end_needs_only_the_rest_of_the_window() -> None:
    log = fleet()
    month = window_at(BudgetWindow.MONTH, T0)
    log.add(job("late", gpus=8, hours=24), month.end_ms - HOUR)  # 8 GPU-hours before the month ends
    assert [type(d).__name__ for d in log.decide(month.end_ms - HOUR + 1000)] == ["JobPlaced"]


def test_a_job_with_no_estimate_is_expected_to_run_the_policys_default_runtime() -> None:
    log = fleet()
    log.add(a_job("no-estimate", gpus=8), T0 + 1000)  # 8 GPUs x the default 1 h = 8 GPU-hours
    log.add(a_job("second", gpus=4), T0 + 1000)  # 4 more: over
    assert [type(d).__name__ for d in log.decide(T0 + 2000)] == ["JobPlaced", "JobQueued"]


def test_what_a_window_used_does_not_depend_on_the_order_the_runs_facts_are_read_in() -> None:
    def used(order: list[int]) -> int:
        state = SchedulerState()
        events = [
            (a_job("j1", gpus=2), T0),
            (placed("j1", gpus=(0, 1)), T0 + HOUR),
            (JobSucceeded(job_id="j1", cluster="c1", run=1), T0 + 3 * HOUR),
        ]
        for index in order:
            event, at = events[index]
            state.fold(Envelope(id=f"e{index}", time_ms=at, data=event))
        return state.held.within(("team-a",), Window(T0, T0 + 30 * 24 * HOUR, "x"))

    expected = 2000 * 2 * HOUR
    assert {used(o) for o in ([0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1])} == {expected}
    assert expected == 4 * MILLI_MS_PER_GPU_HOUR


def test_the_ledger_counts_only_the_part_of_a_run_within_the_window() -> None:
    ledger = HeldLedger()
    ledger.add("t", 1000, T0 - HOUR, T0 + HOUR)
    assert ledger.within(("t",), Window(T0, T0 + 10 * HOUR, "x")) == 1000 * HOUR
