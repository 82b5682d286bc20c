"""Node lists: the openb and spot-GPU trace CSVs, YAML, slicing and splitting, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.sim import ClusterSpec, NodeListError, load_nodes, parse_split
from connectors.sim.nodes import default_nodes_path
from events.catalog.types import TaintEffect

from .builders import FIXTURES

pytestmark = pytest.mark.timeout(30)

OPENB = FIXTURES / "sim_openb_nodes.csv"


def test_an_openb_slice_keeps_every_node_with_its_gpus_and_their_memory() -> None:
    nodes = load_nodes(OPENB).nodes
    assert len(nodes) == 24
    first = nodes[0]
    assert (first.name, first.cpu_milli, first.memory_mib, first.gpus, first.gpu_model) == (
        "openb-node-0000", 64_000, 262_144, 2, "P100"
    )  # fmt: skip
    assert first.gpu_memory_mib == 16_280 and first.rdma_fabric is None
    assert dict(first.labels)["nvidia.com/gpu.product"] == "P100"
    g2 = next(n for n in nodes if n.gpu_model == "G2")
    assert (g2.gpus, g2.gpu_memory_mib, g2.rdma_fabric) == (8, 0, "ib-g2")


def test_split_deals_nodes_round_robin_and_slice_keeps_the_first() -> None:
    names = [n.name for n in load_nodes(OPENB).nodes]
    assert [n.name for n in load_nodes(OPENB, split=(3, 1)).nodes] == names[1::3]
    assert [n.name for n in load_nodes(OPENB, slice_=5).nodes] == names[:5]
    together = sorted(n.name for i in range(3) for n in load_nodes(OPENB, split=(3, i)).nodes)
    assert together == sorted(names)


def test_the_spot_trace_gets_named_nodes_and_memory_per_core() -> None:
    nodes = load_nodes(FIXTURES / "sim_spot_nodes.csv").nodes
    assert [n.name for n in nodes][:2] == ["spot-node-0000", "spot-node-0001"]
    a100 = nodes[3]
    assert (a100.gpu_model, a100.gpus, a100.cpu_milli, a100.memory_mib) == ("A100-SXM4-80GB", 8, 128_000, 1_048_576)
    assert a100.gpu_memory_mib == 81_251


def test_a_yaml_node_list_expands_counts_and_carries_cluster_defaults() -> None:
    listing = load_nodes(FIXTURES / "sim_nodes.yaml")
    assert [n.name for n in listing.nodes] == ["a100-000", "a100-001", "t4-spot", "cpu-0"]
    spot = listing.nodes[2]
    assert spot.taints[0].effect is TaintEffect.NO_SCHEDULE and dict(spot.labels)["lifecycle"] == "spot"
    assert (listing.nodes[0].rdma_fabric, listing.nodes[0].nvlink_domain) == ("ib-lab", "rack-1")
    assert listing.nodes[3].gpus == 0
    spec = ClusterSpec.build("lab", listing.nodes, defaults=listing.cluster)
    registered = spec.registered()
    assert (registered.site, registered.region, registered.currency, registered.datasets) == (
        "lab", "eu-west", "EUR", ("imagenet",)
    )  # fmt: skip
    assert {r.model: r.micro_per_gpu_hour for r in registered.gpu_rates} == {"A100-SXM4-80GB": 3_000_000, "T4": 350_000}
    assert registered.labels["tier"] == "lab" and registered.labels["sim.fedsched.io/nodes"] == "4"


def test_flags_win_over_the_node_lists_defaults() -> None:
    listing = load_nodes(FIXTURES / "sim_nodes.yaml")
    spec = ClusterSpec.build("lab", listing.nodes, site="paris", currency="USD", defaults=listing.cluster)
    assert (spec.site, spec.region, spec.currency) == ("paris", "eu-west", "USD")


@pytest.mark.parametrize(
    ("content", "suffix", "words"),
    [
        ("a,b\n1,2\n", ".csv", "unknown CSV header"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn-1,lots,1,1,T4\n", ".csv", ":2: cpu_milli 'lots' is not a number"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn-1,1,1,1,T4\nn-1,1,1,1,T4\n", ".csv", "appears twice"),
        ("sn,cpu_milli,memory_mib,gpu,model\nnode 1,1,1,1,T4\n", ".csv", "is not a valid id"),
        ("nodes: [{name: a, gpus: 2}]\n", ".yaml", "2 GPUs but no model"),
        ("nodes: [{name: a, colour: red}]\n", ".yaml", "unknown keys ['colour']"),
        ("nodes: [{name: a, cpu_milli: -1}]\n", ".yaml", "cpu_milli must be a non-negative integer"),
        ("nodes: {}\n", ".yaml", "a 'nodes' list"),
    ],
    ids=["unknown header", "bad number", "duplicate", "bad id", "gpus without model", "unknown key",
         "negative", "no list"],
)  # fmt: skip
def test_a_bad_node_list_is_refused_naming_the_place_and_the_problem(
    tmp_path: Path, content: str, suffix: str, words: str
) -> None:
    path = tmp_path / f"nodes{suffix}"
    path.write_text(content)
    with pytest.raises(NodeListError, match=None) as caught:
        load_nodes(path)
    assert words in str(caught.value) and str(path) in str(caught.value)


def test_missing_files_empty_results_and_bad_splits_are_refused(tmp_path: Path) -> None:
    with pytest.raises(NodeListError, match="no such node list"):
        load_nodes(tmp_path / "absent.csv")
    with pytest.raises(NodeListError, match="no nodes left"):
        load_nodes(FIXTURES / "sim_spot_nodes.csv", split=(40, 39))
    for text in ("3", "3:3", "0:0", "a:b"):
        with pytest.raises(ValueError, match="split"):
            parse_split(text)
    assert parse_split(" 3:2 ") == (3, 2)


def test_the_traces_folder_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FEDSCHED_TRACES", str(tmp_path))
    assert default_nodes_path() == tmp_path / "alibaba-openb-2023" / "openb_node_list_gpu_node.csv"
    monkeypatch.delenv("FEDSCHED_TRACES")
    assert default_nodes_path().parts[-3:] == ("traces", "alibaba-openb-2023", "openb_node_list_gpu_node.csv")
