"""Sub-commands: ``fedsched projections ...``, the hosts of the projections.

``worker`` runs one faust-streaming worker of the distributed host (``projections.faust_app``);
start several and they share the partitions. Each sub-command is one ``_register_<name>`` function
added in ``register``, with its handler beside it; heavy imports stay inside the handlers so
``fedsched --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    projections = sub.add_parser("projections", help="run or rebuild the projections (profiles, quotas, read models)")
    commands = projections.add_subparsers(dest="projections", metavar="COMMAND", required=True)
    _register_worker(commands)


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
    worker.add_argument("--app-id", default="fedsched-projections", help="consumer group and internal topic prefix")
    worker.add_argument("--topic-prefix", default="", help="read and write <prefix>.fedsched.* topics (default none)")
    worker.add_argument("--schema", default="fedsched_rm", help="PostgreSQL schema of the read models")
    worker.add_argument("--partitions", type=int, default=6, help="partitions of each stage's topic and table")
    worker.add_argument("--batch", type=int, default=2000, help="records an agent takes at a time")
    worker.add_argument("--session-timeout-s", type=float, default=10.0, help="Kafka group session timeout")
    worker.add_argument("--loglevel", default="warning", help="log level (default warning)")
    worker.set_defaults(handler=run_worker)


def run_worker(args: argparse.Namespace) -> int:
    import faust

    from projections.faust_app import build_app
    from projections.faust_config import WorkerConfig
    from services.cli.main import CliError
    from services.config import log_url, postgres_dsn

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
    faust.Worker(app, loglevel=args.loglevel, quiet=True).execute_from_commandline()
    return 0  # not reached: the worker exits the process when it stops
