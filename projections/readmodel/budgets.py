"""Each Budget document in force in its current window, with the GPU time used and projected: what
``fedsched budget`` and the governance report show.

Called by the API (``services.api.quota``: ``GetBudgets``) and by governance's report. Reads the read
models (``ReadModels``: the Budget and Tenant documents, the usage hours of runs that ended, the runs
holding GPUs now), the usage projection the report reads; computes the window with the zone database
(``events.plumbing.zones``) and ``events.catalog.budget_windows``, as governance opens it.

Used counts the GPU time runs held from placement to end within the window: the runs that ended (by the
hours of the usage projection) and those holding GPUs now, until now. Projected adds what those are
expected to hold still, to their expected end within the window: the runtime they were submitted with
(expected, else maximum, else the Policy's ``default_runtime_s``), and no more for a run already past it.
That is the rule the scheduler holds a hard budget to from the log (``services.scheduler.core.policy
.budgets``): a job starts when what it is expected to need fits in the budget less what is projected.
The two may differ by what the read models have not folded yet, and by part of an hour at a window's
edge in a zone whose offset is not a whole number of hours.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from events.catalog.budget_windows import MILLI_MS_PER_GPU_HOUR, Window, held_within, window_at
from events.catalog.documents import BudgetSpec, Kind, PolicySpec
from events.plumbing.zones import UnknownZone, offsets
from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.typed import DocumentRow


@dataclass(frozen=True, slots=True)
class BudgetView:
    name: str
    spec: BudgetSpec
    window: Window
    tenants: tuple[str, ...]
    """Whom it counts: its tenant, or its cohort's members."""
    used_milli_ms: int
    projected_milli_ms: int
    running_jobs: int

    @property
    def limit_milli_ms(self) -> int:
        return self.spec.gpu_hours * MILLI_MS_PER_GPU_HOUR

    @property
    def left_milli_ms(self) -> int:
        return max(0, self.limit_milli_ms - self.used_milli_ms)


async def budget_views(reads: ReadModels, scope: Sequence[str] | None, tenant: str, now_ms: int) -> list[BudgetView]:
    """The budgets ``scope`` may see (None: all), of ``tenant`` only when given, at ``now_ms``."""
    rows = await reads.documents(scope, Kind.BUDGET.value)
    tenants = await reads.documents(None, Kind.TENANT.value)
    default_s = _default_runtime_s(await reads.documents(None, Kind.POLICY.value))
    held = await reads.held_runs()
    out = []
    for row in rows:
        if row.body is None:
            continue
        spec = BudgetSpec.model_validate_json(json.dumps(row.body.get("spec", {})))
        if tenant and spec.tenant != tenant:
            continue
        try:
            window = window_at(spec.window, now_ms, offsets(spec.timezone))
        except UnknownZone:
            continue
        members = (spec.tenant,) if spec.tenant else tuple(sorted(t.name for t in tenants if _cohort(t) == spec.cohort))
        used = await reads.allocated_within(members, window.start_ms, window.end_ms)
        projected, running = used, 0
        for run in held:
            if run.tenant not in members:
                continue
            running += 1
            expected_end = run.placed_ms + (run.expected_runtime_s or run.max_runtime_s or default_s) * 1000
            opened = {p.cluster: p.opened_ms for p in run.parts}  # a spread service's parts: each from its opening
            since: dict[int, int] = {}
            for slot in run.placement:
                at = opened.get(slot.cluster, run.placed_ms)
                since[at] = since.get(at, 0) + len(slot.gpu_indices) * slot.gpu_milli_each
            for at, gpu in sorted(since.items()):
                used += held_within(gpu, at, now_ms, window)
                projected += held_within(gpu, at, max(now_ms, expected_end), window)
        out.append(BudgetView(row.name, spec, window, members, used, max(projected, used), running))
    return out


def _default_runtime_s(policies: Sequence[DocumentRow]) -> int:
    """The runtime the Policy in force expects of a job that gave none (one Policy at a time)."""
    for row in policies:
        if row.body is not None:
            return PolicySpec.model_validate_json(json.dumps(row.body.get("spec", {}))).default_runtime_s
    return PolicySpec().default_runtime_s


def _cohort(row: DocumentRow) -> object:
    return ((row.body or {}).get("spec") or {}).get("cohort")


__all__ = ["BudgetView", "budget_views"]
