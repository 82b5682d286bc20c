"""Where usage comes from: the DCGM exporters the API server knows of, or a Prometheus that scrapes them.

Called by ``usage.task`` once per scrape. Calls the API server (``KubeApi``: list the exporter pods) and
the exporters or Prometheus over HTTP (aiohttp), then the pure ``exposition`` and ``dcgm`` readers.

- ``ExporterSource``: lists the pods of each label selector (the GPU operator labels its exporter
  ``app=nvidia-dcgm-exporter``, dcgm-exporter's own Helm chart ``app.kubernetes.io/name=dcgm-exporter``)
  in one namespace or all, and scrapes ``http://<pod IP>:<port><path>`` of each running one. The pod's
  node (``spec.nodeName``) is the node its GPUs belong to. Listing pods is what the connector's role
  already allows (it watches its own pods cluster-wide); no Service or Endpoints object is needed.
- ``PrometheusSource``: one instant query of the DCGM families at ``<url>/api/v1/query``; the node is the
  series' ``Hostname`` label (the exporter's ``NODE_NAME``).

Each answer is read up to ``max_bytes`` within the session's timeout (``UsageSettings.timeout_s``),
``MAX_CONCURRENT`` exporters at a time; an exporter that fails, times out or answers too much is skipped
for this scrape (the others still count) and logged once per change of what is wrong with it, and again
when it recovers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from connectors.kubernetes.kubeapi import KubeApi, KubeError
from connectors.kubernetes.usage import dcgm
from connectors.kubernetes.usage.dcgm import GpuReading
from connectors.kubernetes.usage.exposition import DEFAULT_LIMITS, Limits, Sample, parse
from connectors.kubernetes.usage.settings import DEFAULT_SELECTORS, UsageSettings

log = logging.getLogger("fedsched.connector.kubernetes")

MAX_CONCURRENT = 32
"""Exporters scraped at once: a thousand-node cluster is read in a few rounds, not a thousand sockets."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    """``namespace/pod`` of the exporter (or the Prometheus URL): what the logs name."""
    url: str
    node: str | None


@dataclass
class Trouble:
    """What is wrong with each endpoint, so that a failure is logged when it starts or changes, not on
    every scrape."""

    last: dict[str, str] = field(default_factory=dict)

    def failed(self, name: str, what: str) -> None:
        if self.last.get(name) != what:
            log.warning("event=usage_scrape_failed endpoint=%s error=%r", name, what)
        self.last[name] = what

    def ok(self, name: str) -> None:
        if self.last.pop(name, None) is not None:
            log.info("event=usage_scrape_recovered endpoint=%s", name)


def masked(url: str) -> str:
    """``url`` with the password of its user info replaced by ``***``."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


async def read_limited(session: aiohttp.ClientSession, url: str, params: Mapping[str, str], max_bytes: int) -> str:
    """The body of a GET, at most ``max_bytes`` of it (then ``ValueError``: the answer is not trusted whole)."""
    async with session.get(url, params=params) as response:
        if response.status != 200:
            raise ValueError(f"HTTP {response.status} {response.reason}")
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > max_bytes:
                raise ValueError(f"the answer is longer than {max_bytes} bytes")
        return body.decode("utf-8", errors="replace")


