"""Where usage is read from, over real HTTP (an aiohttp server; the API server's pod listing is a stub
here, the real one is in ``test_usage_scrape``): which exporter pods are scraped, what a failing or
oversized exporter costs (its readings for that scrape, one log line per change), the Prometheus
instant query, and the task's window and event ids."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from connectors.kubernetes.usage import ExporterSource, Limits, PodRef, PrometheusSource, UsageTask, parse
from connectors.kubernetes.usage.dcgm import FAMILIES, GpuReading
from connectors.kubernetes.usage.sources import masked, vector
from events.catalog.inventory import NodeUsageReported
from events.catalog.types import ClusterId, JobId

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(30)]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"
Handler = Callable[[web.Request], Any]


class Server:
    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.queries: list[dict[str, str]] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.queries.append(dict(request.query))
        handler = self.routes.get(request.path)
        if handler is None:
            return web.Response(status=404)
        answer: web.StreamResponse = await handler(request)
        return answer

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.port = self.runner.addresses[0][1]


@pytest_asyncio.fixture(loop_scope="session")
async def server() -> AsyncIterator[Server]:
    running = Server()
    await running.start()
    yield running
    assert running.runner is not None
    await running.runner.cleanup()


@pytest_asyncio.fixture(loop_scope="session")
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as client:
        yield client


def text(body: str) -> Handler:
    async def answer(_: web.Request) -> web.Response:
        return web.Response(text=body, content_type="text/plain")

    return answer


class PodList:
    """Stands in for the API server's pod listing (what ``ExporterSource`` asks of ``KubeApi``)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.asked: list[tuple[str, dict[str, str]]] = []

    async def request(self, method: str, path: str, *, query: dict[str, str]) -> dict[str, Any]:
        self.asked.append((path, query))
        return {"items": [p for p in self.pods if p["metadata"]["labels"].get("app") in query["labelSelector"]]}


def exporter(name: str, node: str, ip: str = "127.0.0.1", phase: str = "Running", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": {"app": "nvidia-dcgm-exporter"}, **meta},
        "spec": {"nodeName": node},
        "status": {"phase": phase, "podIP": ip},
    }


async def test_running_exporter_pods_are_scraped_once_each_at_their_pod_address(
    server: Server, session: aiohttp.ClientSession
) -> None:
    server.routes = {"/metrics": text((FIXTURES / "node-a.prom").read_text())}
    pods = PodList(
        [
            exporter("dcgm-1", "node-1"),
            exporter("dcgm-2", "node-2", phase="Pending"),
            exporter("dcgm-3", "node-3", ip=""),
            exporter("dcgm-4", "node-4", deletionTimestamp="2026-12-05T10:00:00Z"),
        ]
    )
    source = ExporterSource(pods, namespace="gpu-operator", port=server.port)  # type: ignore[arg-type]
    readings = await source.scrape(session)
    assert {r.node for r in readings} == {"node-1"}, "the pod's node wins over the Hostname label"
    assert len(readings) == 4
    assert [path for path, _ in pods.asked] == ["/api/v1/namespaces/gpu-operator/pods"] * 2  # two selectors
    ipv6 = ExporterSource(PodList([]), port=9400)._endpoint(exporter("x", "n", ip="fd00::7"))  # type: ignore[arg-type]
    assert ipv6 is not None and ipv6.url == "http://[fd00::7]:9400/metrics"


