"""Sub-commands: ``fedsched gov ...``: ``gov run`` (the governance service, which follows the log) here; the
commands of people, clients of the API with the caller's token, in ``gov_quota_cmd`` (quota requests and
decisions) and ``gov_report_cmd`` (findings, reports)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from events.plumbing.signals import stop_on_signals
from services.cli import gov_quota_cmd, gov_report_cmd
from services.cli.main import CliError

if TYPE_CHECKING:
    from services.governance.core.config import GovConfig


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    gov = sub.add_parser("gov", help="governance: quota approval, reclamation, findings, reports")
    gov_sub = gov.add_subparsers(dest="gov", metavar="WHAT")

    run = gov_sub.add_parser("run", help="run the governance service (follows the log, applies the rules)")
    run.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    run.add_argument("--config", help="governance settings (YAML or JSON)")
    run.add_argument("--namespace", default="")
    run.add_argument("--metrics", default="", help="serve /healthz and /metrics here (host:port; default: off)")
    run.set_defaults(handler=run_service)

    gov_quota_cmd.register(gov_sub)
    gov_report_cmd.register(gov_sub)


async def _open(flag: str | None) -> Any:
    from services.cli.config import log_url, started_log

    return await started_log(log_url(flag), "governance")


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
