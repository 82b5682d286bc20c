"""A Kubernetes Node object as fedsched inventory: ``NodeObserved``, ``GpuHealthReported``, ``NodeRemoved``.

Called by ``node_watcher`` for every node it lists or watches, and by unit tests with plain dicts. Pure:
the node is the JSON the API server returns, nothing is fetched.

- Capacity: ``status.allocatable`` (``cpu``, ``memory``, and each device plugin's resource: usable cards
  only, a plugin withdraws failed ones). GPUs (NVIDIA's, then AMD's) and Ascend NPUs, with their models
  and memory from their vendors' feature discovery labels, are read by ``accelerators``. The NVLink
  domain from ``nvidia.com/gpu.clique`` or ``fedsched.io/nvlink-domain``; the RDMA fabric from
  ``fedsched.io/rdma-fabric``.
- ``generation`` is the node's ``resourceVersion`` (etcd's revision: it only grows, across connector
  restarts too), so a consumer can drop stale snapshots without any connector-side counter.
- Schedulable: not cordoned (``spec.unschedulable``) and not ``Ready=False|Unknown``.
- GPU health, per card, is the worst of: the node-wide label ``fedsched.io/gpu-health``; node conditions
  (``Ready`` not ``True``: failed; any condition whose type starts with ``Gpu``/``GPU`` and is ``True``:
  degraded); the per-card annotation ``fedsched.io/gpu-health`` (JSON list of objects with ``index``,
  ``health``, ``xid_errors``, ``last_xid``, ``ecc_corrected``, ``ecc_uncorrected``, ``temperature_c``,
  ``uuid``). NPU health the same way from ``fedsched.io/npu-health`` (label and annotation: ``index``,
  ``health``, ``errors``, ``last_error_code``, ``hbm_ecc_uncorrected``, ``temperature_c``) and conditions
  whose type starts with ``Npu``/``NPU``; both go out in one ``GpuHealthReported``. Unreadable entries are
  skipped and named in ``NodeView.problems``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from connectors.kubernetes import accelerators, names, quantity
from events.catalog.inventory import (
    GpuDevice,
    GpuHealthReported,
    GpuHealthSample,
    NodeObserved,
    NodeRemoved,
    NpuDevice,
    NpuHealthSample,
    Taint,
)
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, Health, NodeId, TaintEffect

Obj = Mapping[str, Any]

MAX_LABELS = 64
MAX_GPUS = 64
#: Node labels kept first when a node has more than ``MAX_LABELS``.
LABEL_PREFERENCE = (
    "nvidia.com/",
    "amd.com/",
    "huawei.com/",
    "accelerator",
    "topology.kubernetes.io/",
    "node.kubernetes.io/",
    "kubernetes.io/",
    "fedsched.io/",
)
_SEVERITY = {Health.OK: 0, Health.DEGRADED: 1, Health.FAILED: 2}
_EFFECTS = {effect.value: effect for effect in TaintEffect}


@dataclass(frozen=True, slots=True)
class NodeView:
    observed: NodeObserved
    health: GpuHealthReported | None
    """``None`` when the node has no GPUs and no NPUs."""
    problems: tuple[str, ...] = ()
    devices: accelerators.NodeDevices = field(default_factory=accelerators.NodeDevices)
    """The resources its pods ask each GPU and NPU index by (``pods``)."""


def _meta(node: Obj) -> Obj:
    meta = node.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _status(node: Obj) -> Obj:
    status = node.get("status")
    return status if isinstance(status, Mapping) else {}


def node_id(node: Obj) -> NodeId | None:
    """The node's name as a fedsched node id, or None when it cannot be one (longer than 128)."""
    name = str(_meta(node).get("name", ""))
    return NodeId(name) if names.is_id(name) else None


def resource_version(node: Obj) -> str:
    return str(_meta(node).get("resourceVersion", ""))


def generation(node: Obj) -> int:
    version = resource_version(node)
    return int(version) if version.isdigit() else 0


def _worst(*healths: Health) -> Health:
    return max(healths, key=lambda h: _SEVERITY[h])


def _conditions(node: Obj) -> dict[str, str]:
    out: dict[str, str] = {}
    for condition in _status(node).get("conditions") or ():
        if isinstance(condition, Mapping) and isinstance(condition.get("type"), str):
            out[condition["type"]] = str(condition.get("status", "Unknown"))
    return out


