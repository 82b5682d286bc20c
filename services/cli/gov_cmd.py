"""Sub-commands: ``fedsched gov ...`` (run governance, quota requests and decisions, findings, reports)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from events.plumbing.signals import stop_on_signals
from services.cli.args import positive_float, positive_int, rfc3339_ms
from services.cli.main import CliError

if TYPE_CHECKING:
    from services.governance.core.config import GovConfig
    from services.governance.core.state import GovState

_PERIOD = re.compile(r"^(\d+)([mhdw])$")
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    gov = sub.add_parser("gov", help="governance: quota approval, reclamation, findings, reports")
    gov_sub = gov.add_subparsers(dest="gov", metavar="WHAT")

    run = gov_sub.add_parser("run", help="run the governance service (follows the log, applies the rules)")
    run.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    run.add_argument("--config", help="governance settings (YAML or JSON)")
    run.add_argument("--namespace", default="")
    run.add_argument("--metrics", default="", help="serve /healthz and /metrics here (host:port; default: off)")
    run.set_defaults(handler=run_service)

    quota = gov_sub.add_parser("quota", help="quota requests: request, approve, reject, list")
    quota_sub = quota.add_subparsers(dest="quota", metavar="ACTION")
    request = quota_sub.add_parser("request", help="ask for more quota for a period")
    request.add_argument("--id", required=True, help="the request id (lowercase letters, digits, -._)")
    request.add_argument("--tenant", required=True)
    request.add_argument("--queue", default="default")
    request.add_argument("--resource", default="gpu", choices=("cpu", "memory", "gpu", "npu"))
    request.add_argument("--gpu-model")
    request.add_argument(
        "--amount", type=positive_int, required=True, help="in the resource's unit (milli-GPU for gpu)"
    )
    request.add_argument("--from", dest="start", type=rfc3339_ms, help="RFC 3339 start (default: now)")
    request.add_argument("--hours", type=positive_float, default=24.0, help="length of the period (default 24)")
    request.add_argument("--justification", required=True)
    request.add_argument("--by", default="cli", help="who asks")
    request.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    request.add_argument("--json", action="store_true", help="print the published event as JSON")
    request.set_defaults(handler=run_request)
    for action in ("approve", "reject"):
        decide = quota_sub.add_parser(action, help=f"{action} a pending quota request")
        decide.add_argument("request_id")
        decide.add_argument("--comment", default="")
        decide.add_argument("--by", default="operator", help="who decides")
        if action == "approve":
            decide.add_argument(
                "--amount", type=positive_int, help="approve less than asked, at least 1 (default: as asked)"
            )
            decide.add_argument(
                "--until", type=rfc3339_ms, help="RFC 3339 expiry (default: the end of the period asked)"
            )
        decide.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
        decide.add_argument("--json", action="store_true", help="print the published decision as JSON")
        decide.set_defaults(handler=run_decide, approve=action == "approve")
    listing = quota_sub.add_parser("list", help="quota requests and their state")
    listing.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=run_list)

    findings = gov_sub.add_parser("findings", help="governance findings from the log")
    findings.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    findings.add_argument("--json", action="store_true")
    findings.set_defaults(handler=run_findings)

    report = gov_sub.add_parser("report", help="utilisation, cost, waiting, interruptions, quota and findings")
    report.add_argument("--period", default="7d", help="how far back: 90m, 12h, 7d, 2w (default 7d)")
    report.add_argument("--until", type=rfc3339_ms, help="end of the period, RFC 3339 (default: the latest event time)")
    report.add_argument("--format", choices=("table", "csv", "json", "html"), default="table")
    report.add_argument("--json", dest="format", action="store_const", const="json", help="same as --format json")
    report.add_argument("--out", help="file to write (default: standard output)")
    report.add_argument("--dsn", help="PostgreSQL DSN of the read models (default: FEDSCHED_POSTGRES_DSN)")
    report.add_argument("--log", help="log URL for findings (default: FEDSCHED_LOG; '-' to leave findings out)")
    report.set_defaults(handler=run_report)


def period_ms(text: str) -> int:
    match = _PERIOD.match(text)
    if match is None:
        raise CliError(f"period must look like 90m, 12h, 7d or 2w, not {text!r}", exit_code=2)
    span = int(match.group(1)) * _UNIT_MS[match.group(2)]
    if span <= 0:
        raise CliError(f"period must be more than 0, not {text!r}", exit_code=2)
    return span


async def _open(flag: str | None) -> Any:
    from events.catalog.topics import TOPICS
    from events.log import open_log
    from services.cli.config import log_url

    event_log = open_log(log_url(flag))
    await event_log.start()
    await event_log.create_topics(TOPICS)
    return event_log


def governance_settings(path: str | Path, option: str) -> GovConfig:
    """Governance settings from a YAML or JSON file (``gov run --config``, ``up --governance``); a file that
    cannot be read or says something invalid is a clear error naming ``option``."""
    import yaml

    from services.governance.core.config import from_document

    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(document, dict):
            raise ValueError("must be a mapping of settings")
        return from_document(document)
    except (OSError, yaml.YAMLError, ValueError, TypeError) as error:
        raise CliError(f"{option} {path}: {error}", 2) from None


async def run_service(args: argparse.Namespace) -> int:
    from events.hosting.lag import Lag
    from events.plumbing.collector import tune_for_service
    from events.plumbing.logs import configure as configure_logging
    from events.plumbing.metrics import serving
    from services.governance.core.config import GovConfig
    from services.governance.host import GovernanceHost

    configure_logging()
    tune_for_service()

    config = governance_settings(args.config, "--config") if args.config else GovConfig()
    event_log = await _open(args.log)
    host = GovernanceHost(event_log, config, namespace=args.namespace)
    await host.start()
    stop = stop_on_signals()
    lag = Lag(event_log, "governance", lambda: host.positions)
    try:
        async with serving(args.metrics, [host.samples], lag=lag):
            await host.run(stop)
    finally:
        await host.close()
        await event_log.close()
    return 0


async def run_request(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from events.catalog.governance import QuotaRequestSubmitted
    from events.catalog.types import ResourceKind
    from events.log.publisher import Publisher, wall_clock_ms
    from services.cli.people_cmd import EXIT_CODES
    from services.governance.commands import submit_request
    from services.governance.core.quota import RequestIdInUse, request_problem

    now = wall_clock_ms()
    start = now if args.start is None else args.start
    try:
        submitted = QuotaRequestSubmitted(
            request_id=args.id,
            tenant=args.tenant,
            queue=args.queue,
            resource=ResourceKind(args.resource),  # the catalogue's models are strict: the enum, not its text
            gpu_model=args.gpu_model,
            amount=args.amount,
            period_start_ms=start,
            period_end_ms=start + int(args.hours * 3_600_000),
            justification=args.justification,
            requester=args.by,
        )
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "request"  # () for a check across fields
        raise CliError(f"invalid request: {where}: {first['msg']}", 2) from None
    problem = request_problem(submitted, now)
    if problem is not None:
        field, message = problem
        option = {"gpu_model": "--gpu-model", "period_end_ms": "--from/--hours"}.get(field, field)
        raise CliError(f"invalid request: {field} ({option}): {message}", 2)
    event_log = await _open(args.log)
    publisher = Publisher(event_log, "urn:fedsched:cli")
    await publisher.start()
    try:
        recorded, created = await submit_request(event_log, publisher, submitted, any_start=args.start is None)
    except RequestIdInUse as error:
        raise CliError(f"{error}; use a new --id", exit_code=EXIT_CODES["ALREADY_EXISTS"]) from None
    finally:
        await publisher.close()
        await event_log.close()
    if args.json:
        _print_event(recorded)
    else:
        hours = (recorded.period_end_ms - recorded.period_start_ms) / 3_600_000
        again = "" if created else " (already recorded)"
        print(f"requested {recorded.request_id}: {recorded.amount} {recorded.resource.value} for {hours} h{again}")
    return 0


async def run_decide(args: argparse.Namespace) -> int:
    from events.log.publisher import Publisher
    from services.cli.people_cmd import EXIT_CODES
    from services.governance.commands import decide_request
    from services.governance.core.quota import AlreadyDecided, DecisionError, RequestNotFound

    event_log = await _open(args.log)
    publisher = Publisher(event_log, "urn:fedsched:cli")
    await publisher.start()
    try:
        decision = await decide_request(
            event_log,
            publisher,
            args.request_id,
            approve=args.approve,
            by=args.by,
            comment=args.comment,
            approved_amount=getattr(args, "amount", None),
            expires_ms=getattr(args, "until", None),
        )
    except DecisionError as error:
        # The people commands' exit codes: an unknown id is not found, a second decision a conflict.
        status = {RequestNotFound: "NOT_FOUND", AlreadyDecided: "FAILED_PRECONDITION"}.get(
            type(error), "INVALID_ARGUMENT"
        )
        raise CliError(str(error), exit_code=EXIT_CODES[status]) from None
    finally:
        await publisher.close()
        await event_log.close()
    if args.json:
        _print_event(decision)
    else:
        print(f"{decision.event_type.rsplit('.', 1)[1]} {args.request_id}")
    return 0


def _print_event(event: Any) -> None:
    print(json.dumps({"event_type": event.event_type, **event.model_dump(mode="json")}, indent=2))


def request_rows(state: GovState) -> list[dict[str, Any]]:
    """One row per quota request of a ``GovState``: what was asked and, once approved, what was granted
    (the amount and its period; a grant may be less than asked). Amounts in the request's unit."""
    from events.catalog.governance import QuotaRequestApproved
    from services.cli.quantities import RAW_UNITS

    rows = []
    for request_id in sorted(state.requests):
        request = state.requests[request_id]
        s, d = request.submitted, request.decision
        status = "pending" if d is None else d.event_type.rsplit("Request", 1)[1].lower()
        decider = "" if d is None else (d.rule and f"rule {d.rule}") or f"{d.decided_by}"
        grant = d if isinstance(d, QuotaRequestApproved) else None
        rows.append(
            {
                "request_id": request_id,
                "tenant": s.tenant,
                "resource": s.resource.value,
                "gpu_model": s.gpu_model,
                "amount": s.amount,
                "granted": None if grant is None else grant.approved_amount,
                "unit": RAW_UNITS.get(s.resource.value, "units"),
                "granted_from_ms": None if grant is None else grant.effective_from_ms,
                "granted_until_ms": None if grant is None else grant.expires_ms,
                "status": status,
                "by": decider,
            }
        )
    return rows


