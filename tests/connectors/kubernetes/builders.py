"""Builders of Kubernetes objects (as the API server's JSON) and of the events the connector reads.

Called by the unit tests of the pure mappers and by the tests against the real API server, which
create the same nodes through the API. ``a_node("n1").gpus(8, "NVIDIA-A100-SXM4-80GB").build()``;
``a_pod(...)`` for the status a kubelet would write; ``a_job()`` and ``a_placement()`` for events.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from connectors.kubernetes import names
from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
from events.catalog.jobs import JobSubmitted, Toleration
from events.catalog.types import ClusterId, CycleId, JobId, NodeId, Resources, TenantId

Obj = dict[str, Any]


@dataclass
class NodeBuilder:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=lambda: {"cpu": "64", "memory": "512Gi", "pods": "110"})
    taints: list[Obj] = field(default_factory=list)
    conditions: list[Obj] = field(default_factory=list)
    unschedulable: bool = False
    resource_version: str | None = None

    def gpus(self, count: int, product: str = "NVIDIA-A100-SXM4-80GB", memory_mib: int = 81920) -> NodeBuilder:
        self.allocatable[names.GPU_RESOURCE] = str(count)
        self.labels.update({names.GFD_PRODUCT: product, names.GFD_MEMORY: str(memory_mib), names.GFD_COUNT: str(count)})
        return self

    def amd_gpus(self, count: int, product: str = "AMD_Instinct_MI300X", vram: str = "192G") -> NodeBuilder:
        """AMD GPUs as the ROCm device plugin and the AMD GPU node labeller show them (one model)."""
        self.allocatable["amd.com/gpu"] = str(count)
        for prefix in ("amd.com", "beta.amd.com"):
            self.labels.update({f"{prefix}/gpu.product-name": product, f"{prefix}/gpu.vram": vram})
        self.labels.update(
            {f"beta.amd.com/gpu.product-name.{product}": str(count), f"beta.amd.com/gpu.vram.{vram}": str(count)}
        )
        self.labels.update({"amd.com/gpu.family": "AI", "amd.com/gpu.device-id": "74a1"})
        return self

    def ascend_npus(self, count: int, chip: str = "910B3", resource: str = "huawei.com/Ascend910") -> NodeBuilder:
        """Ascend NPUs as MindCluster's Ascend device plugin shows them."""
        self.allocatable[resource] = str(count)
        family = resource.removeprefix("huawei.com/Ascend")
        self.labels.update({"accelerator": f"huawei-Ascend{family}", "node.kubernetes.io/npu.chip.name": chip})
        self.labels["workerselector"] = "dls-worker-node"
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self.labels[key] = value
        return self

    def annotate(self, key: str, value: str) -> NodeBuilder:
        self.annotations[key] = value
        return self

    def taint(self, key: str, effect: str = "NoSchedule", value: str = "") -> NodeBuilder:
        self.taints.append({"key": key, "value": value, "effect": effect})
        return self

    def condition(self, kind: str, status: str, reason: str = "") -> NodeBuilder:
        self.conditions.append({"type": kind, "status": status, "reason": reason})
        return self

    def cordoned(self) -> NodeBuilder:
        self.unschedulable = True
        return self

    def cpu(self, quantity: str) -> NodeBuilder:
        self.allocatable["cpu"] = quantity
        return self

    def at_version(self, version: str) -> NodeBuilder:
        self.resource_version = version
        return self

    def build(self) -> Obj:
        meta: Obj = {"name": self.name, "labels": dict(self.labels), "annotations": dict(self.annotations)}
        if self.resource_version:
            meta["resourceVersion"] = self.resource_version
        spec: Obj = {"taints": copy.deepcopy(self.taints)} if self.taints else {}
        if self.unschedulable:
            spec["unschedulable"] = True
        status: Obj = {"allocatable": dict(self.allocatable), "capacity": dict(self.allocatable)}
        if self.conditions:
            status["conditions"] = copy.deepcopy(self.conditions)
        return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec, "status": status}


def a_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def a_job(job_id: str = "job-1", *, tenant: str = "team-a", gpus: int = 1, **changes: Any) -> JobSubmitted:
    fields: dict[str, Any] = {
        "job_id": JobId(job_id),
        "name": f"{job_id} name",
        "tenant": TenantId(tenant),
        "resources": Resources(cpu_milli=4000, memory_mib=16384, gpus=gpus),
        "template": {"image": "registry.example/train:1", "command": ["python", "train.py"], "env": {"EPOCHS": "3"}},
    }
    fields.update(changes)
    return JobSubmitted(**fields)


def a_placement(
    job_id: str = "job-1",
    nodes: tuple[str, ...] = ("gpu-node-1",),
    *,
    cluster: str = "k8s-a",
    run: int = 1,
    gpus_each: int = 1,
    npus_each: int = 0,
) -> JobPlaced:
    replicas = tuple(
        ReplicaPlacement(
            replica=i,
            node=NodeId(node),
            gpu_indices=tuple(range(gpus_each)),
            gpu_milli_each=1000 if gpus_each else 0,
            npu_indices=tuple(range(npus_each)),
        )
        for i, node in enumerate(nodes)
    )
    return JobPlaced(
        job_id=JobId(job_id),
        cycle_id=CycleId("cycle-7"),
        cluster=ClusterId(cluster),
        run=run,
        replicas=replicas,
        chosen=CandidateScore(cluster=ClusterId(cluster), total=100),
        explanation="test placement",
    )


def tolerate(key: str, value: str | None = None) -> Toleration:
    return Toleration(key=key, value=value)


def container_status(name: str = "main", **state: Obj) -> Obj:
    return {"name": name, "state": state, "ready": "running" in state, "restartCount": 0}


def running() -> Obj:
    return {"running": {"startedAt": "2026-12-02T13:00:00Z"}}


def terminated(exit_code: int = 0, reason: str = "Completed", message: str = "") -> Obj:
    out: Obj = {"exitCode": exit_code, "reason": reason, "startedAt": "2026-12-02T13:00:00Z"}
    if message:
        out["message"] = message
    return {"terminated": out}


def waiting(reason: str, message: str = "") -> Obj:
    return {"waiting": {"reason": reason, "message": message}}


def pod_status(phase: str, *containers: Obj, reason: str | None = None, conditions: list[Obj] | None = None) -> Obj:
    """A pod status as the kubelet writes it."""
    status: Obj = {"phase": phase, "containerStatuses": list(containers)}
    if reason:
        status["reason"] = reason
    if conditions:
        status["conditions"] = conditions
    return status
