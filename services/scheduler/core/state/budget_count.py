"""What a hard GPU-hour budget has spent in its window: the one count behind the core's ``Budget`` inputs.

Called by ``SchedulerState.snapshot`` (the live scheduler and ``audit verify``) and by the simulations'
budgets (``services.scheduler.core.simulated_budgets``: the timed simulator and ``audit whatif``), so a
budget's window is counted one way wherever a cycle decides. Calls the calendar's ``held_within`` and the
core's ``expected_runtime_ms``. Pure.

A budget's tenants are the one it names, or its cohort's members. What its window has spent is the GPU
time (milli-GPU x ms) of runs that ended (``Holdings.held``, a ``HeldLedger``) plus, for each running job
of its tenants, its GPUs from its placement (a replica added to its run: from when it was added) until
now or, if that is later, its expected end (its ``expected_runtime``, else ``max_runtime``, else the
policy's ``default_runtime_s``), within the window.
Only hard budgets with a window in force are counted: a soft budget holds nothing back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from events.catalog.budget_windows import MILLI_MS_PER_GPU_HOUR, HeldLedger, Window, held_within
from events.catalog.documents import BudgetMode, BudgetSpec
from events.catalog.types import TenantId
from services.scheduler.core.policy import model as m
from services.scheduler.core.policy.budgets import expected_runtime_ms

WindowOf = Callable[[str, BudgetSpec], Window | None]
"""The window in force of a budget (its name and spec), or ``None`` when none is open."""


@dataclass(frozen=True, slots=True)
class Holdings:
    """The GPU time budgets count: what runs that ended held, and the running jobs with when each was
    placed (the live state knows it from the log; a simulation placed them when they started)."""

    held: HeldLedger
    running: Collection[m.RunningJob]
    placed_ms: Callable[[m.RunningJob], int]
    grown: Callable[[m.RunningJob], tuple[tuple[int, int], ...]] | None = None
    """The replicas added to a running job's run (when, milli-GPU), counted from when each was added;
    ``None``: counted from its placement (the simulations do not keep when)."""


def budget_tenants(spec: BudgetSpec, cohorts: Mapping[str, str | None]) -> tuple[str, ...]:
    """The tenants a budget counts: the one it names, or (by name) its cohort's members (``cohorts``:
    tenant -> its cohort)."""
    if spec.tenant is not None:
        return (spec.tenant,)
    return tuple(sorted(t for t, cohort in cohorts.items() if cohort == spec.cohort))


def hard_budgets(
    specs: Mapping[str, BudgetSpec],
    window_of: WindowOf,
    cohorts: Mapping[str, str | None],
    holdings: Holdings,
    now_ms: int,
    config: m.PolicyConfig,
) -> tuple[m.Budget, ...]:
    """The hard budgets with a window in force, by name, each with what its window has spent."""
    out = []
    for name, spec in sorted(specs.items()):
        window = window_of(name, spec) if spec.mode is BudgetMode.HARD else None
        if window is None:
            continue
        tenants = budget_tenants(spec, cohorts)
        spent = holdings.held.within(tenants, window) + _running_within(tenants, window, holdings, now_ms, config)
        limit = spec.gpu_hours * MILLI_MS_PER_GPU_HOUR
        out.append(m.Budget(name, tuple(TenantId(t) for t in tenants), window.label, window.end_ms, limit, spent))
    return tuple(out)


def _running_within(
    tenants: tuple[str, ...], window: Window, holdings: Holdings, now_ms: int, config: m.PolicyConfig
) -> int:
    total = 0
    for running in holdings.running:
        if running.job.tenant not in tenants:
            continue
        placed_ms = holdings.placed_ms(running)
        gpu = sum(len(r.gpu_indices) * r.gpu_milli_each for r in running.placements)
        end = max(now_ms, placed_ms + expected_runtime_ms(running.job, config))
        grown = holdings.grown(running) if holdings.grown is not None else ()
        total += held_within(gpu - sum(milli for _, milli in grown), placed_ms, end, window)
        total += sum(held_within(milli, max(at, placed_ms), end, window) for at, milli in grown)
    return total


__all__ = ["Holdings", "WindowOf", "budget_tenants", "hard_budgets"]
