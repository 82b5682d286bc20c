"""Sub-commands: ``fedsched audit ...`` (archive the log, verify the hash chain)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    audit = sub.add_parser("audit", help="the audit trail: archive, verify")
    audit_sub = audit.add_subparsers(dest="audit", metavar="WHAT")

    chain = audit_sub.add_parser("chain", help="check the hash chain of the audit archive")
    chain.add_argument("--verify", action="store_true", required=True, help="walk every chain and report")
    chain.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    chain.add_argument("--json", action="store_true", help="print one JSON object")
    chain.set_defaults(handler=verify_chain)

    verify = audit_sub.add_parser("verify", help="re-execute every recorded scheduling cycle and compare")
    verify.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    verify.add_argument("--namespace", default="", help="topic prefix the scheduler ran with")
    verify.add_argument("--since", help="only cycles at or after this time (RFC 3339)")
    verify.add_argument("--until", help="only cycles at or before this time (RFC 3339)")
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    verify.set_defaults(handler=run_verify)

    archive = audit_sub.add_parser("archive", help="copy every event of every topic into the archive")
    archive.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    archive.add_argument("--dsn", help="PostgreSQL DSN of the archive (default: FEDSCHED_POSTGRES_DSN)")
    archive.add_argument("--once", action="store_true", help="catch up and exit instead of following the log")
    archive.set_defaults(handler=run_archiver)


async def verify_chain(args: argparse.Namespace) -> int:
    import asyncpg

    from events.audit.archive import verify_chain as verify
    from services.config import postgres_dsn

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
    from events.log import open_log
    from events.topics import TOPICS
    from services.config import log_url, postgres_dsn

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
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await archiver.run(stop)
    finally:
        await archiver.close()
        await pool.close()
        await log.close()
    return 0


async def run_verify(args: argparse.Namespace) -> int:
    from events.envelope import parse_time
    from events.log import open_log
    from services.audit.verify import verify
    from services.cli.main import CliError
    from services.config import log_url
    from services.scheduler.host import INPUT_TOPICS

    try:
        since = parse_time(args.since) if args.since else None
        until = parse_time(args.until) if args.until else None
    except ValueError as error:
        raise CliError(f"--since/--until: not an RFC 3339 time: {error}", 2) from None
    log = open_log(log_url(args.log))
    await log.start()
    prefix = f"{args.namespace}." if args.namespace else ""
    try:
        report = await verify(log, topics=tuple(prefix + t for t in INPUT_TOPICS), since_ms=since, until_ms=until)
    finally:
        await log.close()
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        rate = f", {report.events_read / report.seconds:,.0f} events/s" if report.seconds else ""
        print(
            f"{report.cycles} cycles, {report.decisions} decisions re-executed: "
            f"{report.identical_pct:.2f}% identical ({report.events_read} events read in {report.seconds:.2f} s{rate})"
        )
        for diff in report.differences[:20]:
            print(f"  {diff.cycle_id} {diff.decision_id}: recorded {diff.recorded!r} replayed {diff.replayed!r}")
    return 0 if not report.differences else 1
