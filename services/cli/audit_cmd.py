"""Sub-commands: ``fedsched audit ...`` (archive the log, verify the hash chain)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from events.plumbing.signals import stop_on_signals
from services.cli.args import rfc3339_ms, time_range

if TYPE_CHECKING:
    from services.scheduler.core.policy.model import Quota


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    audit = sub.add_parser(
        "audit", help="the audit trail: archive, chain, verify, timeline, export, at (a past moment), whatif"
    )
    audit_sub = audit.add_subparsers(dest="audit", metavar="WHAT")

    chain = audit_sub.add_parser("chain", help="check the hash chain of the audit archive")
    chain.add_argument("--verify", action="store_true", required=True, help="walk every chain and report")
    chain.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    chain.add_argument("--json", action="store_true", help="print one JSON object")
    chain.set_defaults(handler=verify_chain)

    verify = audit_sub.add_parser(
        "verify",
        help="re-execute every recorded scheduling cycle and compare",
        epilog="exit status: 0 every cycle re-executed identically; 1 some cycle differs; 2 bad arguments;"
        " 3 no scheduling cycle recorded in the range, so nothing was verified",
    )
    verify.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    verify.add_argument("--namespace", default="", help="topic prefix the scheduler ran with")
    verify.add_argument("--since", type=rfc3339_ms, help="only cycles at or after this time (RFC 3339)")
    verify.add_argument("--until", type=rfc3339_ms, help="only cycles at or before this time (RFC 3339)")
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    verify.set_defaults(handler=run_verify)

    timeline = audit_sub.add_parser("timeline", help="every event of a job, with reasons, from the archive")
    timeline.add_argument("job_id")
    timeline.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    timeline.add_argument("--json", action="store_true", help="print one JSON object")
    timeline.set_defaults(handler=run_timeline)

    export = audit_sub.add_parser("export", help="the whole archive as JSON lines or CSV")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    export.add_argument("--out", help="file to write (default: standard output)")
    export.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    export.set_defaults(handler=run_export)

    at = audit_sub.add_parser("at", help="the fleet, queues and quotas as they stood at a moment")
    at.add_argument("time", type=rfc3339_ms, help="RFC 3339, e.g. 2026-12-01T09:00:00Z")
    at.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    at.add_argument("--namespace", default="")
    at.add_argument("--json", action="store_true", help="print one JSON object")
    at.set_defaults(handler=run_at)

    whatif = audit_sub.add_parser("whatif", help="replay recorded history under another policy, beside what happened")
    whatif.add_argument("--policy", required=True, help="policy document (YAML or JSON, as PolicyConfigured carries)")
    whatif.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    whatif.add_argument("--namespace", default="")
    whatif.add_argument("--since", type=rfc3339_ms, help="only submissions at or after this time (RFC 3339)")
    whatif.add_argument("--until", type=rfc3339_ms, help="only submissions at or before this time (RFC 3339)")
    whatif.add_argument("--json", action="store_true", help="print one JSON object")
    whatif.set_defaults(handler=run_whatif)

    archive = audit_sub.add_parser("archive", help="copy every event of every topic into the archive")
    archive.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    archive.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    archive.add_argument("--once", action="store_true", help="catch up and exit instead of following the log")
    archive.add_argument("--metrics", default="", help="serve /healthz and /metrics here (host:port; default: off)")
    archive.set_defaults(handler=run_archiver)


async def verify_chain(args: argparse.Namespace) -> int:
    import asyncpg

    from events.audit.archive import verify_chain as verify
    from services.cli.config import postgres_dsn

    pool = await asyncpg.create_pool(postgres_dsn(args.dsn), min_size=1, max_size=2)
    try:
        report = await verify(pool)
    finally:
        await pool.close()
    if args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "partitions": report.partitions,
                    "records": report.records,
                    "problems": [
                        {
                            "kind": p.kind.value,
                            "topic": p.topic,
                            "partition": p.partition,
                            "seq": p.seq,
                            "offset": p.offset,
                            "detail": p.detail,
                        }
                        for p in report.problems
                    ],
                }
            )
        )
    elif report.ok:
        print(f"OK: {report.records} records in {report.partitions} partition chains verified")
    else:
        print(f"BROKEN: {len(report.problems)} of {report.partitions} partition chains")
        for problem in report.problems:
            print(f"  {problem}")
    return 0 if report.ok else 1


async def run_archiver(args: argparse.Namespace) -> int:
    import asyncpg

    from events.audit.archive import AuditArchiver
    from events.catalog.topics import TOPICS
    from events.hosting.lag import Lag
    from events.log import open_log
    from events.plumbing.collector import tune_for_service
    from events.plumbing.logs import configure as configure_logging
    from events.plumbing.metrics import serving
    from services.cli.config import log_url, postgres_dsn

    configure_logging()
    tune_for_service()

    log = open_log(log_url(args.log))
    await log.start()
    await log.create_topics(TOPICS)
    pool = await asyncpg.create_pool(postgres_dsn(args.dsn), min_size=1, max_size=4)
    archiver = AuditArchiver(log, pool, [spec.name for spec in TOPICS])
    try:
        if args.once:
            progress = await archiver.catch_up()
            print(f"archived {progress.archived} records")
        else:
            stop = stop_on_signals()
            lag = Lag(log, "archiver", lambda: archiver.positions)
            async with serving(args.metrics, [archiver.samples], lag=lag):
                await archiver.run(stop)
    finally:
        await archiver.close()
        await pool.close()
        await log.close()
    return 0


async def run_verify(args: argparse.Namespace) -> int:
    from events.log import open_log
    from events.plumbing.collector import tune_for_service
    from services.audit.verify import verify
    from services.cli.config import log_url
    from services.scheduler.core.decide import INPUT_TOPICS

    time_range(args.since, args.until)
    tune_for_service()  # the whole folded history stays alive: full collections over it cost ~25%

    log = open_log(log_url(args.log))
    await log.start()
    prefix = f"{args.namespace}." if args.namespace else ""
    try:
        report = await verify(
            log, topics=tuple(prefix + t for t in INPUT_TOPICS), since_ms=args.since, until_ms=args.until
        )
    finally:
        await log.close()
    if report.cycles == 0 and not report.problems:
        # Nothing re-executed is no evidence either way: not "100% identical", and not success.
        if args.json:
            print(json.dumps(report.to_json()))
        else:
            print(
                f"nothing verified: no scheduling cycle recorded{_range_text(args.since, args.until)}"
                f" ({report.events_read} events read)"
            )
        return 3
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print("\n".join(report.lines()))
    return 0 if report.ok else 1


def _range_text(since_ms: int | None, until_ms: int | None) -> str:
    from events.wire.envelope import format_time

    since = "" if since_ms is None else f" from {format_time(since_ms)}"
    until = "" if until_ms is None else f" until {format_time(until_ms)}"
    return since + until


async def run_timeline(args: argparse.Namespace) -> int:
    import asyncpg

    from events.wire.envelope import format_time
    from services.audit.queries import timeline
    from services.cli.config import postgres_dsn
    from services.cli.main import CliError

    pool = await asyncpg.create_pool(postgres_dsn(args.dsn), min_size=1, max_size=2)
    try:
        events = await timeline(pool, args.job_id)
    finally:
        await pool.close()
    if not events:
        raise CliError(f"no archived event for job {args.job_id!r}", 3)
    if args.json:
        print(json.dumps({"job_id": args.job_id, "events": [asdict(e) for e in events]}, default=str))
        return 0
    for e in events:
        detail = " ".join(x for x in (e.reason, e.message) if x)
        print(f"{format_time(e.time_ms)}  {e.type:<24} {e.topic}[{e.partition}]@{e.offset}  {detail}")
    return 0


async def run_export(args: argparse.Namespace) -> int:
    import sys

    import asyncpg

    from services.audit.queries import export
    from services.cli.config import postgres_dsn

    pool = await asyncpg.create_pool(postgres_dsn(args.dsn), min_size=1, max_size=2)
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout  # noqa: SIM115, ASYNC230
    count = 0
    try:
        async for line in export(pool, args.format):
            out.write(line)
            count += 1
    finally:
        await pool.close()
        if args.out:
            out.close()
    if args.out:
        print(f"wrote {count} lines to {args.out}", file=sys.stderr)
    return 0


async def run_at(args: argparse.Namespace) -> int:
    from events.log import open_log
    from events.wire.envelope import format_time
    from services.audit.queries import state_at
    from services.cli.config import log_url

    moment = args.time
    log = open_log(log_url(args.log))
    await log.start()
    try:
        state = await state_at(log, moment, namespace=args.namespace)
    finally:
        await log.close()
    snapshot = state.snapshot(moment)
    fleet: dict[tuple[str, str], list[int]] = {}
    for node in snapshot.nodes:
        entry = fleet.setdefault((node.cluster, node.gpu_model or "-"), [0, 0, 0, 0])
        entry[0] += 1
        entry[1] += len(node.gpus)
        entry[2] += sum(g.free_milli for g in node.gpus) // 1000
        entry[3] += sum(1 for g in node.gpus if g.health.value == "ok")
    queues: dict[str, int] = {}
    for job in snapshot.pending:
        queues[job.priority_class.value] = queues.get(job.priority_class.value, 0) + 1
    quotas = [
        {
            "tenant": t.tenant_id,
            "resource": q.resource,
            "queue": q.queue or "default",
            "guaranteed": q.guaranteed,
            "limit": q.limit,
        }
        for t in snapshot.tenants
        for q in t.quotas
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "time_ms": moment,
                    "fleet": [
                        {
                            "cluster": c,
                            "gpu_model": m,
                            "nodes": v[0],
                            "gpus": v[1],
                            "free_gpus": v[2],
                            "healthy_gpus": v[3],
                        }
                        for (c, m), v in sorted(fleet.items())
                    ],
                    "running": len(snapshot.running),
                    "pending_by_priority": queues,
                    "quotas": quotas,
                }
            )
        )
        return 0
    print(f"as of {format_time(moment)}: {len(snapshot.running)} jobs running, {len(snapshot.pending)} waiting")
    print(f"{'cluster':<16}{'gpu model':<16}{'nodes':>7}{'gpus':>7}{'free':>7}{'healthy':>9}")
    for (cluster, model), (nodes, gpus, free, healthy) in sorted(fleet.items()):
        print(f"{cluster:<16}{model:<16}{nodes:>7}{gpus:>7}{free:>7}{healthy:>9}")
    for priority, count in sorted(queues.items()):
        print(f"waiting {priority}: {count}")
    for t in snapshot.tenants:
        for q in t.quotas:
            print(quota_line(t.tenant_id, q))
    return 0


UNBOUNDED = 2**62
"""The limit the scheduler's state gives a quota line without one."""


