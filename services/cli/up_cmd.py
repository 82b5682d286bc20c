"""Sub-commands: ``fedsched up`` (the whole service on the embedded default) and ``fedsched demo``."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from events.plumbing.collector import tune_for_service
from events.plumbing.logs import configure as configure_logging
from services.cli.args import positive_float, positive_int


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    up = sub.add_parser("up", help="run everything in one process on embedded PostgreSQL (no Kafka needed)")
    _common(up)
    up.set_defaults(handler=run_up)

    demo = sub.add_parser("demo", help="fedsched up, a real trace replayed through the API, then audit verify")
    _common(demo)
    demo.add_argument(
        "--pods",
        type=Path,
        help="openb pod list CSV (default: openb_pod_list_default.csv of the traces in FEDSCHED_TRACES)",
    )
    demo.add_argument("--count", type=positive_int, default=500, help="how many GPU pods to replay (default 500)")
    demo.add_argument("--rate", type=positive_float, default=50.0, help="submissions per second (default 50)")
    demo.add_argument("--speed", type=positive_float, default=60.0, help="simulated seconds per second (default 60)")
    demo.set_defaults(handler=run_demo)


def _node_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of nodes") from None
    if count < 0:
        raise argparse.ArgumentTypeError(f"{count} nodes: give 0 or more")
    return count


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=Path(".fedsched"), help="where embedded data lives")
    parser.add_argument("--dsn", help="use this PostgreSQL instead of starting an embedded one")
    parser.add_argument("--api", default="127.0.0.1:50051", help="gRPC API address (default 127.0.0.1:50051)")
    parser.add_argument("--metrics", default="127.0.0.1:9464", help="health and metrics address")
    parser.add_argument("--no-api", action="store_true", help="do not start the gRPC API")
    parser.add_argument("--sim-speed", type=float, default=1.0, help="simulated seconds per second (up)")
    parser.add_argument(
        "--sim-nodes", type=Path, help="simulated fleet: an openb node CSV or a YAML node list (default: openb)"
    )
    parser.add_argument(
        "--sim-npu-nodes",
        type=_node_count,
        help="nodes of 8 Ascend910B NPUs added to sim-3 (default: 4 with the default node list, 0 with --sim-nodes)",
    )
    parser.add_argument("--no-sim", action="store_true", help="do not start the simulated fleet")
    parser.add_argument("--governance", type=Path, help="governance settings, as fedsched gov run --config takes them")
    parser.add_argument(
        "--kubernetes",
        action="append",
        default=[],
        type=kubernetes_join,
        metavar="CLUSTER=KUBECONFIG",
        help="join a Kubernetes cluster (repeatable): CLUSTER=KUBECONFIG, or cluster=ID,kubeconfig=FILE[,context=NAME]",
    )
    parser.add_argument(
        "--config", type=Path, help="distributed mode: run each component as its own process (see docs in supervisor)"
    )


_JOIN_KEYS = ("cluster", "kubeconfig", "context", "config")


def kubernetes_join(text: str):  # type: ignore[no-untyped-def]
    """``--kubernetes``: ``CLUSTER=KUBECONFIG`` or ``cluster=ID,kubeconfig=FILE,context=NAME,config=FILE``
    (``config``: the connector's YAML, as ``fedsched connector kubernetes --config`` reads it)."""
    from connectors.kubernetes import config_file
    from connectors.kubernetes.names import is_id
    from services.runtime.kubernetes import KubernetesJoin

    if text.startswith("cluster="):
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, _, value = part.partition("=")
            if key not in _JOIN_KEYS or not value:
                raise argparse.ArgumentTypeError(f"{part!r}: give {', '.join(k + '=...' for k in _JOIN_KEYS)}")
            fields[key] = value
    else:
        cluster, _, kubeconfig = text.partition("=")
        fields = {"cluster": cluster, "kubeconfig": kubeconfig}
    if not fields.get("cluster") or not fields.get("kubeconfig"):
        raise argparse.ArgumentTypeError(f"{text!r}: give CLUSTER=KUBECONFIG")
    if not Path(fields["kubeconfig"]).expanduser().is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: no kubeconfig file at {fields['kubeconfig']}")
    if not is_id(fields["cluster"]):
        raise argparse.ArgumentTypeError(
            f"{text!r}: cluster {fields['cluster']!r} is not an id (letters, digits, . _ -)"
        )
    try:
        file = config_file.load(Path(fields["config"]).expanduser()) if "config" in fields else None
        config = config_file.build(fields["cluster"], file)
    except config_file.ConfigFileError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    return KubernetesJoin(config, str(Path(fields["kubeconfig"]).expanduser()), fields.get("context"))


def config_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from services.cli.gov_cmd import governance_settings
    from services.runtime.up import UpConfig

    return UpConfig(
        data_dir=args.data_dir,
        dsn=args.dsn,
        api_listen=args.api,
        metrics_listen=args.metrics,
        sim_clusters=() if args.no_sim else ("sim-1", "sim-2", "sim-3"),
        sim_nodes=args.sim_nodes,
        sim_npu_nodes=args.sim_npu_nodes,
        sim_speed=args.sim_speed,
        with_api=not args.no_api,
        governance=governance_settings(args.governance, "--governance") if args.governance else None,
        kubernetes=tuple(args.kubernetes),
    )


async def run_up(args: argparse.Namespace) -> int:
    import os

    from services.cli.main import CliError
    from services.runtime.credentials import masked
    from services.runtime.supervisor import ConfigError, SupervisorConfig, supervise
    from services.runtime.up import Running, SettingRefused, run

    configure_logging()

    tune_for_service()
    if args.config is not None or os.environ.get("FEDSCHED_LOG", "").startswith("kafka://"):
        try:
            config = SupervisorConfig.load(args.config)
        except ConfigError as error:
            raise CliError(f"--config: {error}", 2) from None
        return await supervise(config)

    def ready(running: Running) -> None:
        print(f"fedsched is up: log and read models on {masked(running.dsn)}", flush=True)
        if running.api_token:
            print(f"  gRPC API on {running.config.api_listen}; development token:\n  {running.api_token}", flush=True)
        print(f"  health and metrics on http://{running.config.metrics_listen}/healthz and /metrics", flush=True)
        signing = running.audit_signing
        if signing is not None:
            public = f"; public key {signing.public_key_file}" if signing.public_key_file else ""
            print(f"  signed audit checkpoints in {signing.checkpoint_dir}{public}", flush=True)
        print("  press Ctrl-C to stop", flush=True)

    unchecked_under_a_fast_clock(args.sim_speed)
    try:
        return await run(config_from(args), on_ready=ready)
    except SettingRefused as error:  # before anything started: --api, the audit key's
        raise CliError(str(error), 2) from None


async def run_demo(args: argparse.Namespace) -> int:
    from services.cli.main import CliError
    from services.runtime.demo import DemoConfig, run
    from services.scheduler.sim.traces import pods_csv

    pods: Path = args.pods or pods_csv("default")
    if not pods.is_file():  # noqa: ASYNC240 (nothing else runs yet)
        # No pod trace ships with fedsched (the node list has a sample; a replay needs the real pods).
        raise CliError(
            f"--pods: no pod list at {pods}; pass --pods FILE (an openb pod list CSV such as"
            " openb_pod_list_default.csv) or set FEDSCHED_TRACES to the directory holding alibaba-openb-2023/",
            2,
        )
    configure_logging(logging.WARNING)

    tune_for_service()
    unchecked_under_a_fast_clock(args.speed)
    config = DemoConfig(up=config_from(args), pods=pods, count=args.count, rate=args.rate, speed=args.speed)
    return await run(config)


def unchecked_under_a_fast_clock(speed: float) -> None:
    """A simulated clock faster than the wall stamps events ever further ahead of the log's own time: the
    event-time check (``events.log.reading``) would refuse them all after a day of simulated lead, so this
    process runs without it unless the operator set one (the embedded default's hosts are all in it)."""
    import logging
    import os

    from events.log.reading import SKEW_VARIABLE

    if speed != 1.0 and not os.environ.get(SKEW_VARIABLE):
        os.environ[SKEW_VARIABLE] = "off"
        logging.getLogger("fedsched.up").info(
            "event=event_time_check_off reason=simulated_clock speed=%s variable=%s", speed, SKEW_VARIABLE
        )
