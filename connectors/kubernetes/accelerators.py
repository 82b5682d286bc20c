"""GPUs and NPUs of a Kubernetes Node, by vendor: which cards it has and the resource each is asked by.

Called by ``nodes`` (a Node's cards, for ``NodeObserved``) and by ``pods`` (the extended resources a
replica's device indices are asked by). Pure: reads the Node's labels and ``status.allocatable``.

Vendors, each with the device plugin's resource and the labels of its feature discovery:

- NVIDIA: ``nvidia.com/gpu`` (a share of a card: ``nvidia.com/gpu.shared``, time-slicing); model and
  memory from GPU feature discovery (``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory`` in MiB).
- AMD: ``amd.com/gpu`` (ROCm device plugin); model from the AMD GPU node labeller:
  ``amd.com/gpu.product-name`` (``AMD_Instinct_MI300X``), else ``amd.com/gpu.device-id`` (``74a1``),
  each also in the labeller's ``beta.amd.com/`` form; memory from ``amd.com/gpu.vram`` (``192G``), else
  the model's table entry. A node with cards of several models has the counted forms instead
  (``amd.com/gpu.product-name.AMD_Instinct_MI210: "4"``): its cards are described model by model.
  Models are named ``AMD-Instinct-<name>`` (``AMD-Instinct-MI300X``), so the vendor reads in the name.
- Huawei Ascend NPUs (MindCluster's Ascend device plugin): ``huawei.com/Ascend910`` (910, 910B and their
  variants), ``huawei.com/Ascend310P``, ``huawei.com/Ascend310``; model from the plugin's chip label
  ``node.kubernetes.io/npu.chip.name`` (``910B3`` -> ``Ascend910B3``) when it is of that resource's
  family, else ``accelerator-type`` (``module-910b-8`` -> ``Ascend910B``), else the family
  (``Ascend910``); memory from ``ASCEND_MEMORY_MIB``.

A node's GPU indices are its NVIDIA cards first, then its AMD cards; its NPU indices follow the Ascend
resources' names in order. ``status.allocatable`` counts usable cards only (each plugin withdraws the
cards it finds unhealthy), so that is the number of cards of each vendor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.kubernetes import names, quantity

Obj = Mapping[str, Any]

MAX_DEVICES = 64

NVIDIA_GPU = names.GPU_RESOURCE
NVIDIA_GPU_SHARED = names.GPU_SHARED_RESOURCE
NVIDIA_PRODUCT = names.GFD_PRODUCT
NVIDIA_MEMORY = names.GFD_MEMORY

AMD_GPU = "amd.com/gpu"
AMD_PRODUCT = "gpu.product-name"
AMD_DEVICE_ID = "gpu.device-id"
AMD_VRAM = "gpu.vram"
AMD_PREFIXES = ("amd.com/", "beta.amd.com/")
AMD_UNKNOWN = "AMD-unknown"

ASCEND_CHIP = "node.kubernetes.io/npu.chip.name"
ASCEND_TYPE = "accelerator-type"
ASCEND_RESOURCES: Mapping[str, str] = {
    "huawei.com/Ascend310": "310",
    "huawei.com/Ascend310P": "310P",
    "huawei.com/Ascend910": "910",
}
"""The Ascend device plugin's whole-chip resources and the chip family each holds."""

AMD_MODELS: Mapping[str, int] = {
    "MI100": 32 * 1024,
    "MI210": 64 * 1024,
    "MI250": 128 * 1024,
    "MI250X": 128 * 1024,
    "MI300A": 128 * 1024,
    "MI300X": 192 * 1024,
    "MI308X": 192 * 1024,
    "MI325X": 256 * 1024,
    "MI350X": 288 * 1024,
    "MI355X": 288 * 1024,
}
"""AMD Instinct accelerators: HBM in MiB (AMD's data sheets), used when the labeller gives no VRAM."""

AMD_DEVICE_IDS: Mapping[str, str] = {
    "738c": "MI100",
    "740f": "MI210",
    "7408": "MI250X",
    "740c": "MI250X",
    "74a0": "MI300A",
    "74a1": "MI300X",
    "74a2": "MI308X",
    "74a5": "MI325X",
    "74a9": "MI300X",
    "74bd": "MI300X",
    "75a0": "MI350X",
    "75a3": "MI355X",
}
"""PCI device ids of AMD Instinct accelerators (the ROCm ``amdgpu.ids`` list), for nodes whose labeller
reports the device id but not the product name. ``740c`` is an MI250X or an MI250: the same memory."""

