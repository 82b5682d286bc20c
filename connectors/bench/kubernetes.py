"""How fast the connector turns Node objects into inventory events: a small benchmark.

Run against an API server and a log (``deploy/local/kube.sh``, ``kafka.sh``, ``postgres.py``):

    python -m connectors.bench.kubernetes --kubeconfig DIR/kubeconfig --log kafka://127.0.0.1:9092 --nodes 2000

1. creates ``--nodes`` GPU nodes (labelled ``fedsched.io/bench=<run>``) through the API;
2. starts a connector and times the initial list: ``NodeObserved`` (+ ``GpuHealthReported``) published
   per second, until every node is out;
3. changes a label on every node and times the watch path the same way;
4. deletes the nodes.

Uses an admin kubeconfig (it creates and deletes nodes). Prints one line per phase.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from connectors.kubernetes import names
from connectors.kubernetes.connector import ConnectorConfig, KubernetesConnector
from connectors.kubernetes.kubeapi import MERGE_PATCH, KubeApi
from connectors.kubernetes.throttle import RateLimiter
from events.catalog.topics import TOPICS
from events.catalog.types import ClusterId
from events.log import open_log
from events.plumbing.tasks import cancel_and_wait

LABEL = "fedsched.io/bench"


def node_manifest(name: str, run: str) -> dict[str, object]:
    labels = {LABEL: run, names.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3", names.GFD_MEMORY: "81559", names.GFD_COUNT: "8"}
    allocatable = {"cpu": "96", "memory": "1Ti", "pods": "110", names.GPU_RESOURCE: "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


async def _all(calls: list[object], concurrency: int = 32) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(call: object) -> None:
        async with gate:
            await call  # type: ignore[misc]

    await asyncio.gather(*(one(c) for c in calls))


async def _wait_published(connector: KubernetesConnector, target: int, timeout_s: float = 600) -> float:
    start = time.perf_counter()
    while connector.reporter.published < target:
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError(f"only {connector.reporter.published} of {target} events after {timeout_s} s")
        await asyncio.sleep(0.005)
    return time.perf_counter() - start


async def run(kubeconfig: str, log_url: str, count: int) -> None:
    bench_id = f"b{os.getpid()}"
    admin = await KubeApi.from_kubeconfig(kubeconfig, limiter=RateLimiter(2000.0, 2000))
    log = open_log(log_url)
    await log.start()
    await log.create_topics(TOPICS)
    names_ = [f"{bench_id}-node-{i:05d}" for i in range(count)]
    connector: KubernetesConnector | None = None
    task: asyncio.Task[None] | None = None
    try:
        started = time.perf_counter()
        await _all([admin.request("POST", "/api/v1/nodes", body=node_manifest(n, bench_id)) for n in names_])
        print(f"created {count} nodes in {time.perf_counter() - started:.1f} s", flush=True)
        others = len((await admin.request("GET", "/api/v1/nodes")).get("items") or []) - count

        api = await KubeApi.from_kubeconfig(kubeconfig, limiter=RateLimiter(50.0, 100))
        connector = KubernetesConnector(ConnectorConfig(cluster=ClusterId(f"bench-{bench_id}")), log, api)
        task = asyncio.create_task(connector.run())
        # Registration and reachable, then one NodeObserved and one GpuHealthReported per node.
        base = 2
        seconds = await _wait_published(connector, base + 2 * (count + others))
        print(
            f"initial list: {count + others} nodes -> {count + others} NodeObserved "
            f"({(count + others) / seconds:,.0f}/s) and as many GpuHealthReported in {seconds:.2f} s",
            flush=True,
        )

        before = connector.reporter.published
        started = time.perf_counter()
        patch = {"metadata": {"labels": {"example.com/changed": "yes"}}}
        await _all([admin.request("PATCH", f"/api/v1/nodes/{n}", body=patch, content_type=MERGE_PATCH) for n in names_])
        patched = time.perf_counter() - started
        seconds = patched + await _wait_published(connector, before + count)
        print(
            f"watch: {count} node changes -> {count} NodeObserved in {seconds:.2f} s ({count / seconds:,.0f}/s; "
            f"the API server took {patched:.2f} s to apply the patches)",
            flush=True,
        )
    finally:
        if task is not None:
            await cancel_and_wait([task], again_after_s=10.0)  # the connector's own clean-up may take a while
        if connector is not None:
            await connector.api.close()
        await admin.request("DELETE", "/api/v1/nodes", query={"labelSelector": f"{LABEL}={bench_id}"})
        await admin.close()
        await log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True, help="an admin kubeconfig")
    parser.add_argument("--log", required=True, help="kafka://host:port or a PostgreSQL DSN")
    parser.add_argument("--nodes", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(run(args.kubeconfig, args.log, args.nodes))


if __name__ == "__main__":
    main()
