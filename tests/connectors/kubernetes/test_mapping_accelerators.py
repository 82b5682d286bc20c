"""AMD GPUs and Ascend NPUs, from the labels their plugins set, become cards; a replica asks them by name."""

from __future__ import annotations

import json

import pytest

from connectors.kubernetes import accelerators, names, nodes, pods
from connectors.kubernetes.accelerators import DeviceRequestError, NodeDevices, requests
from connectors.kubernetes.registration import Registration
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuRate
from events.catalog.types import ClusterId, Health

from .builders import NodeBuilder, a_job, a_node, a_placement

CLUSTER = ClusterId("k8s-a")


def view(builder: NodeBuilder) -> nodes.NodeView:
    out = nodes.observe(builder.build(), CLUSTER)
    assert out is not None
    return out


def test_an_amd_node_reports_the_labellers_product_and_vram() -> None:
    v = view(a_node("mi300").amd_gpus(8))
    assert [(g.index, g.model, g.memory_mib) for g in v.observed.gpus] == [
        (i, "AMD-Instinct-MI300X", 192 * 1024) for i in range(8)
    ]
    assert v.devices == NodeDevices(gpus=("amd.com/gpu",) * 8)
    assert v.health is not None and len(v.health.gpus) == 8 and v.health.npus == ()


@pytest.mark.parametrize(
    ("labels", "model", "memory"),
    [
        ({"amd.com/gpu.product-name": "Instinct_MI210", "amd.com/gpu.vram": "64G"}, "AMD-Instinct-MI210", 65536),
        ({"beta.amd.com/gpu.product-name": "AMD_Instinct_MI250X"}, "AMD-Instinct-MI250X", 131072),
        ({"amd.com/gpu.device-id": "74a5"}, "AMD-Instinct-MI325X", 262144),
        ({"beta.amd.com/gpu.device-id.74A1": "4"}, "AMD-Instinct-MI300X", 196608),
        ({"amd.com/gpu.product-name": "Radeon_PRO_W7900", "amd.com/gpu.vram": "48G"}, "AMD-Radeon-PRO-W7900", 49152),
        ({}, "AMD-unknown", 0),
    ],
    ids=["labeller", "beta form only", "device id", "counted device id", "other product", "no labeller"],
)
def test_amd_models_come_from_the_product_name_else_the_device_id(
    labels: dict[str, str], model: str, memory: int
) -> None:
    builder = a_node("amd")
    builder.allocatable["amd.com/gpu"] = "4"
    builder.labels.update(labels)
    assert {(g.model, g.memory_mib) for g in view(builder).observed.gpus} == {(model, memory)}


def test_an_amd_node_with_two_models_is_described_model_by_model_from_the_counted_labels() -> None:
    builder = a_node("amd-mixed")
    builder.allocatable["amd.com/gpu"] = "6"
    builder.labels.update(
        {
            "amd.com/gpu.product-name.AMD_Instinct_MI300X": "2",
            "amd.com/gpu.product-name.AMD_Instinct_MI210": "4",
            "amd.com/gpu.vram.192G": "2",
            "amd.com/gpu.vram.64G": "4",
        }
    )
    gpus = view(builder).observed.gpus
    assert [(g.model, g.memory_mib) for g in gpus] == [("AMD-Instinct-MI210", 65536)] * 4 + [
        ("AMD-Instinct-MI300X", 196608)
    ] * 2