ASCEND_MEMORY_MIB: Mapping[str, int] = {
    "Ascend310": 8 * 1024,
    "Ascend310P": 24 * 1024,
    "Ascend310P1": 24 * 1024,
    "Ascend310P3": 24 * 1024,
    "Ascend910": 32 * 1024,
    "Ascend910A": 32 * 1024,
    "Ascend910ProA": 32 * 1024,
    "Ascend910ProB": 32 * 1024,
    "Ascend910PremiumA": 32 * 1024,
    "Ascend910B": 64 * 1024,
    "Ascend910B1": 64 * 1024,
    "Ascend910B2": 64 * 1024,
    "Ascend910B3": 64 * 1024,
    "Ascend910B4": 32 * 1024,
}
"""Device memory per Ascend chip in MiB (Huawei's product documentation: HBM of the 910 family, the
310P3's 24 GiB and the 310's 8 GiB); a chip not listed reports 0."""

_INSTINCT = re.compile(r"MI\d+[A-Z]*", re.IGNORECASE)
_VRAM = re.compile(r"^(\d+)G$")


@dataclass(frozen=True, slots=True)
class Card:
    """One GPU or NPU: its model, memory, and the extended resource a pod asks it by."""

    model: str
    memory_mib: int
    resource: str


@dataclass(frozen=True, slots=True)
class Cards:
    """A node's GPUs and NPUs, by index."""

    gpus: tuple[Card, ...] = ()
    npus: tuple[Card, ...] = ()

    def devices(self) -> NodeDevices:
        return NodeDevices(tuple(c.resource for c in self.gpus), tuple(c.resource for c in self.npus))


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """What the pods of a node ask for each GPU and NPU index: the resource names, by index."""

    gpus: tuple[str, ...] = ()
    npus: tuple[str, ...] = ()


class DeviceRequestError(ValueError):
    """A replica's devices cannot be asked of the node; the message says why, for the job's owner."""


def model_name(text: str, fallback: str = "unknown") -> str:
    """``text`` as a catalogue model name (letters, digits, ``._+-``, at most 64), or ``fallback``."""
    clean = "".join(c if c.isascii() and (c.isalnum() or c in "._+-") else "-" for c in text)
    clean = clean.strip("._+-")[:64].strip("._+-")
    return clean or fallback


def _count(allocatable: Obj, resource: str) -> int:
    try:
        return min(quantity.count(allocatable.get(resource, 0)), MAX_DEVICES)
    except quantity.QuantityError:
        return 0


def _int_label(labels: Obj, key: str) -> int:
    value = str(labels.get(key, ""))
    return int(value) if value.isdigit() else 0


# -- NVIDIA --------------------------------------------------------------------------------------------


def nvidia_model(labels: Obj) -> str:
    """GPU feature discovery's product; a time-sliced card's ``-SHARED`` suffix is dropped."""
    return model_name(str(labels.get(NVIDIA_PRODUCT, "")).removesuffix("-SHARED"))


def _nvidia(labels: Obj, count: int) -> list[Card]:
    card = Card(nvidia_model(labels), _int_label(labels, NVIDIA_MEMORY), NVIDIA_GPU)
    return [card] * count


# -- AMD -----------------------------------------------------------------------------------------------


def _amd_values(labels: Obj, name: str) -> dict[str, int]:
    """The labeller's values of one property with their card counts: the single form (``amd.com/gpu.vram:
    64G``, all cards alike) or the counted one (``amd.com/gpu.vram.64G: "4"``), ``amd.com/`` first."""
    for prefix in AMD_PREFIXES:
        key = prefix + name
        if labels.get(key):
            return {str(labels[key]): 0}
        counted = {k[len(key) + 1 :]: _int_label(labels, k) for k in labels if k.startswith(key + ".")}
        counted = {value: n for value, n in counted.items() if value and n > 0}
        if counted:
            return counted
    return {}


def amd_model(product: str = "", device_id: str = "") -> str:
    """``AMD-Instinct-MI300X`` from a product name (``AMD_Instinct_MI300X``, ``Instinct_MI210``) or a
    device id (``74a1``); another product keeps its own name after ``AMD-``."""
    found = _INSTINCT.search(product)
    if found:
        return f"AMD-Instinct-{found.group(0).upper()}"
    if product:
        # the labeller writes spaces as underscores: words are joined by "-" here, as in the other models
        words = re.sub(r"^AMD[\s_-]*", "", product.replace("_", " "), flags=re.IGNORECASE)
        return "AMD-" + model_name(words, "unknown")
    short = AMD_DEVICE_IDS.get(device_id.lower().removeprefix("0x"))
    return f"AMD-Instinct-{short}" if short else AMD_UNKNOWN


def _amd_memory(model: str, vram: Mapping[str, int]) -> int:
    if len(vram) == 1:
        size = _VRAM.match(next(iter(vram)))
        if size:
            return int(size.group(1)) * 1024
    return AMD_MODELS.get(model.removeprefix("AMD-Instinct-"), 0)


