"""Sub-commands: ``fedsched projections ...``, the hosts of the projections.

``worker`` runs one faust-streaming worker of the distributed host (``projections.faust.app``);
start several and they share the partitions. Each sub-command is one ``_register_<name>`` function
added in ``register``, with its handler beside it; heavy imports stay inside the handlers so
``fedsched --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from events.plumbing.signals import stop_on_signals
from projections.readmodel.rows.tables import REBUILD_SCHEMA, SCHEMA


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    projections = sub.add_parser("projections", help="run or rebuild the projections (profiles, quotas, read models)")
    commands = projections.add_subparsers(dest="projections", metavar="COMMAND", required=True)
    _register_worker(commands)
    _register_run(commands)
    _register_rebuild(commands)


# -- run and rebuild (the in-process host) -------------------------------------------------------------


def _register_run(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    run = commands.add_parser("run", help="the in-process projections host (the embedded mode's), as a process")
    run.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    run.add_argument("--dsn", help="PostgreSQL of the read models (default: FEDSCHED_POSTGRES_DSN)")
    run.add_argument("--schema", default=SCHEMA, help="schema of the read models")
    run.add_argument("--metrics", default="", help="serve /healthz and /metrics here (host:port; default: off)")
    run.set_defaults(handler=run_inprocess)


def _register_rebuild(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    rebuild = commands.add_parser(
        "rebuild", help="replay the log from offset 0 into fresh tables and compare them with the live ones"
    )
    rebuild.add_argument("--log", help="log URL (default: FEDSCHED_LOG)")
    rebuild.add_argument("--dsn", help="PostgreSQL of the read models (default: FEDSCHED_POSTGRES_DSN)")
    rebuild.add_argument("--schema", default=SCHEMA, help="schema of the live read models")
    rebuild.add_argument("--into", default=REBUILD_SCHEMA, help="schema to rebuild into (dropped first)")
    rebuild.add_argument("--json", action="store_true", help="print one JSON object")
    rebuild.set_defaults(handler=run_rebuild)


async def run_inprocess(args: argparse.Namespace) -> int:
    from events.plumbing.collector import tune_for_service
    from events.plumbing.logs import configure as configure_logging

    configure_logging()
    tune_for_service()

    from events.hosting.lag import Lag
    from events.plumbing.metrics import serving
    from projections.inprocess.runner import ProjectionRunner
    from services.cli.config import log_url, postgres_dsn, started_log, started_pool

    log = await started_log(log_url(args.log), "projections", topics=False)
    pool = await started_pool(postgres_dsn(args.dsn), "projections", 4)
    runner = ProjectionRunner(log, pool, schema=args.schema)
    await runner.start()
    stop = stop_on_signals()
    lag = Lag(log, "projections", runner.positions)
    try:
        async with serving(args.metrics, [runner.samples], lag=lag):
            await runner.run(stop)
    finally:
        await runner.close()
        await pool.close()
        await log.close()
    return 0


async def run_rebuild(args: argparse.Namespace) -> int:
    import json
    import time

    import asyncpg

    from events.log import open_log
    from events.plumbing.collector import tune_for_service
    from projections.inprocess.runner import ProjectionRunner
    from projections.readmodel import writer as readmodels
    from projections.readmodel.reader import ReadModels
    from services.cli.config import log_url, postgres_dsn
    from services.cli.main import CliError

    if args.into == args.schema:
        raise CliError("--into must differ from --schema: the rebuild drops its target first", 2)
    tune_for_service()  # the whole fleet's and every open job's entities stay alive while the log is replayed
    log = open_log(log_url(args.log))
    await log.start()
    pool = await asyncpg.create_pool(postgres_dsn(args.dsn), min_size=1, max_size=4)
    try:
        await readmodels.drop_schema(pool, args.into)
        runner = ProjectionRunner(log, pool, schema=args.into, publish=False)
        await runner.start()
        started = time.perf_counter()
        events = await runner.catch_up()
        seconds = time.perf_counter() - started
        await runner.close()
        rebuilt = await ReadModels(pool, args.into).checksums()
        live = await ReadModels(pool, args.schema).checksums()
    finally:
        await pool.close()
        await log.close()
    differing = sorted(name for name in rebuilt if rebuilt[name] != live.get(name))
    if args.json:
        print(
            json.dumps(
                {
                    "events": events,
                    "seconds": round(seconds, 2),
                    "equal": not differing,
                    "differing": differing,
                    "rebuilt": rebuilt,
                    "live": live,
                }
            )
        )
    else:
        print(f"rebuilt {events} events into {args.into} in {seconds:.1f} s")
        for name in sorted(rebuilt):
            mark = "equal" if rebuilt[name] == live.get(name) else "DIFFERS"
            print(f"  {name:<22} rebuilt {rebuilt[name]:<28} live {live.get(name, '-'):<28} {mark}")
    return 0 if not differing else 1


# -- worker ---------------------------------------------------------------------------------------------


def _register_worker(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    worker = commands.add_parser(
        "worker",
        help="a faust-streaming worker of the distributed projections (run several to share the load)",
        description="Fold the source topics into resource profiles, quota usage, job views, usage and "
        "cost, and workload shapes; publish profile and quota events; write the PostgreSQL read models.",
    )
    worker.add_argument("--log", help="the Kafka log, kafka://host:port[,host:port] (default: FEDSCHED_LOG)")
    worker.add_argument("--dsn", help="PostgreSQL of the read models (default: FEDSCHED_POSTGRES_DSN)")
    worker.add_argument("--store", choices=("memory", "rocksdb"), default="memory", help="table store (default memory)")
    worker.add_argument("--data-dir", type=Path, help="faust's data directory (tables on disk with rocksdb)")
    worker.add_argument("--web-port", type=int, help="serve faust's web views on this port (default: no web server)")
    worker.add_argument(
        "--app-id",
        default="fedsched-projections",
        help="name of the worker group: its consumer group and internal topics are <app-id>.s<entity format>",
    )
    worker.add_argument("--topic-prefix", default="", help="read and write <prefix>.fedsched.* topics (default none)")
    worker.add_argument("--schema", default=SCHEMA, help="PostgreSQL schema of the read models")
    worker.add_argument("--partitions", type=int, default=6, help="partitions of each stage's topic and table")
    worker.add_argument("--batch", type=int, default=2000, help="records an agent takes at a time")
    worker.add_argument("--session-timeout-s", type=float, default=10.0, help="Kafka group session timeout")
    worker.add_argument("--loglevel", default="warning", help="log level (default warning)")
    worker.add_argument("--metrics", default="", help="serve /healthz and /metrics here (host:port; default: off)")
    worker.add_argument(
        "--lag-every-s", type=float, default=15.0, help="how often the consumer lag is measured (default 15)"
    )
    worker.set_defaults(handler=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    import faust

    from events.plumbing.collector import tune_for_service
    from projections.faust.app import build_app
    from projections.faust.config import WorkerConfig
    from services.cli.config import log_url, postgres_dsn
    from services.cli.main import CliError

    url = log_url(args.log)
    if not url.startswith("kafka://"):
        raise CliError("the projection worker runs on Kafka: pass --log kafka://host:port", exit_code=2)
    config = WorkerConfig(
        broker=url.removeprefix("kafka://"),
        dsn=postgres_dsn(args.dsn),
        app_id=args.app_id,
        topic_prefix=args.topic_prefix,
        schema=args.schema,
        store=args.store,
        data_dir=args.data_dir,
        web_port=args.web_port,
        partitions=args.partitions,
        batch=args.batch,
        session_timeout_s=args.session_timeout_s,
    )
    app = build_app(config)
    tune_for_service()
    if args.metrics:
        _serve_worker_metrics(app, args.metrics, args.lag_every_s)
    _exit_when_stuck_after_crash(app, CRASH_GRACE_S)
    faust.Worker(app, loglevel=args.loglevel, quiet=True).execute_from_commandline()
    return 0  # not reached: the worker exits the process when it stops


CRASH_GRACE_S = 30.0
"""How long a crashed worker's orderly stop may take before the process exits anyway."""


