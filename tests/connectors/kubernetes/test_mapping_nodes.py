"""A Node's JSON becomes NodeObserved and GpuHealthReported: capacity, GPUs, topology, taints, health."""

from __future__ import annotations

import json

import pytest

from connectors.kubernetes import names, nodes, quantity
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, Health, TaintEffect
from events.wire.codec import decode, encode
from events.wire.envelope import Envelope

from .builders import NodeBuilder, a_node

CLUSTER = ClusterId("k8s-a")


def view(builder: NodeBuilder) -> nodes.NodeView:
    out = nodes.observe(builder.build(), CLUSTER)
    assert out is not None
    return out


@pytest.mark.parametrize(
    ("text", "cpu_milli", "mebibytes"),
    [("4", 4000, 0), ("3500m", 3500, 0), ("0.5", 500, 0), ("16Gi", 16 * 2**30 * 1000, 16384), ("1e3", 10**6, 0)],
)
def test_quantities_read_as_the_api_machinery_writes_them(text: str, cpu_milli: int, mebibytes: int) -> None:
    assert quantity.milli(text) == cpu_milli
    assert quantity.mebibytes(text) == mebibytes


def test_a_quantity_that_is_not_one_is_an_error() -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.milli("four cores")


def test_a_gpu_node_reports_its_allocatable_gpus_with_the_feature_discovery_model() -> None:
    v = view(a_node("gpu-node-1").gpus(8, "NVIDIA-H100-80GB-HBM3", 81559).cpu("111500m").at_version("4711"))
    seen = v.observed
    assert (seen.cluster, seen.node, seen.generation, seen.resource_version) == ("k8s-a", "gpu-node-1", 4711, "4711")
    assert (seen.cpu_milli, seen.memory_mib) == (111500, 512 * 1024)
    assert [g.index for g in seen.gpus] == list(range(8))
    assert {(g.model, g.memory_mib, g.health) for g in seen.gpus} == {("NVIDIA-H100-80GB-HBM3", 81559, Health.OK)}
    assert v.health is not None and [s.health for s in v.health.gpus] == [Health.OK] * 8
    assert seen.schedulable


def test_a_cpu_node_has_no_gpus_and_no_health_report() -> None:
    v = view(a_node("cpu-1"))
    assert v.observed.gpus == () and v.health is None


def test_time_sliced_products_keep_the_model_name_and_odd_characters_are_replaced() -> None:
    v = view(a_node("n").gpus(1, "Tesla V100 (SXM2)-SHARED"))
    assert v.observed.gpus[0].model == "Tesla-V100--SXM2"


def test_topology_comes_from_the_clique_label_or_our_own_labels() -> None:
    v = view(a_node("n").gpus(4).label(names.GFD_CLIQUE, "9F3A-UUID.1").label(names.LABEL_RDMA_FABRIC, "ib-east"))
    assert (v.observed.nvlink_domain, v.observed.rdma_fabric) == ("9f3a-uuid.1", "ib-east")
    v = view(a_node("n").label(names.LABEL_NVLINK_DOMAIN, "rack-7"))
    assert (v.observed.nvlink_domain, v.observed.rdma_fabric) == ("rack-7", None)


def test_taints_and_cordon_are_reported() -> None:
    v = view(a_node("n").taint("nvidia.com/gpu", "NoSchedule", "present").taint("bad", "Sometimes").cordoned())
    assert [(t.key, t.value, t.effect) for t in v.observed.taints] == [
        ("nvidia.com/gpu", "present", TaintEffect.NO_SCHEDULE)
    ]
    assert not v.observed.schedulable


def test_a_node_that_is_not_ready_is_unschedulable_and_its_gpus_failed() -> None:
    v = view(a_node("n").gpus(2).condition("Ready", "Unknown", "NodeStatusUnknown"))
    assert not v.observed.schedulable
    assert v.health is not None and {s.health for s in v.health.gpus} == {Health.FAILED}


def test_a_gpu_condition_degrades_every_card_and_the_annotation_names_single_cards() -> None:
    samples = [
        {"index": 1, "health": "failed", "xid_errors": 3, "last_xid": 79, "ecc_uncorrected": 2, "uuid": "GPU-1f"},
        {"index": 2, "health": "ok", "temperature_c": 71},
    ]
    builder = a_node("n").gpus(4).condition("Ready", "True").condition("GpuXidError", "True")
    v = view(builder.annotate(names.ANN_GPU_HEALTH, json.dumps(samples)))
    assert v.health is not None
    assert [s.health for s in v.health.gpus] == [Health.DEGRADED, Health.FAILED, Health.DEGRADED, Health.DEGRADED]
    card = v.health.gpus[1]
    assert (card.xid_errors, card.last_xid, card.ecc_uncorrected) == (3, 79, 2)
    assert v.health.gpus[2].temperature_c == 71
    assert v.observed.gpus[1].uuid == "GPU-1f" and v.observed.gpus[1].health is Health.FAILED
    assert v.problems == ()


def test_an_unreadable_health_annotation_is_named_and_skipped() -> None:
    v = view(a_node("n").gpus(2).annotate(names.ANN_GPU_HEALTH, '[{"index": 0, "health": "melted"}, {"x": 1}]'))
    assert v.health is not None and {s.health for s in v.health.gpus} == {Health.OK}
    assert len(v.problems) == 2
    v = view(a_node("n").gpus(2).annotate(names.ANN_GPU_HEALTH, "not json"))
    assert v.problems == ("annotation fedsched.io/gpu-health is not JSON",)


def test_the_node_wide_health_label_applies_to_every_card() -> None:
    v = view(a_node("n").gpus(2).label(names.LABEL_GPU_HEALTH, "degraded"))
    assert v.health is not None and {s.health for s in v.health.gpus} == {Health.DEGRADED}


def test_many_labels_keep_the_gpu_and_topology_ones_first() -> None:
    builder = a_node("n").gpus(1).label("topology.kubernetes.io/zone", "z1")
    for i in range(100):
        builder.label(f"example.com/l{i:03d}", "x")
    labels = view(builder).observed.labels
    assert len(labels) == nodes.MAX_LABELS
    assert labels[names.GFD_PRODUCT] == "NVIDIA-A100-SXM4-80GB" and labels["topology.kubernetes.io/zone"] == "z1"


def test_a_name_that_cannot_be_a_node_id_is_skipped_and_removal_has_the_deletion_version() -> None:
    assert nodes.observe(a_node("n" * 200).build(), CLUSTER) is None
    gone = nodes.removed(a_node("n1").at_version("99").build(), CLUSTER)
    assert gone is not None and (gone.generation, gone.reason) == (99, ReasonCode.NODE_DELETED)


def test_the_health_report_is_a_v3_one_of_gpus_only_and_reads_back_as_it_was_written() -> None:
    v = view(a_node("n").gpus(2).annotate(names.ANN_GPU_HEALTH, '[{"index": 1, "health": "failed", "xid_errors": 1}]'))
    assert v.health is not None and v.health.npus == ()  # NPU discovery is not this connector's yet
    record = encode(Envelope(id="k8s:n:health", source="urn:test", time_ms=1_800_000_000_000, data=v.health))
    assert dict(record.headers)["ce_schemaversion"] == b"3"
    back = decode(record.headers, record.value)
    assert back.data == v.health
