"""``fedsched gov report``: fetch the read models and findings, compute the figures, hand them to a renderer.

Called by the CLI and by tests. Calls PostgreSQL (``fedsched_rm`` read models, through asyncpg) and the
event log (findings on the governance topic); the figures themselves are computed by the pure
``services.governance.figures``; ``services.cli.gov_render`` writes them out.
"""

from __future__ import annotations

import json
import time
from typing import Any

import asyncpg

from events.catalog.errors import EventError
from events.catalog.governance import GovernanceFinding
from events.catalog.topics import GOVERNANCE
from events.log.contract import EventLog, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode
from services.governance.figures import FindingRow, HeldRow, JobRow, QuotaRow, Report, UsageRow, build

SCHEMA = "fedsched_rm"


async def usage_rows(pool: asyncpg.Pool) -> list[UsageRow]:
    rows = await pool.fetch(
        f"SELECT tenant, cluster, gpu_model, hour_ms, allocated_milli_ms, used_milli_ms, idle_milli_ms,"
        f" cost_micro, currency, projects FROM {SCHEMA}.read_usage"
    )
    return [
        UsageRow(
            r["tenant"] or "",
            r["cluster"] or "",
            r["gpu_model"] or "",
            int(r["hour_ms"]),
            int(r["allocated_milli_ms"] or 0),
            int(r["used_milli_ms"] or 0),
            int(r["idle_milli_ms"] or 0),
            int(r["cost_micro"] or 0),
            r["currency"] or "",
            tuple((str(p), int(a), int(c)) for p, a, c in _json(r["projects"]) or []),
        )
        for r in rows
    ]


async def job_rows(pool: asyncpg.Pool) -> list[JobRow]:
    rows = await pool.fetch(
        f"SELECT entity_key, tenant, project, kind, priority_class, status, submitted_ms, placed_ms, waiting_ms,"
        f" timeline FROM {SCHEMA}.read_jobs WHERE NOT coalesce(orphan, false)"
    )
    return [
        JobRow(
            r["entity_key"],
            r["tenant"] or "",
            r["project"] or "",
            r["kind"] or "",
            r["priority_class"] or "",
            r["status"] or "",
            r["submitted_ms"],
            r["placed_ms"],
            r["waiting_ms"],
            tuple(
                (int(e[0]), str(e[1]), str(e[2]), str(e[3] or ""), str(e[4] or "")) for e in _json(r["timeline"]) or []
            ),
        )
        for r in rows
    ]


async def held_rows(pool: asyncpg.Pool) -> list[HeldRow]:
    """Runs holding GPUs now, with the model of their first replica's node (as their usage is counted)."""
    rows = await pool.fetch(
        f"SELECT j.tenant, j.project, j.cluster, j.placed_ms, j.placement, n.gpu_model"
        f" FROM {SCHEMA}.read_jobs j LEFT JOIN {SCHEMA}.read_nodes n"
        f" ON n.cluster = j.cluster AND n.node = j.placement -> 0 ->> 0"
        f" WHERE j.status IN ('placed', 'running') AND j.placed_ms IS NOT NULL AND NOT coalesce(j.orphan, false)"
    )
    return [
        HeldRow(
            # Spelt as the usage buckets spell a missing tenant or model (projections.stages.clusters.usage_key).
            r["tenant"] or "unknown",
            r["project"] or "",
            r["cluster"] or "",
            r["gpu_model"] or "none",
            int(r["placed_ms"]),
            sum(len(indices) * int(each) for _node, indices, each in _json(r["placement"]) or []),
        )
        for r in rows
    ]


async def quota_rows(pool: asyncpg.Pool) -> list[QuotaRow]:
    rows = await pool.fetch(f"SELECT tenant, queue, usage FROM {SCHEMA}.read_quota")
    out = []
    for r in rows:
        for line in _json(r["usage"]) or []:
            out.append(
                QuotaRow(
                    r["tenant"] or "",
                    r["queue"] or "",
                    str(line["resource"]),
                    line.get("gpu_model"),
                    int(line.get("used", 0)),
                    int(line.get("guaranteed", 0)),
                    line.get("limit"),
                )
            )
    return out


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


async def latest_time(pool: asyncpg.Pool) -> int:
    """The latest event time the read models know of (simulated fleets run ahead of the wall clock): the
    latest job time, or just inside the latest usage hour. (That hour's end, used before, counted jobs
    still waiting as waiting until then: up to an hour more than they had.)"""
    value = await pool.fetchval(
        f"SELECT greatest((SELECT max(hour_ms) + 1 FROM {SCHEMA}.read_usage),"
        f" (SELECT max(greatest(submitted_ms, placed_ms, ended_ms)) FROM {SCHEMA}.read_jobs))"
    )
    return int(value or 0)


async def gather(
    pool: asyncpg.Pool, event_log: EventLog | None, since_ms: int, until_ms: int, *, now_ms: int | None = None
) -> Report:
    """The report of the period. The usage figures cover whole hours, so runs still holding GPUs count up to
    the end of the last hour, but not past ``now_ms`` (default: the wall clock, or the read models' latest
    time if a simulated fleet runs ahead of it), where no usage sample can be yet."""
    if until_ms <= since_ms:
        raise ValueError(f"the report's period is empty: it ends at {until_ms} ms, not after its start {since_ms} ms")
    if now_ms is None:
        now_ms = max(int(time.time() * 1000), await latest_time(pool))
    findings = await finding_rows(event_log) if event_log is not None else []
    usage, jobs, quota, held = (
        await usage_rows(pool),
        await job_rows(pool),
        await quota_rows(pool),
        await held_rows(pool),
    )
    return build(since_ms, until_ms, usage, jobs, quota, findings, held, now_ms)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value
