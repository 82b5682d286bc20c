"""AMD GPUs and Ascend NPUs of a Kubernetes cluster in the resource view (``fedsched resources``): the
Kubernetes connector's own mapping of Node objects, with the labels their plugins set, folded by the
projections and read over gRPC."""

from __future__ import annotations

import uuid

import pytest

from connectors.kubernetes import ConnectorConfig, nodes
from connectors.kubernetes.connector import registered
from connectors.kubernetes.registration import Registration
from events.catalog.base import Event
from events.catalog.types import ClusterId
from services.api.pb import resources_pb2
from tests.api.conftest import Stack
from tests.api.support import append
from tests.connectors.kubernetes.builders import a_node

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]


async def test_amd_and_ascend_nodes_show_their_devices_by_model(stack: Stack) -> None:
    cluster = ClusterId(f"k8s-accel-{uuid.uuid4().hex[:8]}")
    registration = Registration(registered(ConnectorConfig(cluster=cluster, currency="EUR")), lambda: 1)
    listed = [
        a_node("amd-1").amd_gpus(8).build(),
        a_node("npu-1").ascend_npus(8, "910B3").build(),
    ]
    events: list[Event] = [registration.stated()[0]]
    for node in listed:
        view = nodes.observe(node, cluster)
        assert view is not None
        events.append(view.observed)
    await append(stack.log, events)
    await stack.fold()
    client = stack.client(stack.keys.hs(roles=["viewer"]))

    capacity = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest(cluster=cluster))
    per_cluster = {(c.gpu_model, c.nodes, c.total_milli, c.free_milli) for c in capacity.clusters}
    assert per_cluster == {("AMD-Instinct-MI300X", 1, 8000, 8000)}
    assert [(n.npu_model, n.nodes, n.total, n.free) for n in capacity.npus] == [("Ascend910B3", 1, 8, 8)]
    listing = await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest(cluster=cluster))
    shown = {n.node: (n.gpu_model, n.gpu_capacity_milli, n.npus, n.npu_model) for n in listing.nodes}
    assert shown == {
        "amd-1": ("AMD-Instinct-MI300X", 8000, 0, ""),
        "npu-1": ("", 0, 8, "Ascend910B3"),
    }
