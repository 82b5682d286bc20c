"""The default simulated fleet's NPU pool: ``fedsched up`` and ``fedsched demo`` add a few 8-NPU nodes of
one model to the last cluster when the node list is the default one (never to a list of one's own unless
asked), and the cluster prices that NPU model as it prices its GPU models."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.sim import ClusterSpec, SimFleet, npu_pool
from connectors.sim.nodes import NPU_POOL_MODEL, NPU_POOL_NODES
from connectors.sim.spec import DEFAULT_GPU_RATES
from services.runtime.up import UpConfig, default_nodes, npu_pool_of


def test_the_default_fleet_has_an_npu_pool_in_its_last_cluster_and_a_node_list_of_ones_own_has_none() -> None:
    pool = npu_pool_of(UpConfig())
    assert list(pool) == ["sim-3"] and len(pool["sim-3"]) == NPU_POOL_NODES == 4
    assert {(n.npus, n.npu_model, n.gpus) for n in pool["sim-3"]} == {(8, NPU_POOL_MODEL, 0)}
    own = Path("nodes.yaml")
    assert npu_pool_of(UpConfig(sim_nodes=own)) == {}
    assert [n.name for n in npu_pool_of(UpConfig(sim_nodes=own, sim_npu_nodes=2))["sim-3"]] == [
        "npu-ascend-00",
        "npu-ascend-01",
    ]
    assert npu_pool_of(UpConfig(sim_npu_nodes=0)) == {} and npu_pool_of(UpConfig(sim_clusters=())) == {}
    with pytest.raises(ValueError, match="an NPU pool of -1 nodes"):
        npu_pool(-1)


def test_a_cluster_prices_the_npu_model_it_has() -> None:
    spec = ClusterSpec.build("sim-3", npu_pool(1))
    assert dict(spec.gpu_rates) == {NPU_POOL_MODEL: DEFAULT_GPU_RATES[NPU_POOL_MODEL]}
    registered = spec.registered()
    assert [(r.model, r.micro_per_gpu_hour) for r in registered.gpu_rates] == [(NPU_POOL_MODEL, 2_600_000)]


def test_the_pool_joins_the_named_cluster_of_the_default_node_list_and_no_other() -> None:
    fleet = SimFleet.from_node_list(None, default_nodes(), extra={"sim-3": npu_pool(2)})  # type: ignore[arg-type]
    npus = {c.spec.cluster: sum(n.npus for n in c.spec.nodes) for c in fleet.clusters}
    assert npus == {"sim-1": 0, "sim-2": 0, "sim-3": 16}
    with pytest.raises(ValueError, match="sim-9, which is not one of the clusters"):
        SimFleet.from_node_list(None, default_nodes(), extra={"sim-9": npu_pool(1)})  # type: ignore[arg-type]