def _amd(labels: Obj, count: int) -> list[Card]:
    products = _amd_values(labels, AMD_PRODUCT)
    if products:
        models = {amd_model(product=p): n for p, n in products.items()}
    else:
        models = {amd_model(device_id=d): n for d, n in _amd_values(labels, AMD_DEVICE_ID).items()}
    vram = _amd_values(labels, AMD_VRAM) if len(models) <= 1 else {}
    cards: list[Card] = []
    for model in sorted(models):
        # one model (single form, n = 0): every card; several: as many as the labeller counted
        cards.extend([Card(model, _amd_memory(model, vram), AMD_GPU)] * (models[model] or count))
    cards = cards[:count]  # cards the plugin withdrew as unhealthy: which ones, the labels do not say
    cards.extend([Card(AMD_UNKNOWN, 0, AMD_GPU)] * (count - len(cards)))
    return cards


# -- Huawei Ascend -------------------------------------------------------------------------------------


def ascend_model(family: str, labels: Obj) -> str:
    """The model of the node's chips of ``family`` (``910``, ``310P``, ``310``)."""
    chip = str(labels.get(ASCEND_CHIP, ""))
    if chip.startswith(family) and not (family == "310" and chip.startswith("310P")):
        return model_name("Ascend" + chip)
    kind = str(labels.get(ASCEND_TYPE, "")).lower()
    if family == "910" and "910b" in kind:
        return "Ascend910B"
    return "Ascend" + family


def _ascend(labels: Obj, allocatable: Obj) -> list[Card]:
    cards: list[Card] = []
    for resource in sorted(ASCEND_RESOURCES):
        model = ascend_model(ASCEND_RESOURCES[resource], labels)
        cards.extend([Card(model, ASCEND_MEMORY_MIB.get(model, 0), resource)] * _count(allocatable, resource))
    return cards


# -- a node, and a replica's requests ------------------------------------------------------------------


def cards(labels: Obj, allocatable: Obj) -> Cards:
    """The node's GPUs (NVIDIA, then AMD) and NPUs, at most ``MAX_DEVICES`` of each."""
    gpus = _nvidia(labels, _count(allocatable, NVIDIA_GPU)) + _amd(labels, _count(allocatable, AMD_GPU))
    return Cards(tuple(gpus[:MAX_DEVICES]), tuple(_ascend(labels, allocatable)[:MAX_DEVICES]))


def _resource_of(kind: str, resources: Sequence[str], index: int, node: str) -> str:
    if not 0 <= index < len(resources):
        raise DeviceRequestError(f"node {node} has no {kind} {index} (it has {len(resources)})")
    return resources[index]


def requests(
    node: str,
    devices: NodeDevices | None,
    gpu_indices: Sequence[int],
    gpu_milli_each: int,
    npu_indices: Sequence[int],
    *,
    nvidia: str = NVIDIA_GPU,
    nvidia_shared: str = NVIDIA_GPU_SHARED,
) -> dict[str, str]:
    """The extended resources a replica with these device indices asks of ``node``, as a pod's requests.

    Whole GPUs: their resources, counted (``amd.com/gpu: 2``); a share of one: one ``nvidia_shared``
    (only NVIDIA's time-slicing offers shares); NPUs: their resources, counted (``huawei.com/Ascend910:
    2``). NVIDIA cards are asked by ``nvidia`` (a device plugin may rename its resource). ``devices``
    ``None`` (the node was never seen by this connector): GPUs are asked as NVIDIA's, NPUs cannot be."""
    wanted: dict[str, int] = {}
    if gpu_indices:
        if devices is None:
            names = [nvidia] * len(gpu_indices)
        else:
            names = [_resource_of("GPU", devices.gpus, i, node) for i in gpu_indices]
            names = [nvidia if name == NVIDIA_GPU else name for name in names]
        if gpu_milli_each < 1000:
            if any(name != nvidia for name in names):
                raise DeviceRequestError(
                    f"a share of a GPU on node {node}: only NVIDIA GPUs can be shared ({nvidia_shared}); "
                    f"this one is asked by {names[0]}"
                )
            wanted[nvidia_shared] = 1
        else:
            for name in names:
                wanted[name] = wanted.get(name, 0) + 1
    if npu_indices:
        if devices is None:
            raise DeviceRequestError(f"the connector has not seen node {node}, so it cannot tell how to ask its NPUs")
        for index in npu_indices:
            name = _resource_of("NPU", devices.npus, index, node)
            wanted[name] = wanted.get(name, 0) + 1
    return {name: str(n) for name, n in sorted(wanted.items())}


__all__ = [
    "AMD_DEVICE_IDS",
    "AMD_GPU",
    "AMD_MODELS",
    "ASCEND_MEMORY_MIB",
    "ASCEND_RESOURCES",
    "NVIDIA_GPU",
    "NVIDIA_GPU_SHARED",
    "Card",
    "Cards",
    "DeviceRequestError",
    "NodeDevices",
    "amd_model",
    "ascend_model",
    "cards",
    "model_name",
    "nvidia_model",
    "requests",
]
