"""GPU usage end to end on the real kube-apiserver: the connector finds the DCGM exporter pods through the
API server, scrapes them over HTTP (a real aiohttp server answering with the recorded exporter output),
and publishes one ``NodeUsageReported`` per node per window, its own pods' usage under their job and run.

No kubelet and no pod network: the test writes the exporter pods' status (``Running``, ``podIP``) as a
kubelet would, with addresses that reach the test's server: the host's non-loopback address for one
node's exporter and 127.0.0.2 for the other's (pod status takes loopback addresses; Endpoints objects
refuse them, which is one reason discovery reads pods). The server answers by the address a connection
came to, so each exporter pod gets its own node's answer.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from connectors.kubernetes.usage import UsageSettings
from events.catalog.inventory import GpuUsage, NodeUsageReported
from events.catalog.jobs import JobStarted
from events.log.publisher import Publisher

from .builders import a_job, a_node, a_placement, container_status, pod_status, running
from .support import Kube, Obj, Running, Tap, config, delete_nodes, unique, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(120)]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"
RUNNING = pod_status("Running", container_status(**running()))


def host_address() -> str:
    """This host's address on its default route (not loopback): what a pod IP would be."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
        return str(probe.getsockname()[0])


class Exporters:
    """One HTTP server standing in for the DCGM exporters of several nodes: the answer of each is chosen
    by the local address the scrape came to."""

    def __init__(self) -> None:
        self.answers: dict[str, str] = {}
        self.scrapes: dict[str, int] = {}
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def metrics(self, request: web.Request) -> web.Response:
        local = request.transport.get_extra_info("sockname")[0] if request.transport else ""
        self.scrapes[local] = self.scrapes.get(local, 0) + 1
        if local not in self.answers:
            return web.Response(status=404)
        return web.Response(text=self.answers[local], content_type="text/plain", charset="utf-8")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "0.0.0.0", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest_asyncio.fixture(loop_scope="session")
async def exporters() -> AsyncIterator[Exporters]:
    server = Exporters()
    await server.start()
    yield server
    await server.close()


async def exporter_pod(kube: Kube, namespace: str, node: str, ip: str, label: str) -> None:
    """An exporter pod as the GPU operator's DaemonSet makes one, with the status its kubelet writes."""
    pod: Obj = {
        "metadata": {"name": f"nvidia-dcgm-exporter-{node}"[:63], "namespace": namespace, "labels": {"app": label}},
        "spec": {"nodeName": node, "containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter"}]},
    }
    created = await kube.api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
    await kube.set_pod_status(created, {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]})


async def remove_exporters(kube: Kube, namespace: str) -> None:
    """The exporter pods gone at once (no kubelet to finish a graceful deletion), then their namespace."""
    listed = await kube.api.request("GET", f"/api/v1/namespaces/{namespace}/pods")
    for pod in listed.get("items") or []:
        await kube.delete_pod(pod, grace_s=0)
    await kube.delete_namespace(namespace)


async def test_exporters_found_through_the_api_server_give_per_node_and_per_job_usage(
    kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running, exporters: Exporters
) -> None:
    cluster = unique("usage")
    node_a, node_b = f"{cluster}-a", f"{cluster}-b"
    train, idle, serve = unique("train"), unique("idle"), unique("serve")
    rename = {"train-job": train, "idle-job": idle, "serve-job": serve}

    def recorded(name: str) -> str:
        text = (FIXTURES / name).read_text()
        for old, new in rename.items():
            text = text.replace(old, new)
        return text

    exporters.answers = {host_address(): recorded("node-a.prom"), "127.0.0.2": recorded("node-b.prom")}
    namespace = unique("gpu-operator")
    await kube.api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    await exporter_pod(kube, namespace, node_a, host_address(), "nvidia-dcgm-exporter")
    await exporter_pod(kube, namespace, node_b, "127.0.0.2", "nvidia-dcgm-exporter")
    # A pod of the selector elsewhere, and one with another label here: neither is scraped.
    await exporter_pod(kube, namespace, f"{cluster}-c", "127.0.0.3", "something-else")
    for node in (node_a, node_b):
        await kube.node(a_node(node).gpus(4, "NVIDIA-H100-80GB-HBM3").build())

    await scheduler.publish(
        [
            a_job(train, tenant="team-a", gpus=2),
            a_placement(train, (node_a,), cluster=cluster, gpus_each=2),
            a_job(idle, tenant="team-a"),
            a_placement(idle, (node_b,), cluster=cluster),
            a_job(serve, tenant="team-b", replicas=2),
            a_placement(serve, (node_b, node_b), cluster=cluster),
        ]
    )
    usage = UsageSettings(interval_s=1.0, scrape_s=0.25, timeout_s=5.0, namespace=namespace, port=exporters.port)
    await connectors.start(config(cluster, usage=usage))
    for job, count in ((train, 1), (idle, 1), (serve, 2)):
        pods = await wait_until(lambda j=job, c=count: _pods(kube, cluster, j, c), 30, f"pods of {job}")
        for pod in pods:
            await kube.set_pod_status(pod, RUNNING)
        await tap.wait(JobStarted, job_id=job)

    # The first window that sees the runs may see them in part of its scrapes only (the connector learns
    # of its pods as they are made), and scales their use down: the windows after see them throughout.
    def whole(node: str, figures: set[int]) -> list[NodeUsageReported]:
        found = tap.events(NodeUsageReported, cluster=cluster, node=node)
        return [r for r in found if {j.utilisation_pct for j in r.jobs} == figures and len(r.jobs) == len(figures)]

    await tap.until(lambda: whole(node_a, {90}) and whole(node_b, {0, 31}), what="whole windows of both nodes")
    a, b = whole(node_a, {90})[-1], whole(node_b, {0, 31})[-1]
    assert a.gpus == (
        GpuUsage(index=0, utilisation_pct=92, memory_used_mib=61440),
        GpuUsage(index=1, utilisation_pct=88, memory_used_mib=61312),
        GpuUsage(index=2, utilisation_pct=35, memory_used_mib=20480),
        GpuUsage(index=3, utilisation_pct=0, memory_used_mib=0),
    )
    assert [(j.job_id, j.run, j.gpu_indices, j.utilisation_pct, j.gpu_memory_used_mib) for j in a.jobs] == [
        (train, 1, (0, 1), 90, 122752)
    ]
    assert [g.index for g in b.gpus] == [0, 1, 2], "the blank GPU is not reported as idle"
    assert sorted((j.job_id, j.gpu_indices, j.utilisation_pct) for j in b.jobs) == sorted(
        [(idle, (0,), 0), (serve, (1,), 31)]
    )
    assert 500 <= a.window_ms <= 60_000
    assert tap.events(NodeUsageReported, cluster=cluster, node=f"{cluster}-c") == []
    assert exporters.scrapes.get("127.0.0.3", 0) == 0, "a pod of another label is not scraped"
    await delete_nodes(kube, [node_a, node_b])
    await remove_exporters(kube, namespace)


async def _pods(kube: Kube, cluster: str, job: str, count: int) -> list[Obj] | None:
    found = await kube.job_pods(cluster, job)
    return found if len(found) == count else None
