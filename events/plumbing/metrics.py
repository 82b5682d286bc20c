"""Health and Prometheus metrics over plain HTTP, for every fedsched process.

Called by composition roots (``fedsched up``, ``fedsched scheduler``...), which register the hosts'
``samples`` and a follower's lag (``events.hosting.lag``). A tiny asyncio server with two paths:
``/healthz`` (200 when every registered check passes, 503 naming the failing ones) and ``/metrics``
(Prometheus text exposition 0.0.4). Sources are callables polled at scrape time, so the services keep
plain counters and pay nothing between scrapes. Besides its own checks, ``/healthz`` fails naming every
dependency a loop of this process is waiting for (``events.plumbing.outage``): a process that rides out
an outage of the log or the database says so while it waits; and every supervised component that is
not running now (``events.plumbing.tasks.Supervised``: between a crash and its restart, or fenced).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Protocol

from events.plumbing.outage import unreachable_now
from events.plumbing.tasks import cancel_and_wait, components_down

log = logging.getLogger("fedsched.metrics")

Sample = tuple[str, dict[str, str], float]  # name, labels, value
Source = Callable[[], Iterable[Sample]]
Check = Callable[[], bool]


class Measured(Protocol):
    """A measure taken in the background while the process serves (a follower's lag behind the log,
    ``events.hosting.lag.Lag``): its samples, whether it is fresh (a health check), and its loop."""

    component: str

    def samples(self) -> list[Sample]: ...

    def fresh(self) -> bool: ...

    async def run(self, stop: asyncio.Event) -> None: ...


#: name: (Prometheus type, help text) of every metric a fedsched process exports.
_HELP = {
    "fedsched_scheduler_cycles_total": ("counter", "Scheduling cycles recorded"),
    "fedsched_scheduler_decisions_total": ("counter", "Decision events published"),
    "fedsched_scheduler_placements_total": ("counter", "Jobs placed"),
    "fedsched_scheduler_cycle_seconds": ("gauge", "Duration of the last cycle"),
    "fedsched_scheduler_cycle_phase_seconds": ("gauge", "Duration of each phase of the last cycle"),
    "fedsched_scheduler_leader": ("gauge", "1 when this instance leads"),
    "fedsched_queue_depth": ("gauge", "Jobs waiting, per priority class"),
    "fedsched_events_folded_total": ("counter", "Log records folded, per component"),
    "fedsched_consumer_lag": ("gauge", "Records committed but not yet folded, per component"),
    "fedsched_api_requests_total": ("counter", "API requests by method and status code"),
    "fedsched_intake_requests_total": ("counter", "Intake requests by outcome: accepted, rejected, dead-lettered"),
    "fedsched_watch_streams": ("gauge", "Open WatchJob streams (one per watched partition)"),
    "fedsched_watch_partitions": ("gauge", "Partitions the API reads for its WatchJob streams, one reader each"),
    "fedsched_placement_latency_seconds": ("gauge", "Submit-to-placement latency quantiles (latest 1,024)"),
    "fedsched_governance_outputs_total": ("counter", "Events governance published"),
    "fedsched_governance_steps_total": ("counter", "Governance steps that published something"),
    "fedsched_unreadable_total": ("counter", "Log records that could not be read, per component"),
    "fedsched_archived_total": ("counter", "Log records copied into the audit archive"),
    "fedsched_audit_checkpoints_total": ("counter", "Signed checkpoints of the audit archive's heads made"),
    "fedsched_audit_checkpoints_refused_total": ("counter", "Checkpoints refused (heads gone backwards)"),
    "fedsched_audit_checkpoint_seq": ("gauge", "Number of the newest signed checkpoint"),
    "fedsched_dead_lettered_total": ("counter", "Records sent to the dead-letter topic, per component"),
    "fedsched_outputs_published_total": ("counter", "Profile and quota events published, per component"),
    "fedsched_component_restarts_total": (
        "counter",
        "Restarts of a supervised component after it ended early, per component and reason",
    ),
    "fedsched_component_up": ("gauge", "1 while a supervised component runs, 0 while it is down"),
    "fedsched_intake_reading": ("gauge", "1 while the intake reads its topic, 0 while it cannot"),
    "fedsched_connector_reachable": ("gauge", "1 while the cluster's API server answers the connector"),
    "fedsched_connector_nodes": ("gauge", "Nodes the connector knows in its cluster"),
    "fedsched_connector_pods_created_total": ("counter", "Pods the connector created"),
    "fedsched_connector_decisions_total": ("counter", "Decision and job records the connector handled"),
    "fedsched_connector_live_jobs": ("gauge", "Submissions of live jobs the connector keeps"),
    "fedsched_connector_events_published_total": ("counter", "Events the connector published"),
    "fedsched_connector_rosters_total": ("counter", "Node rosters the connector published"),
    "fedsched_connector_usage_reports_total": ("counter", "NodeUsageReported the connector published"),
    "fedsched_connector_lists_total": ("counter", "Full lists of a resource from the API server"),
    "fedsched_connector_relists_gone_total": ("counter", "Lists again after the watched version was gone (410)"),
    "fedsched_connector_watch_events_total": ("counter", "Watch events received, per resource"),
    "fedsched_connector_watch_errors_total": ("counter", "Watches that failed, per resource"),
}


class Metrics:
    def __init__(self) -> None:
        self._sources: list[Source] = []
        self._checks: dict[str, Check] = {}

    def add_source(self, source: Source) -> None:
        self._sources.append(source)

    def add_check(self, name: str, check: Check) -> None:
        self._checks[name] = check

    def render(self) -> str:
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for source in self._sources:
            try:
                for name, labels, value in source():
                    samples.setdefault(name, []).append((labels, value))
            except Exception:  # a broken source must not take the scrape down
                log.exception("event=metrics_source_failed")
        lines = []
        for name in sorted(samples):
            # A name missing from _HELP (a test keeps that from happening) is not said to be a gauge.
            kind, text = _HELP.get(name, ("untyped", "fedsched metric without a description"))
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            for labels, value in samples[name]:
                label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
                lines.append(f"{name}{{{label_text}}} {value:g}" if label_text else f"{name} {value:g}")
        return "\n".join(lines) + "\n"

    def failing(self) -> list[str]:
        bad = []
        for name, check in sorted(self._checks.items()):
            try:
                ok = check()
            except Exception:
                ok = False
            if not ok:
                bad.append(name)
        return sorted({*bad, *unreachable_now(), *components_down()})

    async def serve(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._handle, host, port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else "/"
            if path == "/metrics":
                status, body, ctype = 200, self.render(), "text/plain; version=0.0.4"
            elif path in ("/healthz", "/readyz"):
                bad = self.failing()
                status, body, ctype = (
                    (503, "failing: " + ", ".join(bad) + "\n", "text/plain")
                    if bad
                    else (
                        200,
                        "ok\n",
                        "text/plain",
                    )
                )
            else:
                status, body, ctype = 404, "not found\n", "text/plain"
            data = body.encode()
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@contextlib.asynccontextmanager
async def serving(
    listen: str,
    sources: Iterable[Source],
    *,
    lag: Measured | None = None,
    checks: Mapping[str, Check] | None = None,
) -> AsyncIterator[Metrics | None]:
    """``/metrics`` and ``/healthz`` on ``listen`` (``host:port``; empty: nothing served) for the block,
    with the component's consumer lag measured in the background (its freshness is a health check)."""
    if not listen:
        yield None
        return
    metrics = Metrics()
    for source in sources:
        metrics.add_source(source)
    for name, check in (checks or {}).items():
        metrics.add_check(name, check)
    if lag is not None:
        metrics.add_source(lag.samples)
        metrics.add_check("log", lag.fresh)
    host, _, port = listen.rpartition(":")
    server = await metrics.serve(host or "127.0.0.1", int(port))  # a port in use fails here, nothing started
    log.info("event=metrics_serving listen=%s", listen)
    stop = asyncio.Event()
    task = None if lag is None else asyncio.create_task(lag.run(stop), name=f"lag-{lag.component}")
    try:
        yield metrics
    finally:
        stop.set()
        server.close()
        if task is not None:
            await cancel_and_wait([task], grace_s=5.0)


def latency_quantiles(latencies_ms: Iterable[int]) -> list[Sample]:
    ordered = sorted(latencies_ms)
    if not ordered:
        return []
    return [
        (
            "fedsched_placement_latency_seconds",
            {"quantile": q},
            ordered[min(len(ordered) - 1, int(f * len(ordered)))] / 1000,
        )
        for q, f in (("0.5", 0.5), ("0.95", 0.95), ("0.99", 0.99))
    ]
