"""Sub-command: ``fedsched scheduler``, the federation scheduler as its own process."""

from __future__ import annotations

import argparse
import logging

from services.runtime.collector import tune_for_service
from services.runtime.signals import stop_on_signals


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("scheduler", help="run the federation scheduler (leader or hot standby)")
    parser.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    parser.add_argument("--namespace", default="", help="prefix of every topic and group (default: none)")
    parser.add_argument("--idle-cycle-ms", type=int, default=5_000, help="cycle at least this often while jobs wait")
    parser.add_argument("--metrics", default="", help="serve /healthz and /metrics here (host:port; default: off)")
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    from events.log import open_log
    from events.topics import TOPICS
    from services.config import log_url
    from services.scheduler.host import SchedulerHost

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    tune_for_service()
    log = open_log(log_url(args.log))
    await log.start()
    if not args.namespace:
        await log.create_topics(TOPICS)
    host = SchedulerHost(log, namespace=args.namespace, idle_cycle_ms=args.idle_cycle_ms)
    await host.start()
    server = None
    if args.metrics:
        from services.runtime.metrics import Metrics, scheduler_samples

        metrics = Metrics()
        metrics.add_source(lambda: scheduler_samples(host))
        bind, _, port = args.metrics.rpartition(":")
        server = await metrics.serve(bind, int(port))
    stop = stop_on_signals()
    try:
        await host.run(stop)
    finally:
        if server is not None:
            server.close()
        await host.close()
        await log.close()
    return 0
