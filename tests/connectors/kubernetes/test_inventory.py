"""Nodes appear, change and disappear in a real API server, and the inventory events follow, once each."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from connectors.kubernetes import names
from connectors.kubernetes.node_watcher import NodeWatcher
from connectors.kubernetes.reflector import Reflector
from connectors.kubernetes.reporting import Reporter
from events.catalog.inventory import (
    ClusterKind,
    ClusterNodesListed,
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuHealthReported,
    NodeObserved,
    NodeRemoved,
)
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, Health
from events.log import EventLog
from events.log.publisher import Publisher, wall_clock_ms

from .builders import a_node
from .support import Kube, Running, Tap, config, delete_nodes, unique, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(120)]


async def test_nodes_appear_change_and_disappear_and_the_events_follow(
    kube: Kube, tap: Tap, connectors: Running
) -> None:
    cluster = unique("inv")
    gpu_a, gpu_b, cpu = (f"{cluster}-{n}" for n in ("gpu-a", "gpu-b", "cpu"))
    try:
        await kube.node(a_node(gpu_a).gpus(8, "NVIDIA-H100-80GB-HBM3").label(names.LABEL_RDMA_FABRIC, "ib-1").build())
        await kube.node(a_node(gpu_b).gpus(4).build())
        await kube.node(a_node(cpu).build())
        await connectors.start(config(cluster))

        registered = (await tap.wait(ClusterRegistered, cluster=cluster))[0]  # then restated with the GPUs' rates
        assert (registered.kind, registered.site, registered.region) == (
            ClusterKind.KUBERNETES,
            "test-site",
            "test-region",
        )
        await tap.wait(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.REACHABLE)
        for node in (gpu_a, gpu_b, cpu):
            await tap.wait(NodeObserved, cluster=cluster, node=node)
        (first_a,) = tap.events(NodeObserved, node=gpu_a)
        assert len(first_a.gpus) == 8 and first_a.gpus[0].model == "NVIDIA-H100-80GB-HBM3"
        assert first_a.rdma_fabric == "ib-1" and first_a.schedulable
        await tap.wait(GpuHealthReported, cluster=cluster, node=gpu_b)
        assert tap.events(GpuHealthReported, node=cpu) == []

        # A card fails (the health agent annotates the node) and an operator cordons it.
        health = json.dumps([{"index": 3, "health": "failed", "xid_errors": 1, "last_xid": 79}])
        await kube.patch_node(gpu_a, {"metadata": {"annotations": {names.ANN_GPU_HEALTH: health}}})
        await kube.patch_node(gpu_a, {"spec": {"unschedulable": True}})
        (cordoned,) = await tap.wait(NodeObserved, node=gpu_a, schedulable=False)
        assert cordoned.generation > first_a.generation and cordoned.gpus[3].health is Health.FAILED
        (*_, report) = await tap.wait(GpuHealthReported, 2, node=gpu_a)
        assert [s.health for s in report.gpus].count(Health.FAILED) == 1 and report.gpus[3].last_xid == 79

        # The kubelet's status update: fewer allocatable GPUs.
        await kube.patch_node(gpu_b, {"status": {"allocatable": {names.GPU_RESOURCE: "3"}}}, status=True)
        await tap.until(lambda: [n for n in tap.events(NodeObserved, node=gpu_b) if len(n.gpus) == 3], 30, "3 GPUs")

        await kube.delete_node(cpu)
        (removed,) = await tap.wait(NodeRemoved, cluster=cluster, node=cpu)
        assert removed.reason is ReasonCode.NODE_DELETED
        assert removed.generation > tap.events(NodeObserved, node=cpu)[-1].generation
    finally:
        await delete_nodes(kube, (gpu_a, gpu_b, cpu))

    # Each snapshot once: ids derive from node and version, and none repeats.
    ids = Counter(e.id for e in tap.seen if getattr(e.data, "cluster", None) == cluster)
    assert [i for i, n in ids.items() if n > 1] == []


async def test_a_restarted_connector_restates_its_nodes_with_the_same_versions_and_ids(
    kube: Kube, tap: Tap, connectors: Running
) -> None:
    cluster = unique("restate")
    node = f"{cluster}-n"
    try:
        await kube.node(a_node(node).gpus(2).build())
        first = await connectors.start(config(cluster))
        await tap.wait(NodeObserved, node=node)
        await connectors.stop(first)
        await connectors.start(config(cluster))
        await tap.wait(ClusterRegistered, 2, cluster=cluster)
        once, again = await tap.wait(NodeObserved, 2, node=node)
        assert once == again  # the same snapshot: same generation (resourceVersion), same content
        ids = [e.id for e in tap.envelopes(NodeObserved, node=node)]
        assert ids[0] == ids[1]  # a recognisable duplicate
    finally:
        await delete_nodes(kube, (node,))


async def test_a_node_deleted_while_no_connector_ran_is_reported_removed_by_the_next_one(
    kube: Kube, tap: Tap, connectors: Running
) -> None:
    """The new connector knows nothing of the node in memory: the roster its predecessor left in the log
    names it, and the API server no longer has it."""
    cluster = unique("away")
    keep, lose = f"{cluster}-keep", f"{cluster}-lose"
    try:
        await kube.node(a_node(keep).gpus(1).build())
        await kube.node(a_node(lose).gpus(1).build())
        first = await connectors.start(config(cluster))
        await tap.wait(NodeObserved, node=lose)
        (roster,) = await tap.wait(ClusterNodesListed, cluster=cluster)
        assert roster.nodes == (keep, lose) and (roster.part, roster.parts) == (1, 1)
        await connectors.stop(first)
        await kube.delete_node(lose)
        await connectors.start(config(cluster))
        (removed,) = await tap.wait(NodeRemoved, node=lose)
        assert removed.reason == ReasonCode.NODE_DELETED
        assert removed.generation > tap.events(NodeObserved, node=lose)[-1].generation
        assert tap.events(NodeRemoved, node=keep) == []
        # The new roster names what is left, so a third start removes nothing more.
        await tap.until(lambda: tap.events(ClusterNodesListed, cluster=cluster)[-1].nodes == (keep,), what="roster")
    finally:
        await delete_nodes(kube, (keep,))


@pytest.mark.slow
async def test_a_watch_resumed_after_an_api_server_restart_relists_and_reports_what_it_missed(
    kube: Kube, tap: Tap, event_log: EventLog
) -> None:
    """A restarted API server's watch cache starts at the current version: resuming from an older one
    gets a real 410 Gone. The reflector lists again, and the diff finds the node deleted meanwhile."""
    cluster = unique("gone")
    keep, lose = f"{cluster}-keep", f"{cluster}-lose"
    publisher = Publisher(event_log, "urn:test", transactional_id=f"test-{cluster}")
    await publisher.start()
    reporter = Reporter(publisher)
    watcher = NodeWatcher(ClusterId(cluster), reporter, clock_ms=wall_clock_ms)
    reflector = Reflector(kube.api, "/api/v1/nodes", name="nodes")
    try:
        await kube.node(a_node(keep).build())
        await kube.node(a_node(lose).build())
        task = asyncio.create_task(reflector.run(watcher))
        await tap.wait(NodeObserved, node=lose)
        await wait_until(lambda: reflector.stats.watches, 30, "the watch after the list")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # While no watch is open, the node goes and the API server restarts.
        await kube.delete_node(lose)
        await kube.restart()
        task = asyncio.create_task(reflector.run(watcher))
        (removed,) = await tap.wait(NodeRemoved, node=lose)
        task.cancel()
        assert reflector.stats.relists_gone == 1 and reflector.stats.lists == 2
        assert len(tap.events(NodeObserved, node=keep)) == 1  # unchanged: not published again
        assert removed.generation > tap.events(NodeObserved, node=lose)[0].generation
    finally:
        await reporter.close()
        await publisher.close()
        await kube.start()
        await delete_nodes(kube, (keep, lose))