def quota_line(tenant: str, quota: Quota) -> str:
    """One quota as ``audit at`` prints it, amounts in the units of ``fedsched quota`` (``gpu:A100`` in GPUs,
    an unbounded limit as ``-``)."""
    from services.cli.quantities import unit_of

    scale, unit = unit_of(quota.resource)
    limit = "-" if quota.limit >= UNBOUNDED else f"{quota.limit / scale:g}"
    where = f"{tenant}/{quota.queue or 'default'}"
    return f"quota {where} {quota.resource}: guaranteed {quota.guaranteed / scale:g} limit {limit} ({unit})"


def comparison_lines(columns: dict[str, dict[str, Any]]) -> list[str]:
    """The whatif table: one row per figure, one column per outcome, each column as wide as its widest
    cell (a policy file's name makes a header of any length) and two spaces between columns."""
    rows: list[tuple[str, list[str]]] = []
    priorities = sorted({p for c in columns.values() for p in c["wait_by_priority"]})
    for priority in priorities:
        for stat in ("p50_s", "p95_s"):
            waits = [c["wait_by_priority"].get(priority, {}) for c in columns.values()]
            # No job of the class started in that column: no wait to show (not a wait of 0).
            rows.append((f"wait {priority} {stat}", [f"{w[stat]:.1f}" if w.get("jobs") else "-" for w in waits]))
    for key in ("preemptions", "gpu_allocation_pct", "never_started"):
        rows.append((key, [str(c[key]) for c in columns.values()]))
    tenants = sorted({t for c in columns.values() for t in c["cost_micro_by_tenant"]})
    for tenant in tenants:
        rows.append(
            (f"cost {tenant}", [f"{c['cost_micro_by_tenant'].get(tenant, 0) / 1e6:.2f}" for c in columns.values()])
        )
    label = max([len(r[0]) for r in rows], default=0)
    widths = [max(len(name), *(len(r[1][i]) for r in rows)) for i, name in enumerate(columns)]
    lines = ["".ljust(label) + "".join(f"  {n:>{w}}" for n, w in zip(columns, widths, strict=True))]
    lines += [r[0].ljust(label) + "".join(f"  {v:>{w}}" for v, w in zip(r[1], widths, strict=True)) for r in rows]
    return lines


