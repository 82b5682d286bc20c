"""Helpers for the tests against the real kube-apiserver: an admin client, a tap on the log, connectors.

The API server comes from ``deploy/local/kube.sh`` (``kube_config`` in ``tests/conftest.py``: the test
command starts it). No kubelet runs: tests create Node objects and write pod status through the API
as a kubelet would (``Kube.node``, ``Kube.set_pod_status``). Every test uses its own cluster id and
node names, so tests sharing the API server and the log never see each other's events.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from connectors.kubernetes import ConnectorConfig, KubeApi, KubeError, KubernetesConnector, names
from connectors.kubernetes.kubeapi import MERGE_PATCH
from connectors.kubernetes.throttle import RateLimiter
from connectors.kubernetes.usage import UsageSettings
from events.catalog.base import Event
from events.catalog.errors import EventError
from events.log import EventLog, LogReader, TopicPartition
from events.plumbing.tasks import cancel_and_wait
from events.wire.codec import decode
from events.wire.envelope import Envelope

Obj = dict[str, Any]
_counter = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{next(_counter)}"


async def wait_until(check: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition") -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; fail after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


class Kube:
    """The admin's view of the API server, for the test to play kubelet and operator."""

    def __init__(self, api: KubeApi, directory: Path) -> None:
        self.api = api
        self.directory = directory

    async def node(self, node: Obj) -> Obj:
        """Create a Node with its status, as a kubelet registering it would."""
        return await self.api.request("POST", "/api/v1/nodes", body=node)

    async def patch_node(self, name: str, patch: Obj, *, status: bool = False) -> Obj:
        path = f"/api/v1/nodes/{name}" + ("/status" if status else "")
        return await self.api.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    async def delete_namespace(self, name: str) -> None:
        with contextlib.suppress(KubeError):
            await self.api.request("DELETE", f"/api/v1/namespaces/{name}")

    async def delete_node(self, name: str) -> None:
        with contextlib.suppress(KubeError):
            await self.api.request("DELETE", f"/api/v1/nodes/{name}")

    async def pods(self, selector: str) -> list[Obj]:
        listing = await self.api.request("GET", "/api/v1/pods", query={"labelSelector": selector})
        return sorted(listing.get("items") or [], key=lambda p: p["metadata"]["name"])

    async def job_pods(self, cluster: str, job_id: str) -> list[Obj]:
        return await self.pods(f"{names.LABEL_CLUSTER}={cluster},{names.LABEL_JOB}={job_id}")

    async def set_pod_status(self, pod: Obj, status: Obj) -> Obj:
        """Write a pod's status through the status subresource, as the kubelet does."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        return await self.api.request("PATCH", path, body={"status": status}, content_type=MERGE_PATCH)

    async def delete_pod(self, pod: Obj, grace_s: int | None = None) -> None:
        meta = pod["metadata"]
        body = {} if grace_s is None else {"gracePeriodSeconds": grace_s}
        with contextlib.suppress(KubeError):
            await self.api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body=body)

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def stop(self) -> None:
        await _script("stop", self.directory)

    async def start(self) -> None:
        await _script("start", self.directory)


KUBE_SH = Path(__file__).resolve().parents[3] / "deploy" / "local" / "kube.sh"


async def _script(command: str, directory: Path) -> None:
    script = KUBE_SH
    process = await asyncio.create_subprocess_exec(
        "bash", str(script), command, str(directory), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await process.communicate()
    if process.returncode != 0:
        pytest.fail(f"kube.sh {command} failed: {err.decode()[-2000:]}")


@dataclass
class Tap:
    """Reads what lands on the inventory and jobs topics from the moment it was made."""

    log: EventLog
    reader: LogReader
    positions: dict[TopicPartition, int]
    seen: list[Envelope] = field(default_factory=list)

    async def poll(self) -> list[Envelope]:
        for tp, offset in list(self.positions.items()):
            while True:
                batch = await self.reader.read(tp, offset, max_records=2000, timeout_s=0.0)
                if not batch:
                    break
                for record in batch:
                    offset = record.offset + 1
                    with contextlib.suppress(EventError):
                        self.seen.append(decode(record.headers, record.value))
            self.positions[tp] = offset
        return self.seen

    def events(self, kind: type[Event], **match: Any) -> list[Any]:
        return [
            e.data
            for e in self.seen
            if isinstance(e.data, kind) and all(getattr(e.data, k) == v for k, v in match.items())
        ]

    def envelopes(self, kind: type[Event], **match: Any) -> list[Envelope]:
        return [
            e for e in self.seen if isinstance(e.data, kind) and all(getattr(e.data, k) == v for k, v in match.items())
        ]

    async def until(self, predicate: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition") -> Any:
        """Wait until ``predicate()`` (over what has been seen) is truthy, reading the log meanwhile."""

        async def check() -> Any:
            await self.poll()
            return predicate()

        return await wait_until(check, timeout_s, what)

    async def wait(self, kind: type[Event], count: int = 1, timeout_s: float = 30.0, **match: Any) -> list[Any]:
        async def check() -> list[Any] | None:
            await self.poll()
            found = self.events(kind, **match)
            return found if len(found) >= count else None

        return await wait_until(check, timeout_s, f"{count} x {kind.__name__} {match}")  # type: ignore[no-any-return]


class Running:
    """Connectors started by a test; stopped (cancelled) at its end."""

    def __init__(self, log: EventLog, kube_config: str) -> None:
        self.log = log
        self.kube_config = kube_config
        self._started: list[tuple[KubernetesConnector, asyncio.Task[None]]] = []

    async def start(self, config: ConnectorConfig, *, kubeconfig: str | None = None) -> KubernetesConnector:
        api = await KubeApi.from_kubeconfig(kubeconfig or self.kube_config, limiter=RateLimiter(200.0, 400))
        connector = KubernetesConnector(config, self.log, api)
        task = asyncio.create_task(connector.run())
        self._started.append((connector, task))
        return connector

    async def stop(self, connector: KubernetesConnector) -> None:
        for entry in list(self._started):
            if entry[0] is connector:
                self._started.remove(entry)
                await _cancel(*entry)

    async def stop_all(self) -> None:
        while self._started:
            await _cancel(*self._started.pop())


async def _cancel(connector: KubernetesConnector, task: asyncio.Task[None]) -> None:
    await cancel_and_wait([task], again_after_s=10.0)  # its own clean-up may take a while
    await connector.api.close()


def config(cluster: str, **changes: Any) -> ConnectorConfig:
    """A connector configuration with short timers, so tests wait seconds, not minutes."""
    fields: dict[str, Any] = {
        "cluster": cluster,
        "site": "test-site",
        "region": "test-region",
        "unreachable_after_s": 1.0,
        "stop_margin_s": 1,
        "cancel_grace_s": 1,
        "failure_grace_s": 1,
        "max_backoff_s": 1.0,
        "default_image": "busybox:1.36",
        # No usage unless a test asks: exporter pods another test made must not be scraped into this
        # test's cluster (every test's connector sees every namespace of the shared API server).
        "usage": UsageSettings(interval_s=0),
    }
    fields.update(changes)
    return ConnectorConfig(**fields)


async def delete_nodes(kube: Kube, names_: Iterable[str]) -> None:
    await asyncio.gather(*(kube.delete_node(n) for n in names_))


class Proxy:
    """A TCP proxy in front of the API server whose connections the test can cut (a dropped watch)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.cuts = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._links.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            self._links.discard(writer)
            writer.close()

    @property
    def open(self) -> int:
        return len(self._links)

    def cut(self) -> int:
        """Close every open connection, both ways; returns how many there were."""
        links = list(self._links)
        for writer in links:
            transport = writer.transport
            transport.abort()
        self._links.clear()
        self.cuts += 1
        return len(links)

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def kubeconfig_via(original: str, port: int, directory: Path) -> str:
    """A copy of a kubeconfig whose server is 127.0.0.1:``port`` (the proxy)."""
    import re

    text = Path(original).read_text()
    path = directory / f"kubeconfig-{port}"
    path.write_text(re.sub(r"server: https://127\.0\.0\.1:\d+", f"server: https://127.0.0.1:{port}", text))
    return str(path)
