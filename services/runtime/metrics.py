"""Health and Prometheus metrics over plain HTTP, for every fedsched process.

Called by composition roots (``fedsched up``, ``fedsched scheduler``...). A tiny asyncio server with
two paths: ``/healthz`` (200 when every registered check passes, 503 naming the failing ones) and
``/metrics`` (Prometheus text exposition 0.0.4). Sources are callables polled at scrape time, so the
services keep plain counters and pay nothing between scrapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.scheduler.host import SchedulerHost

log = logging.getLogger("fedsched.metrics")

Sample = tuple[str, dict[str, str], float]  # name, labels, value
Source = Callable[[], Iterable[Sample]]
Check = Callable[[], bool]

_HELP = {
    "fedsched_scheduler_cycles_total": ("counter", "Scheduling cycles recorded"),
    "fedsched_scheduler_decisions_total": ("counter", "Decision events published"),
    "fedsched_scheduler_placements_total": ("counter", "Jobs placed"),
    "fedsched_scheduler_cycle_seconds": ("gauge", "Duration of the last cycle"),
    "fedsched_scheduler_leader": ("gauge", "1 when this instance leads"),
    "fedsched_queue_depth": ("gauge", "Jobs waiting, per priority class"),
    "fedsched_events_folded_total": ("counter", "Log records folded, per component"),
    "fedsched_consumer_lag": ("gauge", "Records committed but not yet folded, per component"),
    "fedsched_api_requests_total": ("counter", "API requests by method and status code"),
    "fedsched_placement_latency_seconds": ("gauge", "Submit-to-placement latency quantiles"),
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
            kind, text = _HELP.get(name, ("gauge", name))
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
        return bad

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


def scheduler_samples(scheduler: SchedulerHost) -> list[Sample]:
    """The scheduler's counters and its queue depth per priority class."""
    m = scheduler.metrics
    samples: list[Sample] = [
        ("fedsched_scheduler_cycles_total", {}, m.cycles),
        ("fedsched_scheduler_decisions_total", {}, m.decisions),
        ("fedsched_scheduler_placements_total", {}, m.placements),
        ("fedsched_scheduler_cycle_seconds", {}, m.last_cycle_ms / 1000),
        ("fedsched_scheduler_leader", {}, 1.0 if m.leader else 0.0),
        *(
            ("fedsched_scheduler_cycle_phase_seconds", {"phase": phase}, ms / 1000)
            for phase, ms in sorted(m.last_phases_ms.items())
        ),
        ("fedsched_events_folded_total", {"component": "scheduler"}, m.folded),
    ]
    depth: dict[str, int] = {}
    for job in scheduler.state.pending_jobs():
        key = job.priority_class.value
        depth[key] = depth.get(key, 0) + 1
    samples += [("fedsched_queue_depth", {"priority_class": k}, v) for k, v in sorted(depth.items())]
    return samples
