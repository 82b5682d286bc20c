"""Sub-command: ``fedsched scheduler``, the federation scheduler as its own process."""

from __future__ import annotations

import argparse

from events.plumbing.collector import tune_for_service
from events.plumbing.logs import configure as configure_logging
from events.plumbing.signals import stop_on_signals


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("scheduler", help="run the federation scheduler (leader or hot standby)")
    parser.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    parser.add_argument("--namespace", default="", help="prefix of every topic and group (default: none)")
    parser.add_argument("--idle-cycle-ms", type=int, default=5_000, help="cycle at least this often while jobs wait")
    parser.add_argument("--metrics", default="", help="serve /healthz and /metrics here (host:port; default: off)")
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    from events.hosting.lag import Lag
    from events.plumbing.metrics import serving
    from services.cli.config import log_url, started_log
    from services.scheduler.host import SchedulerHost

    configure_logging()

    tune_for_service()
    log = await started_log(log_url(args.log), "scheduler", topics=not args.namespace)
    host = SchedulerHost(log, namespace=args.namespace, idle_cycle_ms=args.idle_cycle_ms)
    await host.start()
    stop = stop_on_signals()
    lag = Lag(log, "scheduler", lambda: host.positions)
    try:
        async with serving(args.metrics, [host.samples], lag=lag):
            await host.run(stop)
    finally:
        await host.close()
        await log.close()
    return 0