def _exit_when_stuck_after_crash(app: Any, grace_s: float) -> None:
    """A worker that crashed (a stage that cannot fold, a state it cannot read) stops through faust's
    orderly stop, then exits for its supervisor to start it again. Should that stop hang (it did, on a
    commit racing the crash), the process exits ``grace_s`` after the crash all the same: it has nothing
    left to lose, since what it did not commit is read again. Watched from a thread, as a hung loop
    would never run a timer."""
    import logging
    import os
    import threading
    import time

    def watch() -> None:
        while not app.crashed:
            time.sleep(0.5)
        time.sleep(grace_s)
        logging.getLogger("fedsched.projections").error(
            "event=worker_stuck_after_crash grace_s=%.0f reason=%r exiting=true", grace_s, app.crash_reason
        )
        os._exit(1)

    threading.Thread(target=watch, name="crash-watchdog", daemon=True).start()


def _serve_worker_metrics(app: Any, listen: str, lag_every_s: float) -> None:
    """The worker's counters and consumer lag on ``listen`` from its start (a faust task: it runs inside
    the worker's loop and is cancelled when the worker stops)."""
    import asyncio

    from events.hosting.lag import Lag
    from events.log.kafka import KafkaEventLog
    from events.plumbing.metrics import serving

    def samples() -> list[tuple[str, dict[str, str], float]]:
        # As the in-process runner reports them (``ProjectionRunner.samples``).
        return [
            ("fedsched_events_folded_total", {"component": "projections"}, app.host.folded),
            ("fedsched_dead_lettered_total", {"component": "projections"}, app.host.router.counts.dead_lettered),
        ]

    async def serve_metrics() -> None:
        log = KafkaEventLog(app.host.config.broker)
        await log.start()
        try:
            lag = Lag(log, "projections", app.host.consumer_positions, every_s=lag_every_s)
            async with serving(listen, [samples], lag=lag):
                await asyncio.Event().wait()
        finally:
            await log.close()

    app.task(serve_metrics)