class ExporterSource:
    def __init__(
        self,
        api: KubeApi,
        *,
        selectors: Sequence[str] = DEFAULT_SELECTORS,
        namespace: str = "",
        port: int = 9400,
        path: str = "/metrics",
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.api = api
        self.selectors = tuple(selectors)
        self.namespace = namespace
        self.port = port
        self.path = path
        self.limits = limits
        self.trouble = Trouble()
        self._slots = asyncio.Semaphore(MAX_CONCURRENT)

    async def endpoints(self) -> list[Endpoint]:
        """The running exporter pods with an IP, each once (several selectors may match one)."""
        where = f"/api/v1/namespaces/{self.namespace}/pods" if self.namespace else "/api/v1/pods"
        found: dict[str, Endpoint] = {}
        for selector in self.selectors:
            try:
                listed = await self.api.request("GET", where, query={"labelSelector": selector})
            except KubeError as error:
                self.trouble.failed(f"list {where}?labelSelector={selector}", str(error))
                continue
            self.trouble.ok(f"list {where}?labelSelector={selector}")
            for pod in listed.get("items") or []:
                endpoint = self._endpoint(pod)
                if endpoint is not None:
                    found.setdefault(endpoint.name, endpoint)
        return [found[name] for name in sorted(found)]

    def _endpoint(self, pod: Mapping[str, Any]) -> Endpoint | None:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        ip = str(status.get("podIP") or "")
        if status.get("phase") != "Running" or not ip or meta.get("deletionTimestamp"):
            return None
        host = f"[{ip}]" if ":" in ip else ip
        node = spec.get("nodeName")
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        return Endpoint(name, f"http://{host}:{self.port}{self.path}", str(node) if node else None)

    async def scrape(self, session: aiohttp.ClientSession) -> list[GpuReading]:
        endpoints = await self.endpoints()
        results = await asyncio.gather(*(self._one(session, e) for e in endpoints))
        return [reading for readings in results for reading in readings]

    async def _one(self, session: aiohttp.ClientSession, endpoint: Endpoint) -> list[GpuReading]:
        try:
            async with self._slots:
                text = await read_limited(session, endpoint.url, {}, self.limits.max_bytes)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            self.trouble.failed(endpoint.name, f"{endpoint.url}: {str(error) or type(error).__name__}")
            return []
        parsed = parse(text, dcgm.FAMILIES, self.limits)
        readings, problems = dcgm.readings(parsed.samples, endpoint.node)
        notes = [*parsed.errors, *problems[:3]] + ([parsed.truncated] if parsed.truncated else [])
        if notes:
            self.trouble.failed(endpoint.name, f"{parsed.malformed} malformed lines; {'; '.join(notes)}")
        else:
            self.trouble.ok(endpoint.name)
        return readings


def source_of(settings: UsageSettings, api: KubeApi) -> ExporterSource | PrometheusSource:
    if settings.prometheus_url:
        return PrometheusSource(settings.prometheus_url)
    selectors = tuple(s for s in settings.selectors if s.strip())
    return ExporterSource(
        api, selectors=selectors, namespace=settings.namespace, port=settings.port, path=settings.path
    )


class PrometheusSource:
    def __init__(self, url: str, *, limits: Limits = DEFAULT_LIMITS) -> None:
        self.url = url.rstrip("/")
        self.shown = masked(self.url)
        """The URL as the logs name it: a password in it (``https://user:secret@prom``) never is."""
        self.limits = limits
        self.trouble = Trouble()

    @property
    def query(self) -> str:
        return '{__name__=~"' + "|".join(dcgm.FAMILIES) + '"}'

    async def scrape(self, session: aiohttp.ClientSession) -> list[GpuReading]:
        try:
            text = await read_limited(session, f"{self.url}/api/v1/query", {"query": self.query}, self.limits.max_bytes)
            samples = vector(json.loads(text), self.limits.max_series)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            self.trouble.failed(self.shown, (str(error) or type(error).__name__).replace(self.url, self.shown))
            return []
        readings, problems = dcgm.readings(samples)
        if problems:
            self.trouble.failed(self.shown, f"{len(problems)} series without node or GPU, e.g. {problems[0]}")
        else:
            self.trouble.ok(self.shown)
        return readings


def vector(answer: object, max_series: int) -> list[Sample]:
    """The samples of a Prometheus instant query's answer (``resultType`` vector). ``ValueError`` when
    the answer is not one."""
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = answer.get("error") if isinstance(answer, dict) else None
        raise ValueError(f"the query failed: {error or repr(answer)[:200]}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise ValueError(f"expected a vector, got {data.get('resultType')!r}")
    samples = []
    for series in (data.get("result") or [])[:max_series]:
        metric, value = series.get("metric") or {}, series.get("value") or []
        if len(value) != 2:
            continue
        labels = tuple(sorted((str(k), str(v)) for k, v in metric.items() if k != "__name__"))
        samples.append(Sample(str(metric.get("__name__", "")), labels, float(value[1]), int(float(value[0]) * 1000)))
    return samples
