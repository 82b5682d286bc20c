"""``fedsched resources``: the default view shows NPUs per cluster x NPU model under the GPU table, and
``--clusters`` each cluster's NPUs, not only ``--nodes``."""

from __future__ import annotations

import argparse
import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from services.api.pb import resources_pb2
from services.cli.people_cmd import show_resources

NPUS = resources_pb2.NpuCapacity(
    cluster="sim-3", npu_model="Ascend910B", nodes=2, total=16, healthy=14, degraded=1, failed=2, free=6
)


class OneAnswer:
    def __init__(self, answer: Any) -> None:
        self.resources = SimpleNamespace(GetCapacity=object(), ListClusters=object())
        self._answer = answer

    async def call(self, method: Any, request: Any) -> Any:
        return self._answer


def show(answer: Any, *, clusters: bool = False) -> None:
    args = argparse.Namespace(cluster="", json=False, clusters=clusters, nodes=False)
    assert asyncio.run(show_resources(args, OneAnswer(answer))) == 0  # type: ignore[arg-type]


def test_the_default_view_has_a_table_of_npus_per_cluster_and_model(capsys: pytest.CaptureFixture[str]) -> None:
    gpu = resources_pb2.ClusterModelCapacity(cluster="sim-1", gpu_model="A100", total_milli=8000, nodes=1)
    show(resources_pb2.Capacity(clusters=[gpu], npus=[NPUS]))
    out = capsys.readouterr().out.splitlines()
    header = out.index(next(line for line in out if line.startswith("CLUSTER") and "NPU MODEL" in line))
    assert out[header].split() == [
        "CLUSTER", "NPU", "MODEL", "NODES", "TOTAL", "HEALTHY", "DEGRADED", "FAILED", "FREE", "PENDING"
    ]  # fmt: skip
    assert out[header + 1].split() == ["sim-3", "Ascend910B", "2", "16", "14", "1", "2", "6"]
    assert out[header + 2].split() == ["ALL", "Ascend910B", "16", "14", "1", "2", "6", "0"]


def test_a_fleet_without_npus_shows_no_npu_table(capsys: pytest.CaptureFixture[str]) -> None:
    show(resources_pb2.Capacity(clusters=[resources_pb2.ClusterModelCapacity(cluster="sim-1", gpu_model="A100")]))
    assert "NPU" not in capsys.readouterr().out


def test_the_cluster_list_shows_each_clusters_npus(capsys: pytest.CaptureFixture[str]) -> None:
    clusters = [resources_pb2.Cluster(cluster="sim-3", status="reachable", nodes=2, npus=[NPUS])]
    show(resources_pb2.ListClustersResponse(clusters=clusters), clusters=True)
    out = capsys.readouterr().out.splitlines()
    assert "NPUS FREE/HEALTHY/TOTAL" in out[0] and out[1].split()[-2:] == ["6/14/16", "Ascend910B"]


def test_the_node_list_says_how_many_of_a_nodes_npus_failed_or_are_degraded(capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [
        resources_pb2.Node(cluster="sim-3", node="npu-a", present=True, schedulable=True, npus=8,
                           npu_model="Ascend910B", npus_free=5, npus_healthy=7, npus_degraded=1),
        resources_pb2.Node(cluster="sim-3", node="npu-b", present=True, schedulable=True, npus=8,
                           npu_model="Ascend910B", npus_free=8, npus_healthy=8),
    ]  # fmt: skip

    class Pages(OneAnswer):
        async def call(self, method: Any, request: Any) -> Any:
            return resources_pb2.ListNodesResponse(nodes=nodes)

    args = argparse.Namespace(cluster="", json=False, clusters=False, nodes=True, limit=100)
    client = Pages(None)
    client.resources = SimpleNamespace(ListNodes=object())
    assert asyncio.run(show_resources(args, client)) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "5/8 Ascend910B, 1 failed, 1 degraded" in out
    assert "8/8 Ascend910B" in out and "8/8 Ascend910B," not in out  # nothing to say of a healthy node


def test_a_hot_npu_model_is_marked_beside_its_pending_demand_as_a_hot_gpu_model_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    hot = resources_pb2.NpuCapacity(
        cluster="sim-3", npu_model="Ascend910B", nodes=2, total=16, healthy=16, free=1, hot=True, pending=12
    )
    show(resources_pb2.Capacity(npus=[hot]))
    out = capsys.readouterr().out.splitlines()
    assert next(line for line in out if line.startswith("ALL")).split() == [
        "ALL",
        "Ascend910B",
        "16",
        "16",
        "0",
        "0",
        "1",
        "12",
        "(hot)",
    ]


def test_an_npu_model_is_hot_across_the_federation_by_the_share_of_its_healthy_npus_allocated() -> None:
    from projections.readmodel.rows.typed import NpuCapacity
    from services.api.convert import capacity, hot_npu_models

    def rows(unheld_east: int) -> list[NpuCapacity]:
        return [
            NpuCapacity("east", "Ascend910B", 2, 16, 16, 0, 0, unheld_east, unheld_east),  # type: ignore[arg-type]
            NpuCapacity("west", "Ascend910B", 1, 8, 8, 0, 0, 0, 0),  # type: ignore[arg-type]
            NpuCapacity("west", "Ascend310P", 1, 8, 6, 0, 2, 6, 6),  # type: ignore[arg-type]
        ]

    # 23 of 24 Ascend910B held (958 per mille) is hot; 20 of 24 (833) is not; the 310P's idle NPUs are not.
    assert hot_npu_models(rows(1)) == {"Ascend910B"} and hot_npu_models(rows(4)) == frozenset()
    # Asked of one cluster, the model is judged across the federation all the same.
    answer = capacity([], [], [r for r in rows(1) if r.cluster == "east"], rows(1))
    assert [(n.cluster, n.hot) for n in answer.npus] == [("east", True)]


def test_pending_npu_demand_and_congestion_per_model_count_what_could_run_there() -> None:
    from projections.readmodel.rows.typed import NpuCapacity, PendingNpus
    from services.api.convert import npu_demand

    rows = [
        NpuCapacity("east", "Ascend910B", 2, 16, 16, 0, 0, 4, 4),  # type: ignore[arg-type]
        NpuCapacity("west", "Ascend310P", 1, 8, 8, 0, 0, 8, 8),  # type: ignore[arg-type]
    ]
    pending = [
        PendingNpus(("Ascend910B",), 8, 2),  # two jobs of 8 NPUs of the 910B
        PendingNpus((), 2, 1),  # any model: counts for each
        PendingNpus(("Ascend310P",), 64, 1),  # more 310P than the fleet has: counts for none
        PendingNpus(("Ascend610",), 1, 1),  # a model the fleet does not have
    ]
    assert npu_demand(rows, pending) == {"Ascend310P": (2, 250), "Ascend910B": (18, 4500)}
