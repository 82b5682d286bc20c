"""What a job's pod template may not ask for itself: accelerators beyond the job's request.

Called by ``pods`` (before any object is made: a refusal is a ``RenderError`` and the run ends
``JobFailed(LaunchFailed)``) and by the API's submit validation (``services.api.templates``), so that the
person submitting hears it at once. Pure: plain dicts in, sentences out.

The scheduler counts a replica's accelerators from the job's ``resources`` and the connector puts exactly
those on the pod's first container. A template whose containers (init containers included) request or
limit accelerators on their own would take devices nobody counted, so every accelerator resource a
template names must be one the connector sets itself, on the first container, with the same quantity
(``allowed``); anything else is refused, naming the container and the resource.

An accelerator resource is a device plugin's extended resource for a GPU, NPU or similar (``is_accelerator``):
the connector's own names, NVIDIA's (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, MIG's
``nvidia.com/mig-*``), ``amd.com/gpu``, Huawei's ``huawei.com/Ascend*``, Intel's ``gpu.intel.com/*``,
Habana's ``habana.ai/gaudi``, AWS Neuron, Google TPUs, and any extended resource whose name (after the
``/``) is or starts with ``gpu``, ``npu``, ``tpu``, ``mlu``, ``dcu`` or ``vgpu``. Other extended resources
(RDMA devices, hugepages, SR-IOV NICs) are the template's to ask for.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from connectors.kubernetes import quantity

_KNOWN = frozenset(
    {
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "amd.com/gpu",
        "habana.ai/gaudi",
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "aws.amazon.com/neurondevice",
        "google.com/tpu",
    }
)
_KNOWN_PREFIXES = ("nvidia.com/mig-", "huawei.com/ascend", "gpu.intel.com/")
_DEVICE_WORDS = ("gpu", "npu", "tpu", "mlu", "dcu", "vgpu")

Allowed = Callable[[str, Any], bool]
"""Whether the first container may name this accelerator resource with this quantity."""


def is_accelerator(resource: str, own: Collection[str] = ()) -> bool:
    """Whether ``resource`` (a resource name of a container) is an accelerator's (see the module)."""
    if resource in own:
        return True
    name = resource.lower()
    if "/" not in name or name.split("/", 1)[0].endswith("kubernetes.io"):
        return False  # cpu, memory, hugepages-*, ephemeral-storage: native resources
    if name in _KNOWN or name.startswith(_KNOWN_PREFIXES):
        return True
    word = name.rsplit("/", 1)[1]
    return any(word == w or word.startswith((f"{w}.", f"{w}-")) for w in _DEVICE_WORDS)


def same_quantity(a: Any, b: Any) -> bool:
    try:
        return quantity.parse(a) == quantity.parse(b)
    except (quantity.QuantityError, TypeError, ArithmeticError):
        return False


def exactly(ours: Mapping[str, str]) -> Allowed:
    """The connector's rule: the first container may restate what the connector sets, nothing more."""
    return lambda resource, amount: resource in ours and same_quantity(amount, ours[resource])


def problems(template: Mapping[str, Any], allowed: Allowed, own: Collection[str] = ()) -> list[str]:
    """Each accelerator a pod template's containers ask beyond ``allowed``, as a sentence naming the
    container and the resource; empty for a template of another form (shorthand, empty)."""
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return []
    found: list[str] = []
    for group in ("initContainers", "containers"):
        containers = spec.get(group)
        if not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            if not isinstance(container, Mapping):
                continue
            first = group == "containers" and index == 0
            name = container.get("name") or f"#{index}"
            resources = container.get("resources")
            if not isinstance(resources, Mapping):
                continue
            for part in ("requests", "limits"):
                asked = resources.get(part)
                if not isinstance(asked, Mapping):
                    continue
                for resource, amount in sorted(asked.items(), key=lambda item: str(item[0])):
                    if not is_accelerator(str(resource), own) or (first and allowed(str(resource), amount)):
                        continue
                    found.append(
                        f"template.spec.{group}[{index}] ({name}) {part} {resource}: {amount}, beyond the job's "
                        f"request: accelerators come from the job's resources, which fedsched puts on the first "
                        f"container; remove it from the template"
                    )
    return found
