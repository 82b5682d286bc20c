"""What the NVIDIA DCGM exporter says about each GPU: one reading per GPU of a scrape. Pure.

Called by ``usage.sources`` with the samples of one scrape (``usage.exposition`` for an exporter's
``/metrics``, or a Prometheus instant query's vector); ``usage.window`` averages the readings.

Families read (the exporter's ``etc/default-counters.csv``): ``DCGM_FI_DEV_GPU_UTIL`` (percent busy),
``DCGM_FI_DEV_FB_USED`` (framebuffer memory used, MiB), and ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio
0..1 of time the graphics engine was active: the profiling counter, used when ``GPU_UTIL`` is absent, as
on MIG instances and in the DCP counter set). Labels: ``gpu`` (the driver's index), ``UUID``,
``modelName``, ``Hostname`` (``hostname`` in newer exporters; the node's name when the exporter has
``NODE_NAME``, which its Helm chart and the GPU operator set), and, when the exporter maps devices to
pods through the kubelet's pod-resources API, ``pod``/``namespace``/``container`` (``pod_name``/
``pod_namespace``/``container_name`` with ``--kubernetes-use-old-namespace``).

A GPU several pods share appears once per pod, each a copy of the device's figures; a GPU no pod uses
once, with no pod labels (or empty ones). Values DCGM marks blank (its sentinels near 2^31 and 2^63),
NaN and values outside the family's range are "not measured", never 0.

MIG: an instance's series carry ``GPU_I_ID``; its readings join its GPU's (memory summed, utilisation the
mean of the instances measured: the instances' sizes are not in the labels, so that mean is not weighted).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from connectors.kubernetes.usage.exposition import Sample

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FAMILIES = (GPU_UTIL, FB_USED, GR_ENGINE_ACTIVE)
HOSTNAME_LABELS = ("Hostname", "hostname")
_POD_LABELS = (("pod", "namespace"), ("pod_name", "pod_namespace"))
MAX_MIB = 16 * 1024 * 1024
"""16 TiB: past any GPU's memory, and below DCGM's blank sentinels (which read as this much or more)."""


@dataclass(frozen=True, slots=True, order=True)
class PodRef:
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU in one scrape. ``None``: the exporter did not measure it (absent, blank or NaN)."""

    node: str
    index: int
    uuid: str
    model: str
    utilisation_pct: int | None
    memory_used_mib: int | None
    pods: tuple[PodRef, ...]
    """The pods the exporter says use this GPU (sorted; empty: none)."""


@dataclass
class _Gpu:
    uuid: str = ""
    model: str = ""
    util: dict[str, float] = field(default_factory=dict)
    """Per instance ("" for the whole GPU): percent."""
    active: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    pods: set[PodRef] = field(default_factory=set)


def readings(samples: Iterable[Sample], node: str | None = None) -> tuple[list[GpuReading], list[str]]:
    """The GPUs the samples measure, sorted by node and index, and what was wrong with the others.

    ``node``: the node the exporter runs on, as discovery found it (it wins over the ``Hostname`` label,
    which is the exporter pod's own name unless ``NODE_NAME`` is set); None: from the label."""
    gpus: dict[tuple[str, int], _Gpu] = {}
    problems: list[str] = []
    for sample in samples:
        where = node or next((h for k in HOSTNAME_LABELS if (h := sample.label(k))), "")
        index = sample.label("gpu")
        if not where or not index.isdigit() or int(index) > 255:
            problems.append(f"{sample.name}: no node (Hostname label) or GPU index (gpu label): {sample.labels}")
            continue
        gpu = gpus.setdefault((where, int(index)), _Gpu())
        gpu.uuid = gpu.uuid or sample.label("UUID")
        gpu.model = gpu.model or sample.label("modelName")
        instance = sample.label("GPU_I_ID")
        _record(gpu, sample, instance)
        for pod_label, namespace_label in _POD_LABELS:
            if pod := sample.label(pod_label):
                gpu.pods.add(PodRef(sample.label(namespace_label), pod))
    out = [
        GpuReading(where, index, gpu.uuid, gpu.model, _utilisation(gpu), _memory(gpu), tuple(sorted(gpu.pods)))
        for (where, index), gpu in sorted(gpus.items())
    ]
    return out, problems


def _record(gpu: _Gpu, sample: Sample, instance: str) -> None:
    value = sample.value
    if math.isnan(value) or value < 0:
        return
    if sample.name == GPU_UTIL and value <= 100:
        gpu.util[instance] = value
    elif sample.name == GR_ENGINE_ACTIVE and value <= 1:
        gpu.active[instance] = value * 100
    elif sample.name == FB_USED and value < MAX_MIB:
        gpu.memory[instance] = value


def _utilisation(gpu: _Gpu) -> int | None:
    values = gpu.util or gpu.active
    if not values:
        return None
    return min(100, round(sum(values[k] for k in sorted(values)) / len(values)))


def _memory(gpu: _Gpu) -> int | None:
    if not gpu.memory:
        return None
    return round(sum(gpu.memory[k] for k in sorted(gpu.memory)))
