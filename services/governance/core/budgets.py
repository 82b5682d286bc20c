"""GPU-hour budgets: each budget's calendar window opened as the log's time enters it, and the findings of
a soft budget at 80% and 100% of its GPU-hours.

Called by ``services.governance.core.rules``. Pure: the zones' rules come in as ``offsets(zone)`` (the host
gives ``events.plumbing.zones.offsets``); time is the log's.

- A budget in force whose window at the log's time is not the one last opened gets a
  ``BudgetWindowOpened`` (its first window as soon as it is set, then each day, week or month): the
  scheduler enforces a hard budget within it, and a new window restores the budget.
- A soft budget whose window has used 80%, then 100%, of its GPU-hours gets a ``GovernanceFinding``
  (``budget_warning``, ``budget_spent``) once per window: used counts the GPU time its tenants' runs held
  from placement to end (those that ended, and the live ones until now), as the scheduler counts it; a
  run spread over clusters, each part's from its opening to its own end.
"""

from __future__ import annotations

from collections.abc import Callable

from events.catalog.budget_windows import (
    MILLI_MS_PER_GPU_HOUR,
    OffsetAt,
    Window,
    gpu_hours,
    held_within,
    utc,
    window_at,
)
from events.catalog.documents import BudgetMode
from events.catalog.governance import BudgetWindowOpened, Figure, FindingKind, GovernanceFinding
from events.catalog.reasons import ReasonCode
from events.catalog.types import TenantId
from services.governance.core.state import GovState, Output, derived_id

Offsets = Callable[[str], OffsetAt]
THRESHOLDS = ((80, FindingKind.BUDGET_WARNING), (100, FindingKind.BUDGET_SPENT))


def utc_only(zone: str) -> OffsetAt:
    """For callers without a zone database (tests): UTC, and nothing else."""
    if zone != "UTC":
        raise ValueError(f"no zone database here for {zone!r}")
    return utc


def budget_actions(state: GovState, offsets: Offsets = utc_only) -> list[Output]:
    out: list[Output] = []
    for name, budget in sorted(state.budgets.items()):
        spec = budget.spec
        try:
            offset_at = offsets(spec.timezone)
        except ValueError:
            continue  # the API checks zones; a record from elsewhere naming none it knows is left alone
        now = window_at(spec.window, state.now_ms, offset_at)
        opened = state.budget_windows.get(name)
        if opened is None or opened.start_ms < now.start_ms:
            event = BudgetWindowOpened(
                budget=name,
                window=spec.window,
                label=now.label,
                start_ms=now.start_ms,
                end_ms=now.end_ms,
                opened_by="governance",
            )
            out.append(Output(derived_id("budget-window", name, now.label), state.now_ms, event))
            opened = event
        if spec.mode is BudgetMode.SOFT:
            out += _findings(state, name, Window(opened.start_ms, opened.end_ms, opened.label))
    return [o for o in out if o.id not in state.emitted]


def _findings(state: GovState, name: str, window: Window) -> list[Output]:
    spec = state.budgets[name].spec
    tenants = (spec.tenant,) if spec.tenant else tuple(sorted(t for t, c in state.cohorts.items() if c == spec.cohort))
    used = state.held.within(tenants, window) + _live(state, tenants, window)
    limit = spec.gpu_hours * MILLI_MS_PER_GPU_HOUR
    out = []
    for pct, kind in THRESHOLDS:
        if used * 100 < limit * pct:
            break
        finding = GovernanceFinding(
            finding_id=derived_id("budget", name, window.label, pct),
            kind=kind,
            rule="budget",
            reason=ReasonCode.BUDGET_EXCEEDED,
            tenant=TenantId(spec.tenant) if spec.tenant else None,
            figures=(
                Figure(name="used_gpu_milli_ms", value=used),
                Figure(name="budget_gpu_milli_ms", value=limit),
                Figure(name="used_pct", value=used * 100 // limit),
            ),
            observed_ms=state.now_ms,
            message=(
                f"budget {name} ({window.label}, soft) has used {gpu_hours(used)} of its {spec.gpu_hours} GPU-hours"
                f" ({used * 100 // limit}%): jobs still start; " + ("it is spent" if pct >= 100 else f"{pct}% reached")
            ),
        )
        out.append(Output(finding.finding_id, state.now_ms, finding))
    return out


def _live(state: GovState, tenants: tuple[str, ...], window: Window) -> int:
    total = 0
    for job_id in sorted(state.active):
        facts = state.jobs.get(job_id)
        if facts is None or facts.spec is None or facts.spec.tenant not in tenants:
            continue
        for run in facts.runs.values():
            # A spread run's parts each hold from their opening until their own end: summed across them.
            for holding in run.holdings():
                if holding.ended_ms is None:
                    for milli, since in holding.held_pieces():
                        total += held_within(milli, since, max(since, state.now_ms), window)
    return total


__all__ = ["THRESHOLDS", "budget_actions", "utc_only"]
