"""``GetBudgets``' answer: each budget of ``projections.readmodel.budgets`` as its message.

Called by ``services.api.quota``.
"""

from __future__ import annotations

from projections.readmodel.budgets import budget_views
from projections.readmodel.reader import ReadModels
from services.api.auth import Principal
from services.api.pb import quota_pb2


async def budget_usages(
    reads: ReadModels, principal: Principal, tenant: str, now_ms: int
) -> list[quota_pb2.BudgetUsage]:
    return [
        quota_pb2.BudgetUsage(
            name=b.name,
            tenant=b.spec.tenant or "",
            cohort=b.spec.cohort or "",
            window=b.spec.window.value,
            timezone=b.spec.timezone,
            window_label=b.window.label,
            window_start_ms=b.window.start_ms,
            window_end_ms=b.window.end_ms,
            mode=b.spec.mode.value,
            gpu_hours=b.spec.gpu_hours,
            used_gpu_milli_ms=b.used_milli_ms,
            projected_gpu_milli_ms=b.projected_milli_ms,
            running_jobs=b.running_jobs,
            tenants=list(b.tenants),
        )
        for b in await budget_views(reads, principal.tenant_scope(), tenant, now_ms)
    ]


__all__ = ["budget_usages"]