async def test_a_failing_exporter_is_logged_once_per_change_and_when_it_recovers(
    server: Server, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    source = ExporterSource(PodList([exporter("dcgm-1", "node-1")]), port=server.port)  # type: ignore[arg-type]
    server.routes = {}
    with caplog.at_level(logging.INFO, logger="fedsched.connector.kubernetes"):
        for _ in range(3):
            assert await source.scrape(session) == []
        server.routes = {"/metrics": text("DCGM_FI_DEV_GPU_UTIL{gpu=0} 1\n")}  # now malformed: a change
        assert await source.scrape(session) == []
        server.routes = {"/metrics": text((FIXTURES / "node-b.prom").read_text())}
        assert len(await source.scrape(session)) == 4
        assert len(await source.scrape(session)) == 4
    lines = [r.getMessage() for r in caplog.records if "usage_scrape" in r.getMessage()]
    assert len(lines) == 3, lines
    assert "HTTP 404" in lines[0] and "1 malformed lines" in lines[1] and "recovered" in lines[2]


async def test_an_answer_past_the_byte_bound_is_not_read(server: Server, session: aiohttp.ClientSession) -> None:
    server.routes = {"/metrics": text((FIXTURES / "node-a.prom").read_text())}
    pods = PodList([exporter("dcgm-1", "node-1")])
    source = ExporterSource(pods, port=server.port, limits=Limits(max_bytes=1024))  # type: ignore[arg-type]
    assert await source.scrape(session) == []
    assert "longer than 1024 bytes" in source.trouble.last["gpu-operator/dcgm-1"]


def prometheus_answer() -> dict[str, Any]:
    """What Prometheus answers to the instant query, for the series of the recorded exporter output."""
    samples = parse((FIXTURES / "node-a.prom").read_text(), FAMILIES).samples
    result = [
        {
            "metric": {"__name__": s.name, **dict(s.labels), "instance": "10.0.3.7:9400"},
            "value": [1764931200.5, str(s.value)],
        }
        for s in samples
    ]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


async def test_prometheus_is_asked_one_instant_query_of_the_dcgm_families(
    server: Server, session: aiohttp.ClientSession
) -> None:
    async def query(_: web.Request) -> web.Response:
        return web.json_response(prometheus_answer())

    server.routes = {"/prom/api/v1/query": query}
    server.queries.clear()
    readings = await PrometheusSource(f"http://127.0.0.1:{server.port}/prom/").scrape(session)
    assert [(r.node, r.index, r.utilisation_pct) for r in readings] == [
        ("gpu-node-a", 0, 92),
        ("gpu-node-a", 1, 88),
        ("gpu-node-a", 2, 35),
        ("gpu-node-a", 3, 0),
    ]
    assert server.queries == [
        {"query": '{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_PROF_GR_ENGINE_ACTIVE"}'}
    ]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "the query failed: parse error"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "expected a vector"),
        ([], "the query failed"),
    ],
)
async def test_a_prometheus_answer_that_is_not_a_vector_is_refused(answer: object, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        vector(json.loads(json.dumps(answer)), 100)


class Published:
    def __init__(self) -> None:
        self.items: list[tuple[Any, str | None]] = []

    async def publish(self, items: list[tuple[Any, str | None]]) -> None:
        self.items += items


class Hanging:
    async def scrape(self, session: aiohttp.ClientSession) -> list[GpuReading]:
        await asyncio.Event().wait()
        return []


class Fixed:
    def __init__(self, *scrapes: list[GpuReading]) -> None:
        self.scrapes = list(scrapes)

    async def scrape(self, session: aiohttp.ClientSession) -> list[GpuReading]:
        return self.scrapes.pop(0)


async def test_the_task_averages_its_scrapes_and_names_each_report_by_cluster_node_and_window_end(
    session: aiohttp.ClientSession,
) -> None:
    pod = {
        "metadata": {
            "namespace": "ns",
            "name": "j-1-0",
            "labels": {"fedsched.io/run": "1", "fedsched.io/replica": "0"},
            "annotations": {"fedsched.io/job-id": "j"},
        }
    }
    seen = (PodRef("ns", "j-1-0"),)
    source = Fixed([GpuReading("n1", 0, "", "", 20, 100, seen)], [GpuReading("n1", 0, "", "", 40, 300, seen)])
    published = Published()
    task = UsageTask(ClusterId("k8s-a"), source, published, lambda: [pod], clock_ms=lambda: 0)  # type: ignore[arg-type]
    await task.scrape_once(session)
    await task.scrape_once(session)
    await task.report(1_000, 61_000)
    [(report, ident)] = published.items
    assert isinstance(report, NodeUsageReported) and ident == "k8s/k8s-a/usage/n1/61000"
    assert (report.window_ms, report.gpus[0].utilisation_pct, report.gpus[0].memory_used_mib) == (60_000, 30, 200)
    assert [(j.job_id, j.run) for j in report.jobs] == [(JobId("j"), 1)]


async def test_a_hanging_source_costs_one_scrape_not_the_task(session: aiohttp.ClientSession) -> None:
    published = Published()
    task = UsageTask(ClusterId("k8s-a"), Hanging(), published, list, clock_ms=lambda: 0, timeout_s=0.01)  # type: ignore[arg-type]
    await task.scrape_once(session)  # returns: the scrape's deadline passed
    await task.report(0, 1000)
    assert published.items == [] and task.window.scrapes == 0


async def test_a_prometheus_password_never_reaches_the_log(
    server: Server, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    async def refused(_: web.Request) -> web.Response:
        return web.Response(status=503, text="down")

    server.routes = {"/api/v1/query": refused}
    source = PrometheusSource(f"http://reader:s3cret-9f2@127.0.0.1:{server.port}")
    with caplog.at_level(logging.WARNING, logger="fedsched.connector.kubernetes"):
        assert await source.scrape(session) == []
    assert "usage_scrape_failed" in caplog.text and "reader:***@127.0.0.1" in caplog.text
    assert "s3cret" not in caplog.text
    assert masked("https://prom.example:9090/x") == "https://prom.example:9090/x"
