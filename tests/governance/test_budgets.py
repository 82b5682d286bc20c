"""GPU-hour budgets in governance (issue 20): each budget's window is opened as the log's time enters it
(its first as soon as it is set), once; a soft budget raises a finding at 80% and at 100% of its
GPU-hours, once per window; a new window starts the count afresh."""

from __future__ import annotations

from typing import Any

from events.catalog.configuration import event_of
from events.catalog.documents import DocumentChange, parse
from events.catalog.governance import BudgetWindowOpened, FindingKind, GovernanceFinding
from events.plumbing.zones import offsets
from events.wire.envelope import Envelope
from services.governance.core.budgets import budget_actions
from services.governance.core.state import SOURCE, GovState

from .builders import MIN, History, a_history

HOUR = 60  # in the builders' minutes


def budget(mode: str, gpu_hours: int = 10, window: str = "day", timezone: str = "UTC") -> Any:
    body = {
        "api_version": "fedsched.io/v1",
        "kind": "Budget",
        "metadata": {"name": "team-a-daily"},
        "spec": {"tenant": "team-a", "window": window, "timezone": timezone, "gpu_hours": gpu_hours, "mode": mode},
    }
    document = parse(body)
    return event_of(document, DocumentChange(kind=document.kind, name=document.name, generation=1, author="ops"))


def state_of(history: History) -> GovState:
    state = GovState()
    for envelope in history.envelopes:
        state.fold(envelope)
    return state


def publish(history: History, state: GovState) -> list[Any]:
    """What the budget rule gives now, appended to the history as governance's own (so it is not given again)."""
    out = budget_actions(state, offsets)
    for output in out:
        history.envelopes.append(Envelope(id=output.id, time_ms=output.time_ms, data=output.event, source=SOURCE))
    return [o.event for o in out]


def test_a_budgets_window_opens_once_and_the_next_when_the_log_reaches_it() -> None:
    history = a_history().add(budget("hard"), at=0)
    first = publish(history, state_of(history))
    assert [type(e).__name__ for e in first] == ["BudgetWindowOpened"]
    assert publish(history, state_of(history)) == []  # opened already
    history.submit("j1", at=25 * HOUR)  # the log's time reaches the next day
    (second,) = publish(history, state_of(history))
    assert isinstance(second, BudgetWindowOpened) and second.start_ms == first[0].end_ms


def test_a_window_follows_its_time_zone() -> None:
    history = a_history().add(budget("hard", window="month", timezone="Asia/Tokyo"), at=0)
    (opened,) = publish(history, state_of(history))
    assert opened.start_ms % (24 * 60 * MIN) == 15 * 60 * MIN  # local midnight, 15:00 UTC


def test_a_soft_budget_warns_at_80_and_100_percent_once_each() -> None:
    history = a_history().add(budget("soft", gpu_hours=10), at=0)
    publish(history, state_of(history))
    history.submit("j1", gpus=4).place("j1", at=1, gpus=4).start("j1", at=2)
    history.submit("idle", at=1 * HOUR)  # the log's time after 1 h: 4 GPU-hours
    assert publish(history, state_of(history)) == []
    history.submit("later", at=2 * HOUR + 1)  # 8 GPU-hours: 80%
    (warning,) = publish(history, state_of(history))
    assert isinstance(warning, GovernanceFinding) and warning.kind is FindingKind.BUDGET_WARNING
    assert "has used 8 of its 10 GPU-hours (80%)" in warning.message
    history.submit("end", at=3 * HOUR)  # 12: spent; the warning is not given again
    (spent,) = publish(history, state_of(history))
    assert spent.kind is FindingKind.BUDGET_SPENT


def test_a_hard_budget_raises_no_finding() -> None:
    history = a_history().add(budget("hard", gpu_hours=1), at=0)
    publish(history, state_of(history))
    history.submit("j1", gpus=4).place("j1", at=1, gpus=4).start("j1", at=2).submit("x", at=3 * HOUR)
    assert publish(history, state_of(history)) == []
