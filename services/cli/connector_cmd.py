"""Sub-commands: ``fedsched connector <kind> ...``, the long-running cluster connectors.

One sub-command per kind of cluster (``sim`` here; ``kubernetes`` next to it). Each handler is a
composition root: it reads flags and the environment, opens the log and runs the connector until
SIGINT or SIGTERM. Heavy imports stay inside the handlers so ``fedsched --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    connector = sub.add_parser("connector", help="run a cluster connector (simulated, Kubernetes)")
    kinds = connector.add_subparsers(dest="connector", metavar="KIND", required=True)
    _register_sim(kinds)


# -- sim ----------------------------------------------------------------------------------------------


def _register_sim(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sim = kinds.add_parser(
        "sim",
        help="a simulated cluster built from a node list (trace CSV or YAML)",
        description="Run a simulated cluster: publish its inventory, execute the scheduler's placements "
        "for it in simulated time, inject seeded faults and report utilisation.",
    )
    sim.add_argument("--cluster", required=True, help="cluster id (lowercase letters, digits, . _ -)")
    sim.add_argument(
        "--nodes",
        type=Path,
        help="node list: an openb or spot-GPU trace CSV, or a YAML file (default: the openb GPU node list)",
    )
    part = sim.add_mutually_exclusive_group()
    part.add_argument("--slice", type=int, metavar="N", help="only the first N nodes of the list")
    part.add_argument("--split", metavar="K:I", help="deal the nodes round-robin into K clusters and take number I")
    sim.add_argument("--log", help="log URL: kafka://host:port or a PostgreSQL DSN (default: FEDSCHED_LOG)")
    sim.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second (default 1)")
    sim.add_argument("--seed", type=int, default=0, help="seed of the fault schedule and the job draws")
    sim.add_argument("--start-delay-s", type=float, default=5.0, help="placement to JobStarted, simulated s")
    sim.add_argument("--stop-delay-s", type=float, default=2.0, help="stop request to stopped, simulated s")
    sim.add_argument("--fault-rate", type=float, default=0.0, help="faults per node per simulated hour")
    sim.add_argument("--job-failure-rate", type=float, default=0.0, help="share of runs that fail (0..1)")
    sim.add_argument("--usage-interval-s", type=float, default=300.0, help="utilisation window, simulated s")
    sim.add_argument("--default-runtime-s", type=int, default=3600, help="runtime of a batch job without one")
    sim.add_argument("--site", help="site id (default: the cluster id)")
    sim.add_argument("--region", default="sim", help="region id (default: sim)")
    sim.add_argument("--display-name", default="", help="a name for people")
    sim.add_argument("--currency", default="USD", help="currency of the GPU rates (ISO 4217)")
    sim.set_defaults(handler=run_sim)


async def run_sim(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from connectors.sim import ClusterSpec, NodeListError, SimCluster, SimConfig, load_nodes, parse_split
    from connectors.sim.nodes import default_nodes_path
    from events.log import open_log
    from events.topics import TOPICS
    from services.cli.main import CliError
    from services.config import log_url

    try:
        split = parse_split(args.split) if args.split else None
        nodes = load_nodes(args.nodes or default_nodes_path(), slice_=args.slice, split=split)
        spec = ClusterSpec.build(
            args.cluster,
            nodes.nodes,
            site=args.site,
            region=args.region,
            display_name=args.display_name,
            currency=args.currency,
            defaults=nodes.cluster,
        )
        config = SimConfig(
            speed=args.speed,
            seed=args.seed,
            start_delay_s=args.start_delay_s,
            stop_delay_s=args.stop_delay_s,
            fault_rate=args.fault_rate,
            job_failure_rate=args.job_failure_rate,
            usage_interval_s=args.usage_interval_s,
            default_runtime_s=args.default_runtime_s,
        )
    except (NodeListError, ValueError) as error:
        raise CliError(str(error), exit_code=2) from None
    log = open_log(log_url(args.log))
    await log.start()
    try:
        await log.create_topics(TOPICS)
        cluster = SimCluster(log, spec, config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await cluster.start()
        print(
            f"sim cluster {spec.cluster}: {len(spec.nodes)} nodes, speed {config.speed:g}, seed {config.seed}",
            flush=True,
        )
        done = asyncio.ensure_future(cluster.wait_stopped())
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait([done, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        await cluster.stop()
        done.cancel()
    finally:
        await log.close()
    return 0
