"""The GPU-hour budgets ``audit whatif`` simulates recorded history under: those in force in it.

Called by ``services.audit.whatif`` (its ``simulate``). Calls the scheduler core's simulated budgets
(``services.scheduler.core.simulated_budgets``: the calendar's window at the simulated time, counted as the
live scheduler counts it) and the zone database (``events.plumbing.zones``).

The budgets, tenants and cohorts are the recorded history's as they stand at its end (as whatif takes the
tenants and quotas); a budget whose zone the zone database does not know is left out, as governance
leaves it. What the recorded runs held before the simulated window starts (``--since``) counts in the
windows in force then: the simulation starts from an empty fleet, but not from an unspent budget.
"""

from __future__ import annotations

from events.plumbing.zones import offsets
from services.scheduler.core.policy import model as m
from services.scheduler.core.simulated_budgets import SimulatedBudgets
from services.scheduler.core.state import SchedulerState


def budgets_in_force(state: SchedulerState, config: m.PolicyConfig, start_ms: int) -> SimulatedBudgets:
    specs = {}
    for name, budget in state.budgets.items():
        try:
            offsets(budget.spec.timezone)
        except ValueError:
            continue
        specs[name] = budget.spec
    cohorts = {tenant: registered.cohort for tenant, registered in state.tenants.items()}
    budgets = SimulatedBudgets.of(specs, cohorts, offsets, config)
    for facts in state.jobs.values():
        if facts.spec is None or facts.spec.tenant not in budgets.counted:
            continue
        for run, placed_ms in facts.placed_at.items():
            gpu = sum(len(r.gpu_indices) * r.gpu_milli_each for r in facts.placements[run].replicas)
            budgets.ledger.add(facts.spec.tenant, gpu, placed_ms, min(facts.ended_at.get(run, start_ms), start_ms))
    return budgets


__all__ = ["budgets_in_force"]
