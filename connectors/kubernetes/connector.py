"""The Kubernetes connector: one long-running process per cluster, wiring the parts together.

Called by ``fedsched connector kubernetes`` (``services.cli.connector_cmd``) and by tests, which run it
in-process. ``run()`` works until cancelled:

1. publish ``ClusterRegistered`` (what the cluster is; a restart restates it; ``registration`` restates
   it when the nodes show a GPU or NPU model without a rate);
2. list-then-watch nodes -> ``NodeObserved`` / ``GpuHealthReported`` / ``NodeRemoved`` (``node_watcher``),
   having read back the cluster's roster of nodes from the log (``roster``): the first list reports removed
   the nodes deleted while no connector ran; the roster is published again after lists and changes;
3. list-then-watch its pods -> ``JobStarted`` / ``JobSucceeded`` / ``JobFailed`` / ``JobPreempted`` / ...
   (``pod_watcher``), plus a one-second timer for deletion deadlines;
4. consume the decisions and jobs topics in the group ``fedsched-connector-kubernetes-<cluster>`` and
   carry out this cluster's decisions (``executor``); and the governance topic, whose tenant settings
   (image policy, quota) it first reads from the log's start (``tenants``);
5. read GPU usage from the DCGM exporters (or Prometheus) -> ``NodeUsageReported`` (``usage``);
6. follow reachability: ``ClusterStatusChanged`` when the API server stops or starts answering, or
   refuses or again allows the connector's requests (401, or the authoriser's 403).

Its producer is transactional with the id ``fedsched-connector-kubernetes-<cluster>``: a second
connector for the same cluster fences the first, which then stops (``ProducerFenced``). Step 4 has every
host's shape (``events.hosting``): the ``EventConsumer`` (a group follower, the executor as its step, a
sink for dead letters and offsets) inside ``ride_out``, which rides out an outage of the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from connectors.kubernetes import roster
from connectors.kubernetes.executor import Executor
from connectors.kubernetes.jobbook import JobBook
from connectors.kubernetes.kubeapi import KubeApi
from connectors.kubernetes.node_watcher import NodeWatcher
from connectors.kubernetes.pod_watcher import PodWatcher
from connectors.kubernetes.pods import RenderOptions
from connectors.kubernetes.reflector import Reflector
from connectors.kubernetes.registration import Registration
from connectors.kubernetes.reporting import Reachability, Reporter
from connectors.kubernetes.tenants import OTHER_GOVERNANCE, TenantBook, TenantOptions
from connectors.kubernetes.throttle import Backoff
from connectors.kubernetes.usage import UsageSettings, UsageTask, source_of
from events.catalog.decisions import EXPLANATIONS_AND_CYCLES
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuRate
from events.catalog.topics import DECISIONS, GOVERNANCE, JOBS
from events.catalog.types import ClusterId
from events.hosting.consumer import EventConsumer
from events.hosting.loop import ride_out
from events.log import EventLog, LogError, ProducerFenced
from events.log.publisher import Publisher, wall_clock_ms
from events.plumbing.outage import Outage, transient
from events.plumbing.tasks import cancel_and_wait

log = logging.getLogger("fedsched.connector.kubernetes")


@dataclass(frozen=True, slots=True)
class ConnectorConfig:
    cluster: ClusterId
    site: str = "default"
    region: str = "default"
    display_name: str = ""
    currency: str = "USD"
    labels: dict[str, str] = field(default_factory=dict)
    gpu_rates: tuple[tuple[str, int], ...] = ()
    """Price of a device-hour per GPU or NPU model (millionths of ``currency``); a model the nodes show
    without one gets the shared default (``connectors.rates``)."""
    datasets: tuple[str, ...] = ()
    namespace_prefix: str = "fedsched-"
    default_image: str | None = None
    unreachable_after_s: float = 5.0
    stop_margin_s: int = 30
    """How long past a pod's deletion deadline it counts as stopped without a kubelet's word."""
    cancel_grace_s: int = 30
    failure_grace_s: int = 30
    denied_retry_s: float = 300.0
    """How long a decision is retried while the API server refuses the connector itself (401/403)."""
    forget_denied_s: float = 60.0
    """How long a refusal not seen again keeps the cluster reported unreachable."""
    watch_timeout_s: int = 300
    max_backoff_s: float = 30.0
    publish_batch: int = 500
    usage: UsageSettings = field(default_factory=UsageSettings)
    """Where GPU usage is read from (the DCGM exporters, or Prometheus) and how often."""
    rendezvous_port: int = 29500
    """``MASTER_PORT`` of training runs whose template names no rendezvous port (``kinds.master_port``)."""
    cluster_domain: str = "cluster.local"
    """The cluster's DNS domain (the kubelet's ``--cluster-domain``), in training runs' ``MASTER_ADDR``."""
    crash_restarts: int = 5
    """Restarts after which a crash-looping container of a service fails its run (``lifecycle``)."""
    allowed_registries: tuple[str, ...] | None = None
    """Registries (``HOST[:PORT][/PATH]``) every image in this cluster must come from, whatever its tenant
    allows (``None``: the tenants' image policies alone decide)."""
    pull_secret_namespace: str | None = None
    """The namespace the platform team keeps tenants' pull secrets in; copied into tenant namespaces."""
    container_cpu_milli: int = 100
    """The CPU request of a container that asks none in a tenant namespace (its LimitRange)."""
    container_memory_mib: int = 256
    """The memory request of a container that asks none in a tenant namespace (its LimitRange)."""

    def __post_init__(self) -> None:
        if not 1 <= self.rendezvous_port <= 65535:
            raise ValueError(f"rendezvous_port: {self.rendezvous_port} is not a port number (1-65535)")
        if self.crash_restarts < 1:
            raise ValueError(f"crash_restarts: {self.crash_restarts} must be at least 1")

    @property
    def group_id(self) -> str:
        return f"fedsched-connector-kubernetes-{self.cluster}"

    @property
    def source(self) -> str:
        return f"urn:fedsched:connector:kubernetes:{self.cluster}"


