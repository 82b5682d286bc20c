"""The connector's usage task: scrape every ``scrape_s``, report every ``interval_s``.

Called by ``connectors.kubernetes.connector`` (one more of its tasks). Calls a source
(``usage.sources``: the DCGM exporters, or Prometheus), the pure ``usage.window`` and the connector's
``Reporter``. Who a pod is comes from the connector's own pods (``pods``: what its pod watcher holds),
read at each scrape through ``lifecycle.identify``, so a pod is attributed to the run it was at the time.

A scrape never stalls the connector: it runs in its own task, each HTTP request has ``timeout_s`` (the
session's), the scrape as a whole (discovery and every exporter) is cut at ``SCRAPE_DEADLINES`` times
that, a failing source gives no readings for that scrape (the window averages what was measured), and a
window with nothing measured publishes nothing, which reports read as "no usage data".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

import aiohttp

from connectors.kubernetes import lifecycle, names
from connectors.kubernetes.kubeapi import Obj
from connectors.kubernetes.lifecycle import RunKey
from connectors.kubernetes.reporting import Reporter
from connectors.kubernetes.usage.dcgm import GpuReading, PodRef
from connectors.kubernetes.usage.settings import UsageSettings
from connectors.kubernetes.usage.window import Window
from events.catalog.types import ClusterId
from events.log.publisher import wall_clock_ms

log = logging.getLogger("fedsched.connector.kubernetes")

SCRAPE_DEADLINES = 4
"""A scrape's deadline in request timeouts: room for discovery and a few rounds of exporters."""


class Source(Protocol):
    async def scrape(self, session: aiohttp.ClientSession) -> list[GpuReading]: ...


def pod_runs(pods: Iterable[Obj]) -> dict[PodRef, RunKey]:
    """``namespace/name`` -> run of the connector's pods (pods not ours are left out)."""
    out = {}
    for pod in pods:
        ident = lifecycle.identify(pod)
        meta = pod.get("metadata") or {}
        if ident is not None:
            out[PodRef(str(meta.get("namespace", "")), str(meta.get("name", "")))] = ident.key
    return out


class UsageTask:
    def __init__(
        self,
        cluster: ClusterId,
        source: Source,
        reporter: Reporter,
        pods: Callable[[], Iterable[Obj]],
        *,
        clock_ms: Callable[[], int],
        interval_s: float = 60.0,
        scrape_s: float = 15.0,
        timeout_s: float = 10.0,
    ) -> None:
        self.cluster = cluster
        self.source = source
        self.reporter = reporter
        self.pods = pods
        self.clock_ms = clock_ms
        self.interval_ms = int(interval_s * 1000)
        self.scrape_s = scrape_s
        self.timeout_s = timeout_s
        self.window = Window(cluster)
        self.reported = 0

    @classmethod
    def of(
        cls,
        cluster: ClusterId,
        settings: UsageSettings,
        source: Source,
        reporter: Reporter,
        pods: Callable[[], Iterable[Obj]],
    ) -> UsageTask:
        return cls(
            cluster,
            source,
            reporter,
            pods,
            clock_ms=wall_clock_ms,
            interval_s=settings.interval_s,
            scrape_s=settings.scrape_s,
            timeout_s=settings.timeout_s,
        )

    async def scrape_once(self, session: aiohttp.ClientSession) -> None:
        try:
            readings = await asyncio.wait_for(self.source.scrape(session), SCRAPE_DEADLINES * self.timeout_s)
        except TimeoutError:
            log.warning(
                "event=usage_scrape_timeout cluster=%s after_s=%s", self.cluster, SCRAPE_DEADLINES * self.timeout_s
            )
            return
        runs = pod_runs(self.pods())
        self.window.add(readings, runs.get)

    async def report(self, start_ms: int, end_ms: int) -> None:
        reports = self.window.close(end_ms - start_ms)
        items = [(r, names.event_id(self.cluster, "usage", r.node, end_ms)) for r in reports]
        if items:
            await self.reporter.publish(items)
            self.reported += len(items)
            log.info("event=usage_reported cluster=%s nodes=%d", self.cluster, len(items))

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s, connect=min(self.timeout_s, 5.0))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            start = self.clock_ms()
            while True:
                await self.scrape_once(session)
                now = self.clock_ms()
                if now - start >= self.interval_ms:
                    # The reporter rides out an outage of the log; a fence ends this task and the connector.
                    await self.report(start, now)
                    start = now
                await asyncio.sleep(self.scrape_s)
