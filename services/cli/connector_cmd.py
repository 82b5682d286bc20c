"""Sub-commands: ``fedsched connector <kind> ...``, the long-running cluster connectors.

One sub-command per kind of cluster (``sim`` here; ``kubernetes`` next to it). Each handler is a
composition root: it reads flags and the environment, opens the log and runs the connector until
SIGINT or SIGTERM. Heavy imports stay inside the handlers so ``fedsched --help`` stays fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from events.plumbing.collector import tune_for_service
from events.plumbing.logs import configure as configure_logging
from events.plumbing.signals import stop_on_signals


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    connector = sub.add_parser("connector", help="run a cluster connector (simulated, Kubernetes)")
    kinds = connector.add_subparsers(dest="connector", metavar="KIND", required=True)
    _register_sim(kinds)
    _register_sim_bench(kinds)
    _register_kubernetes(kinds)


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
        help="node list: an openb or spot-GPU trace CSV, or a YAML file (default: the openb GPU node list if "
        "the traces are on this machine, else the 300-node sample shipped with fedsched, as fedsched up uses)",
    )
    part = sim.add_mutually_exclusive_group()
    part.add_argument("--slice", type=int, metavar="N", help="only the first N nodes of the list")
    part.add_argument("--split", metavar="K:I", help="deal the nodes round-robin into K clusters and take number I")
    sim.add_argument("--log", help="log URL: kafka://host:port or a PostgreSQL DSN (default: FEDSCHED_LOG)")
    sim.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="simulated seconds per wall second (default 1). This connector stamps its events in simulated "
        "time and the other processes of a distributed deployment use the wall clock, so any other speed "
        "puts its events out of step with theirs (job timelines out of order, idle times wrong): for a faster "
        "simulation use fedsched up, whose components share one clock",
    )
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
    import logging

    from connectors.sim import ClusterSpec, NodeListError, SimCluster, SimConfig, load_nodes, parse_split
    from services.cli.config import log_url, started_log
    from services.cli.main import CliError
    from services.runtime.up import default_nodes

    try:
        split = parse_split(args.split) if args.split else None
        nodes = load_nodes(args.nodes or default_nodes(), slice_=args.slice, split=split)
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
    configure_logging()
    tune_for_service()
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    if config.speed != 1:
        # Only fedsched up can share the simulated clock with the scheduler, API and governance: here
        # they stamp wall time, and governance would judge a notebook idle for 45 min after 3.
        logging.getLogger("fedsched.connector.sim").warning(
            "event=sim_speed_not_shared cluster=%s speed=%g message=%r",
            spec.cluster,
            config.speed,
            "events are stamped in simulated time while the other processes use the wall clock; "
            "use --speed 1 with a distributed deployment, or fedsched up for a faster simulation",
        )
    log = await started_log(log_url(args.log), f"connector-{spec.cluster}")
    cluster = SimCluster(log, spec, config)
    try:
        stop = stop_on_signals()
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
    if cluster.error is not None:
        raise CliError(f"sim cluster {spec.cluster} stopped: {cluster.error}")
    return 0


# -- kubernetes ---------------------------------------------------------------------------------------


def _register_kubernetes(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    kube = kinds.add_parser(
        "kubernetes",
        help="a Kubernetes cluster, through its API server",
        description="Run the connector of one Kubernetes cluster: publish its nodes and GPU health, create "
        "and stop pods for the scheduler's decisions, and report the jobs' lifecycle.",
    )
    kube.add_argument("--cluster", required=True, help="cluster id (lowercase letters, digits, . _ -)")
    auth = kube.add_mutually_exclusive_group()
    auth.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, else ~/.kube/config)")
    auth.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    kube.add_argument("--context", help="kubeconfig context (default: its current context)")
    kube.add_argument("--log", help="log URL: kafka://host:port or a PostgreSQL DSN (default: FEDSCHED_LOG)")
    kube.add_argument(
        "--config",
        type=Path,
        help="YAML file with a 'cluster:' section (display name, site, region, currency, GPU rates, datasets, "
        "labels) and a 'connector:' section of settings; flags given here win over it",
    )
    kube.add_argument("--site", help="site id (default: default)")
    kube.add_argument("--region", help="region id (default: default)")
    kube.add_argument("--display-name", help="a name for people")
    kube.add_argument("--currency", help="currency of the GPU rates (ISO 4217; default USD)")
    kube.add_argument("--namespace-prefix", help="tenant namespaces are PREFIX<tenant> (default: fedsched-)")
    kube.add_argument("--default-image", help="image for jobs whose template names none")
    kube.add_argument("--qps", type=float, default=20.0, help="API requests per second, steady (default 20)")
    kube.add_argument("--burst", type=int, default=40, help="API requests at once (default 40)")
    kube.add_argument("--unreachable-after-s", type=float, help="failing this long: unreachable (default 5)")
    kube.add_argument("--cancel-grace-s", type=int, help="grace period of cancelled pods (default 30)")
    kube.add_argument("--metrics", default="", help="serve /healthz and /metrics here (host:port; default: off)")
    kube.add_argument("--rendezvous-port", type=int, help="training's MASTER_PORT (default 29500)")
    kube.add_argument("--cluster-domain", help="the cluster's DNS domain (default cluster.local)")
    kube.add_argument("--crash-restarts", type=int, help="restarts: a crash-looping service fails (default 5)")
    kube.add_argument(
        "--allowed-registry",
        action="append",
        type=_registry,
        metavar="HOST[:PORT][/PATH]",
        help="a registry every image in this cluster must come from, whatever its tenant allows (repeat; "
        "default: the tenants' image policies alone decide)",
    )
    kube.add_argument("--pull-secret-namespace", help="namespace of the pull secrets copied into tenant namespaces")
    kube.add_argument("--container-cpu-milli", type=int, help="CPU request of a container asking none (default 100)")
    kube.add_argument("--container-memory-mib", type=int, help="memory request of a container asking none (256)")
    usage = kube.add_argument_group("GPU usage (NVIDIA DCGM exporter metrics; also the file's usage: section)")
    usage.add_argument("--usage-interval-s", type=float, help="usage window, s (default 60; 0: read no usage)")
    usage.add_argument("--usage-scrape-s", type=float, help="between scrapes, s (default 15)")
    usage.add_argument("--usage-timeout-s", type=float, help="deadline of a scrape, s (default 10)")
    usage.add_argument(
        "--dcgm-selector",
        action="append",
        metavar="SELECTOR",
        help="label selector of the exporter pods, repeatable (default: app=nvidia-dcgm-exporter and "
        "app.kubernetes.io/name=dcgm-exporter)",
    )
    usage.add_argument("--dcgm-namespace", help="the exporters' namespace (default: all)")
    usage.add_argument("--dcgm-port", type=int, help="the exporters' port (default 9400)")
    usage.add_argument("--dcgm-path", help="the exporters' metrics path (default /metrics)")
    usage.add_argument("--prometheus-url", help="query DCGM metrics from this Prometheus instead of the exporters")
    kube.set_defaults(handler=run_kubernetes)


def _registry(text: str) -> str:
    from events.catalog.images import parse_registry

    try:
        parse_registry(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


async def run_kubernetes(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import os

    from connectors.kubernetes import KubeApi, KubernetesConnector, config_file, metrics
    from connectors.kubernetes.throttle import RateLimiter
    from events.hosting.lag import Lag
    from events.plumbing.metrics import serving
    from events.plumbing.tasks import cancel_and_wait
    from services.cli.config import log_url, started_log
    from services.cli.main import CliError

    configure_logging()

    tune_for_service()
    try:
        flags = {
            "site": args.site,
            "region": args.region,
            "display_name": args.display_name,
            "currency": args.currency,
            "namespace_prefix": args.namespace_prefix,
            "default_image": args.default_image,
            "unreachable_after_s": args.unreachable_after_s,
            "cancel_grace_s": args.cancel_grace_s,
            "rendezvous_port": args.rendezvous_port,
            "cluster_domain": args.cluster_domain,
            "crash_restarts": args.crash_restarts,
            "allowed_registries": tuple(args.allowed_registry) if args.allowed_registry else None,
            "pull_secret_namespace": args.pull_secret_namespace,
            "container_cpu_milli": args.container_cpu_milli,
            "container_memory_mib": args.container_memory_mib,
        }
        usage = {
            "interval_s": args.usage_interval_s,
            "scrape_s": args.usage_scrape_s,
            "timeout_s": args.usage_timeout_s,
            "selectors": tuple(args.dcgm_selector) if args.dcgm_selector else None,
            "namespace": args.dcgm_namespace,
            "port": args.dcgm_port,
            "path": args.dcgm_path,
            "prometheus_url": args.prometheus_url,
        }
        file = config_file.load(args.config) if args.config else None
        config = config_file.build(args.cluster, file, flags, usage)
    except config_file.ConfigFileError as error:
        raise CliError(str(error), exit_code=2) from None
    try:
        limiter = RateLimiter(args.qps, args.burst)
        in_cluster = args.in_cluster or (not args.kubeconfig and "KUBERNETES_SERVICE_HOST" in os.environ)
        if in_cluster:
            api = KubeApi.in_cluster(limiter=limiter)
        else:
            api = await KubeApi.from_kubeconfig(args.kubeconfig, args.context, limiter=limiter)
    except Exception as error:  # configuration errors of every kind end here, for a person to read
        raise CliError(f"cannot set up the Kubernetes connector: {error}", exit_code=2) from None
    configure_logging()
    tune_for_service()
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    log = await started_log(log_url(args.log), f"connector-{args.cluster}")
    try:
        connector = KubernetesConnector(config, log, api)
        print(f"kubernetes connector {args.cluster}: API server {api.host}", flush=True)
        lag = Lag(log, f"connector-{args.cluster}", lambda: connector.consumer.positions)
        served = [lambda: metrics.samples(connector)]
        async with serving(args.metrics, served, lag=lag, checks=metrics.checks(connector)):
            stop = stop_on_signals()
            task = asyncio.ensure_future(connector.run())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
            await cancel_and_wait([task, stopping], again_after_s=10.0)  # the connector's own clean-up may take a while
            if not task.cancelled():
                task.result()  # raises what ended it
    finally:
        await api.close()
        await log.close()
    return 0


def _register_sim_bench(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = kinds.add_parser(
        "sim-bench",
        help="measure how fast a simulated cluster publishes (registration, then a burst of jobs)",
    )
    bench.add_argument("--log", help="log URL: kafka://host:port or a PostgreSQL DSN (default: FEDSCHED_LOG)")
    bench.add_argument("--nodes", type=Path, help="node list (default: the openb GPU node list, 1,213 nodes)")
    bench.add_argument("--jobs", type=int, default=2000, help="one-GPU jobs in the burst (default 2000)")
    bench.add_argument("--speed", type=float, default=1000.0, help="simulated seconds per wall second")
    bench.set_defaults(handler=run_sim_bench)


async def run_sim_bench(args: argparse.Namespace) -> int:
    import json

    from connectors.bench.sim import run_bench
    from events.catalog.topics import TOPICS
    from events.log import open_log
    from services.cli.config import log_url

    log = open_log(log_url(args.log))
    await log.start()
    try:
        await log.create_topics(TOPICS)
        result = await run_bench(log, args.nodes, jobs=args.jobs, speed=args.speed)
    finally:
        await log.close()
    print(json.dumps(result.as_dict()))
    return 0