def _ready(conditions: Mapping[str, str]) -> bool:
    """No ``Ready`` condition at all (a node no kubelet has reported on yet) counts as ready."""
    return conditions.get("Ready", "True") == "True"


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """Where a node says how one kind of its devices is: a label for the whole node, conditions whose type
    starts with ``condition`` (any case), and an annotation of per-card samples."""

    noun: str
    label: str
    annotation: str
    condition: str


GPU_HEALTH = DeviceHealth("GPU", names.LABEL_GPU_HEALTH, names.ANN_GPU_HEALTH, "gpu")
NPU_HEALTH = DeviceHealth("NPU", names.LABEL_NPU_HEALTH, names.ANN_NPU_HEALTH, "npu")


def node_health(node: Obj, kind: DeviceHealth = GPU_HEALTH) -> Health:
    """Health that applies to every device of the kind on the node: node-wide label and conditions."""
    labels = _meta(node).get("labels") or {}
    health = Health.OK
    label = str(labels.get(kind.label, "")).lower()
    if label in _SEVERITY:
        health = Health(label)
    conditions = _conditions(node)
    if not _ready(conditions):
        health = Health.FAILED
    for condition, status in conditions.items():
        if condition[: len(kind.condition)].lower() == kind.condition and status == "True":
            health = _worst(health, Health.DEGRADED)
    return health


def _card_entries(node: Obj, problems: list[str], kind: DeviceHealth = GPU_HEALTH) -> dict[int, Obj]:
    text = (_meta(node).get("annotations") or {}).get(kind.annotation)
    if not text:
        return {}
    try:
        entries = json.loads(text)
    except ValueError:
        problems.append(f"annotation {kind.annotation} is not JSON")
        return {}
    if not isinstance(entries, list):
        problems.append(f"annotation {kind.annotation} is not a list")
        return {}
    out: dict[int, Obj] = {}
    for entry in entries:
        index = entry.get("index") if isinstance(entry, Mapping) else None
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < MAX_GPUS:
            out[index] = entry
        else:
            problems.append(f"annotation {kind.annotation}: entry without a valid index skipped")
    return out


def _sample(index: int, base: Health, entry: Obj | None, problems: list[str]) -> GpuHealthSample:
    plain = GpuHealthSample(index=index, health=base, xid_errors=0)
    if entry is None:
        return plain
    try:
        health = _worst(base, Health(str(entry.get("health", "ok")).lower()))
        return GpuHealthSample(
            index=index,
            health=health,
            xid_errors=entry.get("xid_errors", 0),
            last_xid=entry.get("last_xid"),
            ecc_corrected=entry.get("ecc_corrected"),
            ecc_uncorrected=entry.get("ecc_uncorrected"),
            temperature_c=entry.get("temperature_c"),
        )
    except (ValueError, ValidationError):
        problems.append(f"annotation {names.ANN_GPU_HEALTH}: entry for GPU {index} is not readable")
        return plain


def _npu_sample(index: int, base: Health, entry: Obj | None, problems: list[str]) -> NpuHealthSample:
    plain = NpuHealthSample(index=index, health=base, errors=0)
    if entry is None:
        return plain
    try:
        health = _worst(base, Health(str(entry.get("health", "ok")).lower()))
        return NpuHealthSample(
            index=index,
            health=health,
            errors=entry.get("errors", 0),
            last_error_code=entry.get("last_error_code"),
            hbm_ecc_uncorrected=entry.get("hbm_ecc_uncorrected"),
            temperature_c=entry.get("temperature_c"),
        )
    except (ValueError, ValidationError):
        problems.append(f"annotation {names.ANN_NPU_HEALTH}: entry for NPU {index} is not readable")
        return plain


def gpu_samples(node: Obj, gpus: int, problems: list[str]) -> tuple[GpuHealthSample, ...]:
    base = node_health(node)
    entries = _card_entries(node, problems)
    return tuple(_sample(i, base, entries.get(i), problems) for i in range(gpus))


def npu_samples(node: Obj, npus: int, problems: list[str]) -> tuple[NpuHealthSample, ...]:
    base = node_health(node, NPU_HEALTH)
    entries = _card_entries(node, problems, NPU_HEALTH)
    return tuple(_npu_sample(i, base, entries.get(i), problems) for i in range(npus))


