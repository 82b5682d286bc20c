"""The timed simulator's configuration: fedsched.io/v1 documents (those ``fedsched apply -f`` takes), applied
as the scheduler applies them.

Called by ``fedsched simulate --mode timed --config`` (``services.cli.simulate_run``, which reads the files)
and by the timed simulator (``services.scheduler.sim.timed``). Calls ``parse_all`` and ``event_of``: each
document becomes the event the API would publish, folded into a ``SchedulerState`` as the live scheduler
folds it, so the simulation reads tenants, quotas, budgets and the policy exactly as the scheduler does;
the budgets' zones come from the zone database (``events.plumbing.zones``).

- ``Tenant``: its weight, cohort and hot-model cap. When the configuration has Tenant documents, the trace's
  jobs are dealt to them (the pod's number modulo their count, in name order) instead of to ``tenant-0`` to
  ``tenant-3``; their priority class still comes from their QoS, not from the tenant's default.
- ``Cohort``: nothing more (a Tenant names its cohort).
- ``Quota``: the queue's lines (trace jobs are in their tenant's default queue).
- ``Budget``: enforced (hard) and reported (both), see ``services.scheduler.core.simulated_budgets``.
- ``Policy``: every setting, but the node policy is the one the simulator is asked to run (the command line
  decides: ``--policy`` if given, else the document's), the seed is the run's, and start estimates are not
  computed (``estimate_limit`` 0: they explain a wait, they decide nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from events.catalog.configuration import event_of
from events.catalog.documents import BudgetSpec, DocumentChange, Kind, parse_all
from events.plumbing.zones import offsets
from events.wire.envelope import Envelope
from services.scheduler.core.policy import model as m
from services.scheduler.core.simulated_budgets import SimulatedBudgets
from services.scheduler.core.state import SchedulerState

AUTHOR = "simulator"


@dataclass(frozen=True, slots=True)
class SimConfig:
    tenants: tuple[m.Tenant, ...] = ()
    """As the scheduler's snapshot has them: weight, cohort, cap, quota lines (no past usage)."""
    dealt_to: tuple[str, ...] = ()
    """The Tenant documents' names, in order: the tenants trace jobs are dealt to (none: tenant-0..3)."""
    budgets: dict[str, BudgetSpec] = field(default_factory=dict)
    cohorts: dict[str, str | None] = field(default_factory=dict)
    """tenant -> its cohort."""
    policy: m.PolicyConfig | None = None
    """The Policy document's settings, if there is one."""

    def policy_config(self, node_policy: m.NodePolicy, seed: int) -> m.PolicyConfig:
        base = self.policy or m.PolicyConfig()
        return replace(base, node_policy=node_policy, seed=seed, estimate_limit=0)

    def simulated_budgets(self, config: m.PolicyConfig) -> SimulatedBudgets:
        return SimulatedBudgets.of(self.budgets, self.cohorts, offsets, config)


def sim_config(bodies: Sequence[Any]) -> SimConfig:
    """The configuration of documents' bodies (YAML read as JSON values). ``DocumentError`` names a bad
    document; ``ValueError`` a budget's zone the zone database does not have."""
    documents = parse_all(bodies)
    state = SchedulerState()
    for index, document in enumerate(documents):
        change = DocumentChange(kind=document.kind, name=document.name, generation=1, author=AUTHOR)
        state.fold(Envelope(id=f"config-{index}", time_ms=0, data=event_of(document, change)))
    budgets = {name: budget.spec for name, budget in state.budgets.items()}
    for name, spec in sorted(budgets.items()):
        try:
            offsets(spec.timezone)
        except ValueError as error:
            raise ValueError(f"Budget {name!r}: spec.timezone: {error}") from None
    return SimConfig(
        tenants=state.snapshot(0).tenants,
        dealt_to=tuple(sorted(d.name for d in documents if d.kind is Kind.TENANT)),
        budgets=budgets,
        cohorts={tenant: registered.cohort for tenant, registered in state.tenants.items()},
        policy=state.policy_config() if state.policy is not None else None,
    )


__all__ = ["SimConfig", "sim_config"]
