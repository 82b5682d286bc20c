"""``fedsched gov report``: fetch the read models and findings, compute the figures, hand them to a renderer.

Called by the CLI and by tests. Calls the read models' reader (``projections.readmodel.reader``) and the
event log (findings on the governance topic); the figures themselves are computed by the pure
``services.governance.core.figures``; ``services.cli.gov_render`` writes them out.
"""

from __future__ import annotations

import time

from events.catalog.errors import EventError
from events.catalog.governance import GovernanceFinding
from events.catalog.topics import GOVERNANCE
from events.log.contract import EventLog, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode
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


async def usage_rows(reads: ReadModels) -> list[UsageRow]:
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
        )
        for u in await reads.usage_hours()
    ]


async def job_rows(reads: ReadModels) -> list[JobRow]:
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
        for j in await reads.job_histories()
    ]


async def held_rows(reads: ReadModels) -> list[HeldRow]:
    """Runs holding GPUs now, with the model of their first replica's node (as their usage is counted)."""
    return [
        HeldRow(
            # Spelt as the usage buckets spell a missing tenant or model (projections.stages.clusters.usage_key).
            r.tenant or "unknown",
            r.project,
            r.cluster,
            r.gpu_model or "none",
            r.placed_ms,
            sum(len(slot.gpu_indices) * slot.gpu_milli_each for slot in r.placement),
        )
        for r in await reads.held_runs()
    ]


async def quota_rows(reads: ReadModels) -> list[QuotaRow]:
    return [
        QuotaRow(q.tenant, q.queue, line.resource, line.gpu_model, line.used, line.guaranteed, line.limit)
        for q in await reads.quota(None)
        for line in q.usage
    ]


async def finding_rows(event_log: EventLog, *, namespace: str = "") -> list[FindingRow]:
    reader = await event_log.reader()
    out: list[FindingRow] = []
    try:
        tp = TopicPartition((f"{namespace}." if namespace else "") + GOVERNANCE.name, 0)
        async for batch in read_to_end(reader, tp):
            for record in batch:
                try:
                    envelope = decode(record.headers, record.value)
                except EventError:
                    continue
                f = envelope.data
                if isinstance(f, GovernanceFinding):
                    subject = f.job_id or (f"{f.cluster}/{f.node}" if f.node else f.cluster) or f.finding_id
                    out.append(FindingRow(envelope.time_ms, f.kind.value, f.rule, f.tenant, str(subject), f.message))
    finally:
        await reader.close()
    return out


async def latest_time(reads: ReadModels) -> int:
    """The latest event time the read models know of (simulated fleets run ahead of the wall clock): the
    latest job time, or just inside the latest usage hour. (That hour's end, used before, counted jobs
    still waiting as waiting until then: up to an hour more than they had.)"""
    return await reads.latest_time_ms()


async def gather(
    reads: ReadModels, event_log: EventLog | None, since_ms: int, until_ms: int, *, now_ms: int | None = None
) -> Report:
    """The report of the period. The usage figures cover whole hours, so runs still holding GPUs count up to
    the end of the last hour, but not past ``now_ms`` (default: the wall clock, or the read models' latest
    time if a simulated fleet runs ahead of it), where no usage sample can be yet."""
    if until_ms <= since_ms:
        raise ValueError(f"the report's period is empty: it ends at {until_ms} ms, not after its start {since_ms} ms")
    if now_ms is None:
        now_ms = max(int(time.time() * 1000), await latest_time(reads))
    findings = await finding_rows(event_log) if event_log is not None else []
    usage, jobs, quota, held = (
        await usage_rows(reads),
        await job_rows(reads),
        await quota_rows(reads),
        await held_rows(reads),
    )
    report = build(since_ms, until_ms, usage, jobs, quota, findings, held, now_ms)
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
        for b in await budget_views(reads, None, "", now_ms)
    ]
    return report
