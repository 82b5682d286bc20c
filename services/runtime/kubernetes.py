"""Kubernetes clusters joined to ``fedsched up``: one in-process connector each, supervised.

Called by ``services.runtime.up`` (``start_kubernetes``) for every ``KubernetesJoin`` of its
configuration (``fedsched up --kubernetes``). Calls ``connectors.kubernetes``: each connector is the one
``fedsched connector kubernetes`` runs, on the embedded log, kept running by a ``Supervised`` (a crash
is replaced by a fresh connector, which restates the cluster from the API server and the log; a second
connector for the same cluster elsewhere fences this one, which then stays down), with its counters in
the process's ``/metrics`` and its reachability in ``/healthz``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from connectors.kubernetes import ConnectorConfig, KubeApi, KubernetesConnector, metrics
from connectors.kubernetes.throttle import RateLimiter
from events.hosting.lag import Lag
from events.log.contract import EventLog, ProducerFenced, TopicPartition
from events.plumbing.metrics import Metrics, Sample
from events.plumbing.tasks import Supervised, cancel_and_wait

log = logging.getLogger("fedsched.up")


@dataclass(frozen=True)
class KubernetesJoin:
    """One Kubernetes cluster to join: the connector's settings and how to reach its API server."""

    config: ConnectorConfig
    kubeconfig: str | None = None
    """The kubeconfig file (``None``: ``KUBECONFIG``, else ``~/.kube/config``)."""
    context: str | None = None
    qps: float = 20.0
    burst: int = 40


class Joined:
    """A joined cluster's connector now (a restart replaces it) and its supervisor."""

    def __init__(self, join: KubernetesJoin, event_log: EventLog, stop: asyncio.Event) -> None:
        self.join = join
        self._log = event_log
        self._stop = stop
        self.connector: KubernetesConnector | None = None
        self._api: KubeApi | None = None
        name = f"kubernetes-{join.config.cluster}"
        self.supervised = Supervised(
            name, self._run, stop=stop, restart=self._fresh, fenced=lambda e: isinstance(e, ProducerFenced)
        )

    async def _fresh(self) -> None:
        await self.close()
        join = self.join
        limiter = RateLimiter(join.qps, join.burst)
        self._api = await KubeApi.from_kubeconfig(join.kubeconfig, join.context, limiter=limiter)
        self.connector = KubernetesConnector(join.config, self._log, self._api)

    async def _run(self) -> None:
        """The connector until ``stop`` is set (it runs until cancelled) or it ends early (a crash)."""
        if self.connector is None:
            await self._fresh()
        assert self.connector is not None
        task = asyncio.ensure_future(self.connector.run())
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait([task, stopping], again_after_s=10.0)
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]

    async def close(self) -> None:
        api, self._api, self.connector = self._api, None, None
        if api is not None:
            await api.close()

    def samples(self) -> list[Sample]:
        return [] if self.connector is None else metrics.samples(self.connector)

    def reachable(self) -> bool:
        return self.connector is None or metrics.checks(self.connector)["kubernetes-api"]()

    def positions(self) -> dict[TopicPartition, int]:
        return {} if self.connector is None else dict(self.connector.consumer.positions)


def start_kubernetes(
    joins: tuple[KubernetesJoin, ...],
    event_log: EventLog,
    stop: asyncio.Event,
    registry: Metrics,
    tasks: list[asyncio.Task[None]],
    closers: list[Callable[[], Awaitable[object]]],
) -> dict[str, Supervised]:
    """Start a supervised connector per cluster; their samples, checks and lags go to ``registry``."""
    supervised: dict[str, Supervised] = {}
    for join in joins:
        joined = Joined(join, event_log, stop)
        name = joined.supervised.name
        supervised[name] = joined.supervised
        registry.add_source(joined.samples)
        registry.add_check(f"{name}-api", joined.reachable)
        lag = Lag(event_log, f"connector-{join.config.cluster}", joined.positions)
        registry.add_source(lag.samples)
        tasks.append(asyncio.create_task(lag.run(stop), name=f"lag-connector-{join.config.cluster}"))
        task = asyncio.create_task(joined.supervised.run(), name=name)
        tasks.append(task)
        closers.append(_after(task, joined.close))
        log.info("event=kubernetes_joined cluster=%s kubeconfig=%s", join.config.cluster, join.kubeconfig or "default")
    return supervised


def _after(task: asyncio.Task[None], close: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """Close the API client once the connector has stopped (``stop`` is set before closers run): its own
    clean-up still calls the API server."""

    async def closing() -> None:
        await cancel_and_wait([task], grace_s=15.0)
        await close()

    return closing
