"""A tenant namespace's limits as Kubernetes objects: a ResourceQuota and a LimitRange from the tenant's
fedsched quota.

Called by ``connectors.kubernetes.tenant_setup`` (which applies them when the executor makes a tenant's
namespace and again when the tenant's quota changes) and by unit tests. Pure: takes the tenant's quota
lines per queue (``connectors.kubernetes.tenants``) and returns manifests (plain dicts), the same for the
same inputs, so applying them again changes nothing.

What "the tenant's fedsched quota" caps, decided:

- Only the tenant-wide quota caps the namespace: the ``default`` queue's lines, which the scheduler
  applies to every job of the tenant (``services.scheduler.core.state``: queue ``default`` is the
  tenant's own quota, counted over all its queues). Another queue's lines bound only the jobs of that
  queue; a job of a queue with no quota is bounded by the tenant-wide lines alone, so a sum over the
  queues would refuse pods fedsched placed within its rules.
- The cap is the line's ``limit``, not its ``guaranteed`` amount: above its guarantee a tenant borrows
  (from its cohort's unused guarantees, or idle capacity) up to its limit, and the scheduler places such
  work; capping at the guarantee would refuse it. A line without a limit caps nothing.
- cpu (milli-CPU) -> ``requests.cpu``; memory (MiB) -> ``requests.memory``; gpu over every model
  (milli-GPU) -> ``requests.<gpu resource>`` in whole GPUs, rounded up (a pod asks whole GPUs). A line of
  one GPU model caps nothing here: the device plugin's resource does not tell models apart. NPUs are left
  to the accelerator mapping (their resource names depend on the model). Only requests are capped:
  fedsched's pods ask requests, and a ``limits.*`` cap would refuse every pod that sets no limit.

A tenant the log never gave a quota gets neither object (``TenantBook.has_quota``). The LimitRange (type
Container) gives a container that asks nothing (a sidecar, a pod made outside
fedsched) a default request (``ContainerDefaults``, at most the cap), so it counts against the
ResourceQuota; a ``max`` no container may exceed, the tenant's cap; and a default limit equal to that
max, which is what the API server would default it to: a smaller one would refuse fedsched's own
containers, which ask requests without limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.kubernetes import names
from events.catalog.types import QueueId, QuotaLine, ResourceKind, TenantId

Manifest = dict[str, Any]

QUOTA_NAME = "fedsched-quota"
LIMITS_NAME = "fedsched-limits"
TENANT_WIDE = QueueId("default")


@dataclass(frozen=True, slots=True)
class Caps:
    cpu_milli: int | None = None
    memory_mib: int | None = None
    gpus: int | None = None
    """Whole GPUs of every model."""
    npus: int | None = None
    """NPUs of every model."""


@dataclass(frozen=True, slots=True)
class ContainerDefaults:
    """The request a container that asks none gets in a tenant namespace."""

    cpu_milli: int = 100
    memory_mib: int = 256


def caps_of(quotas: Mapping[QueueId, tuple[QuotaLine, ...]]) -> Caps:
    """What the tenant-wide quota caps (see the module's docstring)."""
    cpu = memory = gpus = npus = None
    for line in quotas.get(TENANT_WIDE, ()):
        if line.limit is None:
            continue
        if line.resource is ResourceKind.CPU:
            cpu = line.limit
        elif line.resource is ResourceKind.MEMORY:
            memory = line.limit
        elif line.resource is ResourceKind.GPU and line.gpu_model is None:
            gpus = -(-line.limit // 1000)
        elif line.resource is ResourceKind.NPU and line.gpu_model is None:
            npus = line.limit
    return Caps(cpu, memory, gpus, npus)


def _meta(name: str, namespace: str, tenant: TenantId) -> Manifest:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE, names.LABEL_TENANT: names.label_value(tenant)},
        "annotations": {names.ANN_TENANT: tenant},
    }


def resource_quota(
    tenant: TenantId,
    namespace: str,
    caps: Caps,
    gpu_resources: Sequence[str],
    npu_resources: Sequence[str] = (),
) -> Manifest | None:
    """The namespace's ResourceQuota, or ``None`` when the tenant's quota caps nothing."""
    hard: dict[str, str] = {}
    if caps.cpu_milli is not None:
        hard["requests.cpu"] = f"{caps.cpu_milli}m"
    if caps.memory_mib is not None:
        hard["requests.memory"] = f"{caps.memory_mib}Mi"
    for resource in gpu_resources if caps.gpus is not None else ():
        hard[f"requests.{resource}"] = str(caps.gpus)
    for resource in npu_resources if caps.npus is not None else ():
        hard[f"requests.{resource}"] = str(caps.npus)
    if not hard:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(QUOTA_NAME, namespace, tenant),
        "spec": {"hard": hard},
    }


def limit_range(tenant: TenantId, namespace: str, caps: Caps, defaults: ContainerDefaults) -> Manifest:
    """The namespace's LimitRange: default requests always, a max and a default limit where capped."""
    cpu = defaults.cpu_milli if caps.cpu_milli is None else min(defaults.cpu_milli, caps.cpu_milli)
    memory = defaults.memory_mib if caps.memory_mib is None else min(defaults.memory_mib, caps.memory_mib)
    item: Manifest = {"type": "Container", "defaultRequest": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}}
    most: dict[str, str] = {}
    if caps.cpu_milli is not None:
        most["cpu"] = f"{caps.cpu_milli}m"
    if caps.memory_mib is not None:
        most["memory"] = f"{caps.memory_mib}Mi"
    if most:
        item["max"] = most
        item["default"] = dict(most)
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta(LIMITS_NAME, namespace, tenant),
        "spec": {"limits": [item]},
    }