async def run_list(args: argparse.Namespace) -> int:
    from events.wire.envelope import format_time
    from services.governance.commands import governance_state

    event_log = await _open(args.log)
    try:
        state = await governance_state(event_log)
    finally:
        await event_log.close()
    rows = request_rows(state)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("(no quota requests)")
    else:
        from services.cli.people_cmd import table

        headers = ["REQUEST", "TENANT", "RESOURCE", "GPU MODEL", "ASKED", "GRANTED", "UNIT", "UNTIL", "STATUS", "BY"]
        cells = [
            [
                r["request_id"],
                r["tenant"],
                r["resource"],
                r["gpu_model"],
                r["amount"],
                r["granted"],
                r["unit"],
                None if r["granted_until_ms"] is None else format_time(r["granted_until_ms"]),
                r["status"],
                r["by"],
            ]
            for r in rows
        ]
        print(table(headers, cells, blank="-"))
    return 0


async def run_findings(args: argparse.Namespace) -> int:
    from events.wire.envelope import format_time
    from services.governance.report import finding_rows

    event_log = await _open(args.log)
    try:
        rows = await finding_rows(event_log)
    finally:
        await event_log.close()
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        for r in rows:
            print(f"{format_time(r.time_ms)}  {r.kind:<16} {r.rule:<18} {r.subject}  {r.message}")
    return 0


async def run_report(args: argparse.Namespace) -> int:
    import asyncpg

    from projections.readmodel.reader import ReadModels
    from services.cli.config import postgres_dsn
    from services.cli.gov_render import render
    from services.governance.report import gather, latest_time

    span = period_ms(args.period)
    pool = await asyncpg.create_pool(postgres_dsn(args.dsn), min_size=1, max_size=2)
    reads = ReadModels(pool)
    event_log = None if args.log == "-" else await _open(args.log)
    try:
        until = await latest_time(reads) if args.until is None else args.until
        report = await gather(reads, event_log, until - span, until)
    finally:
        await pool.close()
        if event_log is not None:
            await event_log.close()
    text = render(report, args.format)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")  # noqa: ASYNC240
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
