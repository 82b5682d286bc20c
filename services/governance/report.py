"""The governance report: fetch the read models and findings, compute the figures.

Called by the API's ``GetReport`` through ``services.governance.api_reads`` (``fedsched gov report`` is
its client) and by tests. Calls the read models' reader (``projections.readmodel.reader``) and the
event log (findings on the governance topic, ``services.governance.topic``); the figures themselves are
computed by the pure ``services.governance.core.figures``; ``services.cli.gov_render`` writes them out.

Scoped to some tenants (``tenants``; ``None``: all), every input is of those tenants alone (the read
models' rows in SQL, findings by their tenant: a finding without one is left out), so no figure of the
report counts another tenant's work: the totals per cluster or priority class are the tenants' own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from events.log.contract import EventLog
from projections.readmodel.budgets import budget_views
from projections.readmodel.reader import ReadModels
from services.governance.core.figures import (
    FindingRow,
    HeldRow,
    JobRow,
    QuotaRow,
    Report,
    UsageRow,
    build,
    gpu_hours,
)
from services.governance.topic import findings

Scope = Sequence[str] | None
"""The tenants a report counts; ``None``: every tenant."""


async def usage_rows(reads: ReadModels, tenants: Scope = None) -> list[UsageRow]:
    return [
        UsageRow(
            u.tenant,
            u.cluster,
            u.gpu_model,
            u.hour_ms,
            u.allocated_milli_ms,
            u.used_milli_ms,
            u.idle_milli_ms,
            u.cost_micro,
            u.currency,
            u.projects,
            u.kind,
            u.samples,
        )
        for u in await reads.usage_hours(tenants)
    ]


async def job_rows(reads: ReadModels, tenants: Scope = None) -> list[JobRow]:
    return [
        JobRow(
            j.job_id,
            j.tenant,
            j.project,
            j.kind,
            j.priority_class,
            j.status,
            j.submitted_ms,
            j.placed_ms,
            j.waiting_ms,
            j.timeline,
        )
        for j in await reads.job_histories(tenants)
    ]


async def held_rows(reads: ReadModels, tenants: Scope = None) -> list[HeldRow]:
    """Runs holding GPUs or NPUs now, as their usage is counted: a row per device kind, cluster and model a
    run holds, each replica under the model of its own node and the cluster of its part (a run over nodes of
    several models, or a service spread over clusters, is several rows; a part counts from its opening)."""
    rows = []
    for r in await reads.held_runs(tenants):
        # Spelt as the usage buckets spell a missing tenant or model (projections.stages.clusters.usage_key).
        tenant = r.tenant or "unknown"
        models = r.slot_models or ((r.gpu_model, r.npu_model),) * len(r.placement)
        opened = {p.cluster: p.opened_ms for p in r.parts}  # a spread run's parts: each from its opening
        gpus: dict[tuple[str, str], int] = {}
        npus: dict[tuple[str, str], int] = {}
        for slot, (gpu_model, npu_model) in zip(r.placement, models, strict=True):
            cluster = slot.cluster or r.cluster
            if slot.gpu_indices:
                key = (cluster, gpu_model or "none")
                gpus[key] = gpus.get(key, 0) + len(slot.gpu_indices) * slot.gpu_milli_each
            if slot.npu_indices:
                key = (cluster, npu_model or "none")
                npus[key] = npus.get(key, 0) + 1000 * len(slot.npu_indices)
        if not gpus and not npus:  # a run of neither still holds its place in the GPU tables, as before
            gpus[(r.cluster, r.gpu_model or "none")] = 0
        for kind, held in (("gpu", gpus), ("npu", npus)):
            rows += [
                HeldRow(tenant, r.project, cluster, model, opened.get(cluster, r.placed_ms), milli, kind)
                for (cluster, model), milli in held.items()
            ]
    return rows


async def quota_rows(reads: ReadModels, tenants: Scope = None) -> list[QuotaRow]:
    return [
        QuotaRow(q.tenant, q.queue, line.resource, line.gpu_model, line.used, line.guaranteed, line.limit)
        for q in await reads.quota(tenants)
        for line in q.usage
    ]


async def finding_rows(event_log: EventLog, tenants: Scope = None, *, namespace: str = "") -> list[FindingRow]:
    """Every finding on the governance topic (of ``tenants`` only, when given), in the order recorded."""
    return [
        row
        async for _, row in findings(event_log, namespace=namespace)
        if tenants is None or (row.tenant is not None and row.tenant in tenants)
    ]


async def latest_time(reads: ReadModels, tenants: Scope = None) -> int:
    """The latest event time the read models know of (simulated fleets run ahead of the wall clock): the
    latest job time, or just inside the latest usage hour. (That hour's end, used before, counted jobs
    still waiting as waiting until then: up to an hour more than they had.)"""
    return await reads.latest_time_ms(tenants)


async def gather(
    reads: ReadModels,
    event_log: EventLog | None,
    since_ms: int,
    until_ms: int,
    *,
    now_ms: int | None = None,
    tenants: Scope = None,
) -> Report:
    """The report of the period, of ``tenants`` only when given. The usage figures cover whole hours, so
    runs still holding GPUs count up to the end of the last hour, but not past ``now_ms`` (default: the
    wall clock, or the read models' latest time if a simulated fleet runs ahead of it), where no usage
    sample can be yet."""
    if until_ms <= since_ms:
        raise ValueError(f"the report's period is empty: it ends at {until_ms} ms, not after its start {since_ms} ms")
    if now_ms is None:
        now_ms = max(int(time.time() * 1000), await latest_time(reads, tenants))
    found = await finding_rows(event_log, tenants) if event_log is not None else []
    usage, jobs, quota, held = (
        await usage_rows(reads, tenants),
        await job_rows(reads, tenants),
        await quota_rows(reads, tenants),
        await held_rows(reads, tenants),
    )
    report = build(since_ms, until_ms, usage, jobs, quota, found, held, now_ms)
    report.budgets = [
        {
            "budget": b.name,
            "for": b.spec.tenant or f"cohort {b.spec.cohort}",
            "window": b.window.label,
            "mode": b.spec.mode.value,
            "gpu_hours": b.spec.gpu_hours,
            "used_gpu_hours": gpu_hours(b.used_milli_ms),
            "left_gpu_hours": gpu_hours(b.left_milli_ms),
            "projected_gpu_hours": gpu_hours(b.projected_milli_ms),
            "used_pct": b.used_milli_ms * 100 // b.limit_milli_ms,
        }
        for b in await budget_views(reads, tenants, "", now_ms)
        # A cohort's budget counts its members: in a scoped report only when they are all in scope.
        if tenants is None or set(b.tenants) <= set(tenants)
    ]
    return report
