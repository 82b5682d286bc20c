"""Sub-commands: ``fedsched gov findings`` and ``fedsched gov report``, clients of the API's
``GovernanceService`` (``ListFindings``, ``GetReport``; roles admin, operator and auditor).

Registered by ``services.cli.gov_cmd``. The options, the token and the exit codes are those of
``services.cli.people_cmd``. The server computes the report from the read models and the findings,
scoped to the token's tenants; it comes back as typed tables, turned here into the ``Report`` that
``services.cli.gov_render`` writes as a table, CSV, JSON or an HTML page with charts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.cli.args import positive_int, retire, rfc3339_ms
from services.cli.main import CliError
from services.cli.people_cmd import api_command, client_options, every_page, when

if TYPE_CHECKING:
    from services.api.client import Client
    from services.governance.core.figures import Report

_PERIOD = re.compile(r"^(\d+)([mhdw])$")
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}


def register(gov_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    findings = gov_sub.add_parser(
        "findings", parents=[client_options()], help="governance findings, in the order recorded (through the API)"
    )
    findings.add_argument("--tenant", default="", help="only this tenant's")
    findings.add_argument("--limit", type=positive_int, help="at most this many (default: every one)")
    retire(findings, "--log")
    findings.set_defaults(handler=api_command(list_findings))

    report = gov_sub.add_parser(
        "report",
        parents=[client_options(json_option=False)],
        help="utilisation, cost, waiting, interruptions, quota and findings (through the API)",
    )
    report.add_argument("--period", default="7d", help="how far back: 90m, 12h, 7d, 2w (default 7d)")
    report.add_argument("--until", type=rfc3339_ms, help="end of the period, RFC 3339 (default: the latest event time)")
    report.add_argument("--tenant", default="", help="only this tenant's figures (default: every tenant you may see)")
    report.add_argument("--format", choices=("table", "csv", "json", "html"), default="table")
    report.add_argument("--json", dest="format", action="store_const", const="json", help="same as --format json")
    report.add_argument("--out", help="file to write (default: standard output)")
    retire(report, "--dsn", "--log")
    report.set_defaults(handler=api_command(show_report), json=False)


def period_ms(text: str) -> int:
    match = _PERIOD.match(text)
    if match is None:
        raise CliError(f"period must look like 90m, 12h, 7d or 2w, not {text!r}", exit_code=2)
    span = int(match.group(1)) * _UNIT_MS[match.group(2)]
    if span <= 0:
        raise CliError(f"period must be more than 0, not {text!r}", exit_code=2)
    return span


async def list_findings(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import governance_pb2

    request = governance_pb2.ListFindingsRequest(tenant=args.tenant)
    found, _ = await every_page(client, client.governance.ListFindings, request, "findings", args.limit)
    rows = [
        {
            "time_ms": f.time_ms,
            "kind": f.kind,
            "rule": f.rule,
            "tenant": f.tenant or None,
            "subject": f.subject,
            "message": f.message,
        }
        for f in found
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    for r in [] if args.json else rows:
        print(f"{when(r['time_ms'])}  {r['kind']:<16} {r['rule']:<18} {r['subject']}  {r['message']}")
    return 0


async def show_report(args: argparse.Namespace, client: Client) -> int:
    from services.api.pb import governance_pb2
    from services.cli.gov_render import render

    request = governance_pb2.GetReportRequest(period_ms=period_ms(args.period), tenant=args.tenant)
    if args.until is not None:
        request.until_ms = args.until
    text = render(report_of(await client.call(client.governance.GetReport, request)), args.format)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")  # noqa: ASYNC240
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def report_of(message: Any) -> Report:
    """The ``GovernanceReport`` message as the ``Report`` the renderer takes (a table it does not know is
    left out)."""
    from services.governance.core.figures import TABLES, Report

    tables = {
        t.name: [dict(zip(t.columns, (_value(c) for c in row.cells), strict=True)) for row in t.rows]
        for t in message.tables
        if t.name in TABLES
    }
    return Report(
        since_ms=message.since_ms,
        until_ms=message.until_ms,
        usage_since_ms=message.usage_since_ms,
        usage_until_ms=message.usage_until_ms,
        notes=list(message.notes),
        **tables,
    )


def _value(cell: Any) -> object:
    kind = cell.WhichOneof("value")
    return None if kind is None else getattr(cell, kind)
