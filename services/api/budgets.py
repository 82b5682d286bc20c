"""What ``fedsched budget`` shows: each Budget document in force in its current window, with the GPU time
used, what is left and what the window is heading for.

Called by ``services.api.quota`` (``GetBudgets``). Reads the documents and the usage read models
(``ReadModels``: the Budget and Tenant documents, the usage hours of runs that ended, the runs holding GPUs
now), the same usage projection governance's report reads; computes the window with the zone database
(``events.plumbing.zones``) and ``events.catalog.budget_windows``, as governance opens it.

Used counts the GPU time runs held from placement to end within the window: the runs that ended (by the
hour of the usage projection) and those holding GPUs now, until now. Projected adds what those would hold
if they ran on to the window's end. The scheduler enforces a hard budget on the same rule, from the log
(``services.scheduler.core.policy.budgets``), so the two may differ by what the read models have not
folded yet, and by a part of an hour at a window's edge in a zone whose offset is not whole hours.
"""

from __future__ import annotations

from collections.abc import Sequence

from events.catalog.budget_windows import held_within, window_at
from events.catalog.documents import BudgetSpec, BudgetWindow, Kind
from events.plumbing.zones import UnknownZone, offsets
from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.typed import DocumentRow
from services.api.auth import Principal
from services.api.pb import quota_pb2


async def budget_usages(
    reads: ReadModels, principal: Principal, tenant: str, now_ms: int
) -> list[quota_pb2.BudgetUsage]:
    rows = await reads.documents(principal.tenant_scope(), Kind.BUDGET.value)
    tenants = await reads.documents(None, Kind.TENANT.value)
    held = await reads.held_runs()
    out = []
    for row in rows:
        if row.body is None:
            continue
        spec = BudgetSpec.model_validate_json(_json(row.body.get("spec", {})))
        if tenant and spec.tenant != tenant:
            continue
        try:
            window = window_at(BudgetWindow(spec.window), now_ms, offsets(spec.timezone))
        except UnknownZone:
            continue
        members = (
            (spec.tenant,)
            if spec.tenant
            else tuple(
                sorted(t.name for t in tenants if ((t.body or {}).get("spec") or {}).get("cohort") == spec.cohort)
            )
        )
        used = await reads.allocated_within(members, window.start_ms, window.end_ms)
        projected, running = used, 0
        for run in held:
            if run.tenant not in members:
                continue
            gpu = sum(len(slot.gpu_indices) * slot.gpu_milli_each for slot in run.placement)
            running += 1
            used += held_within(gpu, run.placed_ms, now_ms, window)
            projected += held_within(gpu, run.placed_ms, window.end_ms, window)
        out.append(
            quota_pb2.BudgetUsage(
                name=row.name,
                tenant=spec.tenant or "",
                cohort=spec.cohort or "",
                window=spec.window.value,
                timezone=spec.timezone,
                window_label=window.label,
                window_start_ms=window.start_ms,
                window_end_ms=window.end_ms,
                mode=spec.mode.value,
                gpu_hours=spec.gpu_hours,
                used_gpu_milli_ms=used,
                projected_gpu_milli_ms=max(projected, used),
                running_jobs=running,
                tenants=list(members),
            )
        )
    return out


def _cohort(row: DocumentRow) -> object:
    return ((row.body or {}).get("spec") or {}).get("cohort")


def _json(value: object) -> str:
    import json

    return json.dumps(value)


__all__: Sequence[str] = ["budget_usages"]
