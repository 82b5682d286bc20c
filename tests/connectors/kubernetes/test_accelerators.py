"""AMD and Ascend nodes in a real API server reach the catalogue with their devices and prices, and an NPU
job's pods ask the Ascend device plugin's resource."""

from __future__ import annotations

import pytest

from events.catalog.inventory import ClusterRegistered, GpuHealthReported, NodeObserved
from events.catalog.types import Health
from events.log.publisher import Publisher

from .builders import a_job, a_node, a_placement
from .support import Kube, Obj, Running, Tap, config, delete_nodes, unique, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(120)]


async def test_amd_and_ascend_nodes_are_observed_priced_and_an_npu_job_asks_for_ascend910(
    kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running
) -> None:
    cluster = unique("accel")
    amd, npu, mixed = (f"{cluster}-{n}" for n in ("amd", "npu", "mixed"))
    try:
        await kube.node(a_node(amd).amd_gpus(8).build())
        await kube.node(a_node(npu).ascend_npus(8, "910B3").build())
        await kube.node(
            a_node(mixed)
            .gpus(2, "NVIDIA-H100-80GB-HBM3", 81559)
            .ascend_npus(4, "310P3", "huawei.com/Ascend310P")
            .build()
        )
        rates = (("AMD-Instinct-MI300X", 3_600_000),)
        await connectors.start(config(cluster, gpu_rates=rates, currency="EUR", datasets=("imagenet",)))

        seen_amd = (await tap.wait(NodeObserved, cluster=cluster, node=amd))[0]
        assert {(g.model, g.memory_mib) for g in seen_amd.gpus} == {("AMD-Instinct-MI300X", 196_608)}
        assert len(seen_amd.gpus) == 8 and seen_amd.npus == ()
        seen_npu = (await tap.wait(NodeObserved, cluster=cluster, node=npu))[0]
        assert [(n.index, n.model, n.memory_mib) for n in seen_npu.npus] == [
            (i, "Ascend910B3", 65_536) for i in range(8)
        ]
        seen_mixed = (await tap.wait(NodeObserved, cluster=cluster, node=mixed))[0]
        assert [g.model for g in seen_mixed.gpus] == ["NVIDIA-H100-80GB-HBM3"] * 2
        assert {n.model for n in seen_mixed.npus} == {"Ascend310P3"} and len(seen_mixed.npus) == 4
        health = (await tap.wait(GpuHealthReported, cluster=cluster, node=npu))[0]
        assert [s.health for s in health.npus] == [Health.OK] * 8

        # Registered at start with the configured rate, then restated with a price for every model found.
        first, *restated = await tap.wait(ClusterRegistered, 2, cluster=cluster)
        assert {r.model for r in first.gpu_rates} == {"AMD-Instinct-MI300X"} and first.datasets == ("imagenet",)
        prices = {r.model: r.micro_per_gpu_hour for r in restated[-1].gpu_rates}
        assert prices == {
            "AMD-Instinct-MI300X": 3_600_000,
            "Ascend310P3": 1_000_000,
            "Ascend910B3": 2_600_000,
            "NVIDIA-H100-80GB-HBM3": 1_000_000,
        }
        assert restated[-1].currency == "EUR"

        job = unique("npu-train")
        placed = a_placement(job, (npu, mixed), cluster=cluster, gpus_each=0, npus_each=2)
        await scheduler.publish([a_job(job, gpus=0), placed])

        async def both() -> list[Obj] | None:
            found = await kube.job_pods(cluster, job)
            return found if len(found) == 2 else None

        pods = await wait_until(both, 30, "the NPU job's pods")
        limits = [p["spec"]["containers"][0]["resources"]["limits"] for p in pods]
        assert limits == [{"huawei.com/Ascend910": "2"}, {"huawei.com/Ascend310P": "2"}]
        assert [p["spec"]["nodeName"] for p in pods] == [npu, mixed]
    finally:
        await delete_nodes(kube, (amd, npu, mixed))