def _devices(
    node: Obj, cards: Sequence[accelerators.Card], samples: Sequence[GpuHealthSample], problems: list[str]
) -> tuple[GpuDevice, ...]:
    entries = _card_entries(node, [])
    devices = []
    for card, sample in zip(cards, samples, strict=True):
        uuid = (entries.get(sample.index) or {}).get("uuid")
        try:
            device = GpuDevice(
                index=sample.index, model=card.model, memory_mib=card.memory_mib, health=sample.health, uuid=uuid
            )
        except ValidationError:
            problems.append(f"annotation {names.ANN_GPU_HEALTH}: uuid of GPU {sample.index} is not readable")
            device = GpuDevice(index=sample.index, model=card.model, memory_mib=card.memory_mib, health=sample.health)
        devices.append(device)
    return tuple(devices)


def _npu_devices(cards: Sequence[accelerators.Card], samples: Sequence[NpuHealthSample]) -> tuple[NpuDevice, ...]:
    return tuple(
        NpuDevice(index=sample.index, model=card.model, memory_mib=card.memory_mib, health=sample.health)
        for card, sample in zip(cards, samples, strict=True)
    )


def _taints(node: Obj) -> tuple[Taint, ...]:
    seen: set[tuple[str, str]] = set()
    out: list[Taint] = []
    for taint in (node.get("spec") or {}).get("taints") or ():
        key, effect = str(taint.get("key", "")), str(taint.get("effect", ""))
        if effect not in _EFFECTS or (key, effect) in seen or len(out) >= 64:
            continue
        try:
            out.append(Taint(key=key, value=str(taint.get("value") or ""), effect=_EFFECTS[effect]))
            seen.add((key, effect))
        except ValidationError:
            continue
    return tuple(out)


def _labels(labels: Obj) -> dict[str, str]:
    def rank(key: str) -> tuple[int, str]:
        for i, prefix in enumerate(LABEL_PREFERENCE):
            if key.startswith(prefix):
                return (i, key)
        return (len(LABEL_PREFERENCE), key)

    kept = sorted((k for k, v in labels.items() if len(str(v)) <= 256 and len(k) <= 253), key=rank)
    return {k: str(labels[k]) for k in kept[:MAX_LABELS]}


def _domain(labels: Obj, *keys: str) -> str | None:
    for key in keys:
        if labels.get(key):
            return names.to_id(str(labels[key]))
    return None


def observe(node: Obj, cluster: ClusterId) -> NodeView | None:
    """The node's whole state as events, or None when its name cannot be a node id."""
    ident = node_id(node)
    if ident is None:
        return None
    meta, labels = _meta(node), _meta(node).get("labels") or {}
    allocatable = _status(node).get("allocatable") or {}
    problems: list[str] = []
    cards = accelerators.cards(labels, allocatable)
    samples = gpu_samples(node, len(cards.gpus), problems)
    npus = npu_samples(node, len(cards.npus), problems)
    try:
        cpu, memory = quantity.milli(allocatable.get("cpu", 0)), quantity.mebibytes(allocatable.get("memory", 0))
    except quantity.QuantityError as error:
        problems.append(str(error))
        cpu, memory = 0, 0
    observed = NodeObserved(
        cluster=cluster,
        node=ident,
        generation=generation(node),
        resource_version=str(meta.get("resourceVersion", ""))[:128] or None,
        cpu_milli=cpu,
        memory_mib=memory,
        gpus=_devices(node, cards.gpus, samples, problems),
        npus=_npu_devices(cards.npus, npus),
        nvlink_domain=_domain(labels, names.GFD_CLIQUE, names.LABEL_NVLINK_DOMAIN),
        rdma_fabric=_domain(labels, names.LABEL_RDMA_FABRIC),
        labels=_labels(labels),
        taints=_taints(node),
        schedulable=not (node.get("spec") or {}).get("unschedulable", False) and _ready(_conditions(node)),
    )
    health = GpuHealthReported(cluster=cluster, node=ident, gpus=samples, npus=npus) if samples or npus else None
    return NodeView(observed, health, tuple(problems), cards.devices())


def removed(node: Obj, cluster: ClusterId) -> NodeRemoved | None:
    ident = node_id(node)
    if ident is None:
        return None
    return NodeRemoved(
        cluster=cluster,
        node=ident,
        generation=generation(node),
        reason=ReasonCode.NODE_DELETED,
        message="the Node object was deleted from the API server",
    )