@pytest.mark.parametrize(
    ("chip", "resource", "model", "memory"),
    [
        ("910B3", "huawei.com/Ascend910", "Ascend910B3", 65536),
        ("910B4", "huawei.com/Ascend910", "Ascend910B4", 32768),
        ("910ProB", "huawei.com/Ascend910", "Ascend910ProB", 32768),
        ("310P3", "huawei.com/Ascend310P", "Ascend310P3", 24576),
        ("310", "huawei.com/Ascend310", "Ascend310", 8192),
    ],
)
def test_ascend_npus_take_their_model_from_the_chip_label_and_memory_from_the_table(
    chip: str, resource: str, model: str, memory: int
) -> None:
    v = view(a_node("npu").ascend_npus(8, chip, resource))
    assert v.observed.gpus == ()
    assert [(n.index, n.model, n.memory_mib, n.health) for n in v.observed.npus] == [
        (i, model, memory, Health.OK) for i in range(8)
    ]
    assert v.devices.npus == (resource,) * 8
    assert v.health is not None and [s.health for s in v.health.npus] == [Health.OK] * 8 and v.health.gpus == ()


def test_without_a_chip_label_the_server_type_or_the_family_names_the_npus() -> None:
    builder = a_node("npu")
    builder.allocatable["huawei.com/Ascend910"] = "8"
    assert view(builder).observed.npus[0].model == "Ascend910"
    builder.label("accelerator-type", "module-910b-8")
    assert {n.model for n in view(builder).observed.npus} == {"Ascend910B"}


def test_npu_health_follows_the_node_and_its_own_annotation() -> None:
    samples = [{"index": 2, "health": "failed", "errors": 3, "last_error_code": 0x80E01801, "hbm_ecc_uncorrected": 1}]
    builder = a_node("npu").ascend_npus(4).annotate(names.ANN_NPU_HEALTH, json.dumps(samples))
    v = view(builder.condition("NpuHbmEccPending", "True"))
    assert v.health is not None
    assert [s.health for s in v.health.npus] == [Health.DEGRADED, Health.DEGRADED, Health.FAILED, Health.DEGRADED]
    assert (v.health.npus[2].errors, v.health.npus[2].last_error_code) == (3, 0x80E01801)
    assert v.observed.npus[2].health is Health.FAILED
    v = view(a_node("npu").ascend_npus(2).condition("Ready", "False"))
    assert v.health is not None and {s.health for s in v.health.npus} == {Health.FAILED}
    v = view(a_node("npu").ascend_npus(2).annotate(names.ANN_NPU_HEALTH, "[{}]"))
    assert v.problems == (f"annotation {names.ANN_NPU_HEALTH}: entry without a valid index skipped",)


def test_a_mixed_node_numbers_nvidia_then_amd_gpus_and_its_npus_apart() -> None:
    v = view(a_node("mixed").gpus(2, "NVIDIA-H100-80GB-HBM3", 81559).amd_gpus(2).ascend_npus(4))
    assert [g.model for g in v.observed.gpus] == ["NVIDIA-H100-80GB-HBM3"] * 2 + ["AMD-Instinct-MI300X"] * 2
    assert [g.index for g in v.observed.gpus] == [0, 1, 2, 3] and len(v.observed.npus) == 4
    assert v.devices == NodeDevices(("nvidia.com/gpu",) * 2 + ("amd.com/gpu",) * 2, ("huawei.com/Ascend910",) * 4)
    assert v.health is not None and (len(v.health.gpus), len(v.health.npus)) == (4, 4)
    labels = v.observed.labels
    assert labels["amd.com/gpu.product-name"] == "AMD_Instinct_MI300X" and labels["accelerator"] == "huawei-Ascend910"


MIXED = NodeDevices(("nvidia.com/gpu",) * 2 + ("amd.com/gpu",) * 2, ("huawei.com/Ascend910",) * 4)


@pytest.mark.parametrize(
    ("gpus", "milli", "npus", "wanted"),
    [
        ((0, 1), 1000, (), {"nvidia.com/gpu": "2"}),
        ((2, 3), 1000, (), {"amd.com/gpu": "2"}),
        ((1, 2), 1000, (), {"amd.com/gpu": "1", "nvidia.com/gpu": "1"}),
        ((0,), 500, (), {"nvidia.com/gpu.shared": "1"}),
        ((), 0, (0, 1), {"huawei.com/Ascend910": "2"}),
    ],
    ids=["nvidia", "amd", "across vendors", "nvidia share", "ascend"],
)
def test_a_replica_asks_each_device_by_its_nodes_resource(
    gpus: tuple[int, ...], milli: int, npus: tuple[int, ...], wanted: dict[str, str]
) -> None:
    assert requests("n", MIXED, gpus, milli, npus) == wanted