def registered(c: ConnectorConfig) -> ClusterRegistered:
    """What the configuration says the cluster is (its rates: the configured ones; see ``registration``)."""
    return ClusterRegistered(
        cluster=c.cluster,
        kind=ClusterKind.KUBERNETES,
        display_name=c.display_name,
        site=c.site,
        region=c.region,
        labels=c.labels,
        currency=c.currency,
        gpu_rates=tuple(GpuRate(model=m, micro_per_gpu_hour=r) for m, r in c.gpu_rates),
        datasets=c.datasets,
    )


class KubernetesConnector:
    def __init__(self, config: ConnectorConfig, event_log: EventLog, api: KubeApi) -> None:
        self.config = config
        self.log = event_log
        self.api = api
        self.publisher = Publisher(event_log, config.source, transactional_id=config.group_id)
        self.reporter = Reporter(self.publisher)
        self.reachability = Reachability(
            config.cluster,
            self.reporter,
            unreachable_after_s=config.unreachable_after_s,
            forget_denied_s=config.forget_denied_s,
        )
        api.on_result = self.reachability.result
        self.registered = Registration(registered(config), wall_clock_ms)
        self.nodes = NodeWatcher(
            config.cluster,
            self.reporter,
            batch=config.publish_batch,
            clock_ms=wall_clock_ms,
            registration=self.registered,
        )
        self.pods = PodWatcher(
            api,
            config.cluster,
            self.reporter,
            clock_ms=wall_clock_ms,
            stop_margin_s=config.stop_margin_s,
            failure_grace_s=config.failure_grace_s,
            crash_restarts=config.crash_restarts,
        )
        self.pods.gpu_health = self.nodes.gpu_health
        self.pods.npu_health = self.nodes.npu_health
        self.book = JobBook(event_log, config.cluster)
        options = RenderOptions(
            config.cluster,
            config.namespace_prefix,
            config.default_image,
            rendezvous_port=config.rendezvous_port,
            cluster_domain=config.cluster_domain,
            devices=self.nodes.devices.get,
        )
        self.executor = Executor(
            api,
            self.book,
            self.reporter,
            options,
            cancel_grace_s=config.cancel_grace_s,
            backoff=Backoff(0.2, config.max_backoff_s),
            has_pods=self.pods.has_job,
            denied_retry_s=config.denied_retry_s,
            tenants=TenantBook(event_log),
            tenant_options=TenantOptions(
                config.allowed_registries,
                config.pull_secret_namespace,
                config.container_cpu_milli,
                config.container_memory_mib,
            ),
        )
        self.pods.is_over = self.executor.is_over
        self.pods.recall = self.book.recall
        self.node_reflector = self._reflector("/api/v1/nodes", "nodes", None)
        self.pod_reflector = self._reflector("/api/v1/pods", "pods", self.pods.label_selector)
        self.outage = Outage(f"connector-{config.cluster}")
        self.usage = (
            UsageTask.of(config.cluster, config.usage, source_of(config.usage, api), self.reporter, self._our_pods)
            if config.usage.enabled
            else None
        )
        self.consumer = EventConsumer(
            event_log,
            config.group_id,
            [DECISIONS.name, JOBS.name, GOVERNANCE.name],
            self.executor.handle,
            skip_types=EXPLANATIONS_AND_CYCLES | OTHER_GOVERNANCE,
        )

    def _reflector(self, path: str, name: str, selector: str | None) -> Reflector:
        backoff = Backoff(0.2, self.config.max_backoff_s)
        return Reflector(
            self.api,
            path,
            name=name,
            label_selector=selector,
            watch_timeout_s=self.config.watch_timeout_s,
            backoff=backoff,
        )

    def _our_pods(self) -> list[dict[str, Any]]:
        return [pod for run in self.pods.runs.values() for pod in run.pods.values()]

    async def _consume(self) -> None:
        """Act on the cluster's decisions until cancelled; an outage of the log is ridden out
        (``events.hosting.loop``), a fence ends the connector."""
        await self.pod_reflector.synced.wait()  # know our pods before acting on decisions
        await self.node_reflector.synced.wait()  # and the nodes' devices, which pods ask by their resources
        await self.executor.tenants.load()  # and the tenants' settings, from the log alone
        await self.executor.setup.refresh_all(
            {p["metadata"]["namespace"] for r in self.pods.runs.values() for p in r.pods.values()}
        )
        await self.consumer.start()
        await ride_out(
            lambda: self.consumer.poll_once(timeout_s=0.5),
            asyncio.Event(),  # never set: the connector's tasks are cancelled when it stops
            self.outage,
            start_over=_nothing,
            retry=_log_trouble,
        )

    async def _recall_nodes(self) -> None:
        """The nodes this cluster had by the log (its latest roster): the first list reports removed those
        deleted while no connector ran."""
        parts = await roster.last_roster(self.log, self.config.cluster)
        if parts is None:
            log.info("event=no_roster cluster=%s", self.config.cluster)
            return
        known = roster.roster_nodes(parts)
        self.nodes.remember(known, parts[0].as_of)
        log.info("event=roster_recalled cluster=%s nodes=%d as_of=%d", self.config.cluster, len(known), parts[0].as_of)

    async def run(self) -> None:
        """Run until cancelled (or fenced by another connector of the same cluster)."""
        await self.publisher.start()
        tasks: list[asyncio.Task[None]] = []
        try:
            await self.reporter.publish_one(*self.registered.stated())
            log.info("event=connector_started cluster=%s api=%s", self.config.cluster, self.api.host)
            await self._recall_nodes()
            parts: list[Coroutine[Any, Any, None]] = [
                self.reachability.run(),
                self.node_reflector.run(self.nodes),
                self.nodes.run_roster(),
                self.pod_reflector.run(self.pods),
                self.pods.run_timer(),
                self._consume(),
            ]
            if self.usage is not None:
                parts.append(self.usage.run())
            tasks = [asyncio.create_task(part) for part in parts]
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # raises what ended it
        finally:
            await cancel_and_wait(tasks)
            await self.consumer.close()
            await self.reporter.close()
            await self.publisher.close()
            log.info("event=connector_stopped cluster=%s", self.config.cluster)


async def _nothing() -> None:
    """Nothing to start over: the consumer keeps its place in the group, and its sink drops a producer
    whose append failed."""


def _log_trouble(error: BaseException) -> bool:
    """The log away, or refusing for now; not a fence (another connector took this cluster over)."""
    return transient(error) or (isinstance(error, LogError) and not isinstance(error, ProducerFenced))
