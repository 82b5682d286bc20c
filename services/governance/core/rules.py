"""Every governance rule over the state at once: what governance publishes now.

Called by the governance host after each batch of records it folds, and by tests. Pure: the state
carries log time; the outputs come sorted by the order the rules run (quota, reclamation, findings,
budgets),
each under an id derived from its cause and not yet in the log.
"""

from __future__ import annotations

from services.governance.core.abnormal import findings
from services.governance.core.budgets import Offsets, budget_actions, utc_only
from services.governance.core.config import GovConfig
from services.governance.core.quota import quota_changes
from services.governance.core.reclaim import reclaim_actions
from services.governance.core.state import GovState, Output


def evaluate(state: GovState, config: GovConfig, offsets: Offsets = utc_only) -> list[Output]:
    """``offsets``: the time zones' rules, for the budgets' windows (the host's zone database)."""
    out = quota_changes(state, config) + reclaim_actions(state, config) + findings(state, config)
    out += budget_actions(state, offsets)
    seen: set[str] = set()
    unique = []
    for output in out:
        if output.id not in seen:
            seen.add(output.id)
            unique.append(output)
    return unique