def test_devices_that_cannot_be_asked_are_refused_with_the_reason() -> None:
    with pytest.raises(DeviceRequestError, match="only NVIDIA GPUs can be shared"):
        requests("n", MIXED, (2,), 500, ())
    with pytest.raises(DeviceRequestError, match="node n has no NPU 4"):
        requests("n", MIXED, (), 0, (4,))
    with pytest.raises(DeviceRequestError, match="has not seen node n"):
        requests("n", None, (), 0, (0,))
    assert requests("n", None, (0,), 1000, ()) == {"nvidia.com/gpu": "1"}  # as before: an NVIDIA GPU


def test_a_pod_on_an_ascend_node_asks_for_its_npus_and_an_unknown_node_cannot_get_them() -> None:
    options = pods.RenderOptions(CLUSTER, devices={"npu-1": MIXED}.get)
    placed = a_placement("job-n", ("npu-1",), gpus_each=0, npus_each=2)
    (pod,) = pods.render_pods(placed, a_job("job-n", gpus=0), options)
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"huawei.com/Ascend910": "2"}
    assert container["resources"]["requests"]["huawei.com/Ascend910"] == "2"
    # The workload and the pod watcher (a failure's blame) read which NPUs the scheduler counted.
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["FEDSCHED_NPU_INDICES"] == "0,1" and env["FEDSCHED_GPU_INDICES"] == ""
    assert pod["metadata"]["annotations"]["fedsched.io/npu-indices"] == "0,1"
    with pytest.raises(pods.RenderError, match="has not seen node npu-1"):
        pods.render_pods(placed, a_job("job-n", gpus=0), pods.RenderOptions(CLUSTER))


def test_a_registration_is_restated_once_for_each_new_model_with_configured_rates_kept() -> None:
    base = ClusterRegistered(
        cluster=CLUSTER,
        kind=ClusterKind.KUBERNETES,
        site="s",
        region="r",
        currency="EUR",
        gpu_rates=(GpuRate(model="AMD-Instinct-MI300X", micro_per_gpu_hour=3_600_000),),
    )
    registration = Registration(base, lambda: 1_000)
    first, ident = registration.stated()
    assert first == base
    assert registration.restated(["AMD-Instinct-MI300X"]) == []  # configured: priced already
    ((again, again_id),) = registration.restated(["Ascend910B3", "NVIDIA-H100-80GB-HBM3", "Tesla-T4", "Ascend910B3"])
    assert isinstance(again, ClusterRegistered) and again_id != ident
    assert {r.model: r.micro_per_gpu_hour for r in again.gpu_rates} == {
        "AMD-Instinct-MI300X": 3_600_000,
        "Ascend910B3": 2_600_000,  # the Ascend910B family's default
        "NVIDIA-H100-80GB-HBM3": 1_000_000,  # no default price: 1.0 per device-hour
        "Tesla-T4": 350_000,  # GPU feature discovery's name of the table's T4
    }
    assert (again.site, again.currency) == ("s", "EUR")
    assert registration.restated(["Ascend910B3"]) == []


def test_every_vendor_resource_is_known_to_the_tables() -> None:
    assert set(accelerators.ASCEND_RESOURCES) == {
        "huawei.com/Ascend910",
        "huawei.com/Ascend310P",
        "huawei.com/Ascend310",
    }
    assert all(accelerators.amd_model(device_id=d).startswith("AMD-Instinct-MI") for d in accelerators.AMD_DEVICE_IDS)