async def run_whatif(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from events.log import open_log
    from services.audit.whatif import load_history, simulate
    from services.cli.config import log_url
    from services.cli.main import CliError
    from services.scheduler.core.state import policy_from_document

    try:
        document = yaml.safe_load(Path(args.policy).read_text(encoding="utf-8")) or {}  # noqa: ASYNC240
        candidate = policy_from_document(f"whatif:{Path(args.policy).name}", document)
    except (OSError, yaml.YAMLError, ValueError, TypeError) as error:
        raise CliError(f"--policy {args.policy}: {error}", 2) from None
    time_range(args.since, args.until)
    log = open_log(log_url(args.log))
    await log.start()
    try:
        history = await load_history(log, namespace=args.namespace, since_ms=args.since, until_ms=args.until)
    finally:
        await log.close()
    current = history.state.policy_config()
    columns = {
        "recorded": history.actual.summary(),
        f"simulated ({current.version})": simulate(history, current).summary(),
        f"simulated ({candidate.version})": simulate(history, candidate).summary(),
    }
    if args.json:
        print(json.dumps({"jobs": len(history.arrivals), "columns": columns}))
        return 0
    print(f"{len(history.arrivals)} recorded submissions replayed; policy in force: {current.version}")
    print("\n".join(comparison_lines(columns)))
    return 0
