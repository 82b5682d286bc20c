"""Node lists for simulated clusters: the public trace CSVs or a YAML file, sliced or split.

Called by the CLI and ``SimFleet`` (to build a ``ClusterSpec``) and by tests. Reads files; nothing else.

Formats, told apart by the file's suffix and CSV header:

- openb 2023 (``sn, cpu_milli, memory_mib, gpu, model``): node ids are the ``sn`` values.
- spot-GPU 2026 (``gpu_model, gpu_capacity_num, cpu_num, node_name``): ids ``spot-node-<name>``; the
  trace gives no memory, so a node gets 8 GiB per CPU core.
- YAML: ``nodes:`` a list of ``{name, cpu_milli, memory_mib, gpus, model, gpu_memory_mib, npus,
  npu_model, npu_memory_mib, labels, taints, nvlink_domain, rdma_fabric, schedulable, count}`` (``count``
  makes ``name-000``, ``name-001``, ...), and an optional ``cluster:`` section with ``display_name, site,
  region, currency, gpu_rates`` (model to micro-units per GPU-hour), ``datasets`` and ``labels``, read by
  ``connectors.cluster_section`` (the Kubernetes connector's configuration file has the same section).

GPU memory comes from the model name (``GPU_MEMORY_MIB``, what the driver reports); the undisclosed
internal models of the openb trace (G1, G2, G3) report 0. Nodes with eight GPUs of one model read from a
CSV share an RDMA fabric named after the model (``ib-t4``), so multi-node jobs have somewhere to go.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from connectors import cluster_section
from connectors.cluster_section import ClusterDefaults
from events.catalog.inventory import Taint
from events.catalog.types import NodeId

GPU_MEMORY_MIB: Mapping[str, int] = {
    "P100": 16280,
    "T4": 15109,
    "V100M16": 16160,
    "V100M32": 32510,
    "A10": 22731,
    "A100-SXM4-80GB": 81251,
    "A800-SXM4-80GB": 81251,
    "H800": 81559,
}
"""MiB the driver reports for each model of the traces; unknown models report 0."""

_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$")


class NodeListError(ValueError):
    """A node list that cannot be read: the file, the entry and what is wrong."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node as built: capacity, devices and static metadata. Quantities in milli-CPU and MiB."""

    name: NodeId
    cpu_milli: int
    memory_mib: int
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    npus: int = 0
    npu_model: str = ""
    npu_memory_mib: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    nvlink_domain: str | None = None
    rdma_fabric: str | None = None
    schedulable: bool = True


@dataclass(frozen=True, slots=True)
class NodeList:
    nodes: tuple[NodeSpec, ...]
    cluster: ClusterDefaults = field(default_factory=ClusterDefaults)
    source: str = ""


NPU_POOL_MODEL = "Ascend910B"
NPU_POOL_NODES = 4
"""The default simulated fleet's NPU pool: this many nodes of 8 ``NPU_POOL_MODEL`` NPUs, in its last cluster
(``fedsched up``, ``fedsched demo``), so a newcomer's fleet shows NPUs and can run an NPU job."""


def npu_pool(count: int = NPU_POOL_NODES) -> tuple[NodeSpec, ...]:
    """``count`` nodes of 8 NPUs of one model each (64 GiB each), 192 CPUs and 1.5 TiB, on one RDMA fabric
    so a job of several NPU nodes has somewhere to go; named ``npu-ascend-00``, ... (not an openb name)."""
    if count < 0:
        raise ValueError(f"an NPU pool of {count} nodes: give 0 or more")
    return tuple(
        NodeSpec(
            NodeId(f"npu-ascend-{index:02d}"),
            192_000,
            1_572_864,
            npus=8,
            npu_model=NPU_POOL_MODEL,
            npu_memory_mib=65_536,
            labels=(("huawei.com/npu.product", NPU_POOL_MODEL),),
            rdma_fabric="roce-ascend910b",
        )
        for index in range(count)
    )


def traces_dir() -> Path:
    """``FEDSCHED_TRACES``, or ``../shared/traces`` next to the repository."""
    env = os.environ.get("FEDSCHED_TRACES")
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def default_nodes_path() -> Path:
    return traces_dir() / "alibaba-openb-2023" / "openb_node_list_gpu_node.csv"


def parse_split(text: str) -> tuple[int, int]:
    """``K:I`` (deal into K clusters, take number I, counting from 0) as a pair."""
    match = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not match:
        raise ValueError(f"--split must be K:I, for example 3:0; got {text!r}")
    count, index = int(match[1]), int(match[2])
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--split {text}: need K >= 1 and 0 <= I < K")
    return count, index


def load_nodes(path: Path, *, slice_: int | None = None, split: tuple[int, int] | None = None) -> NodeList:
    """Read a node list; ``slice_`` keeps the first N nodes, ``split=(K, I)`` every K-th from the I-th."""
    if not path.is_file():
        raise NodeListError(f"{path}: no such node list")
    listing = _read_yaml(path) if path.suffix.lower() in (".yaml", ".yml") else _read_csv(path)
    nodes = listing.nodes
    if split is not None:
        count, index = split
        nodes = nodes[index::count]
    if slice_ is not None:
        if slice_ < 1:
            raise NodeListError(f"--slice must be at least 1, got {slice_}")
        nodes = nodes[:slice_]
    if not nodes:
        raise NodeListError(f"{path}: no nodes left after slicing")
    return NodeList(nodes, listing.cluster, str(path))


# -- CSV ----------------------------------------------------------------------------------------------


def _read_csv(path: Path) -> NodeList:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = set(reader.fieldnames or ())
        rows = list(reader)
    if {"sn", "cpu_milli", "memory_mib", "gpu", "model"} <= header:
        nodes = [_openb_node(path, n, row) for n, row in enumerate(rows, start=2)]
    elif {"gpu_model", "gpu_capacity_num", "cpu_num", "node_name"} <= header:
        nodes = [_spot_node(path, n, row) for n, row in enumerate(rows, start=2)]
    else:
        raise NodeListError(f"{path}: unknown CSV header {sorted(header)}; expected the openb or spot-GPU node list")
    _check_unique(path, nodes)
    return NodeList(tuple(nodes))


def _openb_node(path: Path, line: int, row: dict[str, str]) -> NodeSpec:
    gpus = _int(path, line, row, "gpu")
    model = (row.get("model") or "").strip() if gpus else ""
    return _csv_node(
        path,
        line,
        row["sn"].strip().lower(),
        _int(path, line, row, "cpu_milli"),
        _int(path, line, row, "memory_mib"),
        gpus,
        model,
    )


def _spot_node(path: Path, line: int, row: dict[str, str]) -> NodeSpec:
    cores = _int(path, line, row, "cpu_num")
    name = f"spot-node-{_int(path, line, row, 'node_name'):04d}"
    gpus = _int(path, line, row, "gpu_capacity_num")
    return _csv_node(path, line, name, cores * 1000, cores * 8192, gpus, row["gpu_model"].strip())


def _csv_node(path: Path, line: int, name: str, cpu: int, memory: int, gpus: int, model: str) -> NodeSpec:
    if not _ID_RE.match(name):
        raise NodeListError(f"{path}:{line}: node name {name!r} is not a valid id")
    if not 0 <= gpus <= 64:
        raise NodeListError(f"{path}:{line}: {gpus} GPUs; a node has 0 to 64")
    labels: tuple[tuple[str, str], ...] = ()
    fabric = None
    if gpus:
        labels = _gpu_labels(model, gpus)
        if gpus == 8:
            fabric = "ib-" + re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")
    return NodeSpec(
        NodeId(name), cpu, memory, gpus, model, GPU_MEMORY_MIB.get(model, 0), labels=labels, rdma_fabric=fabric
    )


def _gpu_labels(model: str, gpus: int) -> tuple[tuple[str, str], ...]:
    return (
        ("nvidia.com/gpu.count", str(gpus)),
        ("nvidia.com/gpu.memory", str(GPU_MEMORY_MIB.get(model, 0))),
        ("nvidia.com/gpu.product", model),
    )


def _int(path: Path, line: int, row: dict[str, str], key: str) -> int:
    text = (row.get(key) or "").strip()
    try:
        value = int(float(text)) if text else 0
    except ValueError:
        raise NodeListError(f"{path}:{line}: {key} {text!r} is not a number") from None
    if value < 0:
        raise NodeListError(f"{path}:{line}: {key} is negative")
    return value


def _check_unique(path: Path, nodes: Sequence[NodeSpec]) -> None:
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise NodeListError(f"{path}: node {node.name!r} appears twice")
        seen.add(node.name)


# -- YAML ---------------------------------------------------------------------------------------------


def _read_yaml(path: Path) -> NodeList:
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise NodeListError(f"{path}: not YAML: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
        raise NodeListError(f"{path}: expected a mapping with a 'nodes' list")
    nodes: list[NodeSpec] = []
    for index, entry in enumerate(document["nodes"]):
        where = f"{path}: nodes[{index}]"
        if not isinstance(entry, dict):
            raise NodeListError(f"{where}: expected a mapping")
        nodes.extend(_yaml_nodes(where, entry))
    _check_unique(path, nodes)
    return NodeList(tuple(nodes), _yaml_cluster(path, document.get("cluster")))


_NODE_KEYS = {
    "name",
    "count",
    "cpu_milli",
    "memory_mib",
    "gpus",
    "model",
    "gpu_memory_mib",
    "npus",
    "npu_model",
    "npu_memory_mib",
    "labels",
    "taints",
    "nvlink_domain",
    "rdma_fabric",
    "schedulable",
}


def _yaml_nodes(where: str, entry: dict[str, Any]) -> list[NodeSpec]:
    unknown = sorted(set(entry) - _NODE_KEYS)
    if unknown:
        raise NodeListError(f"{where}: unknown keys {unknown}")
    name = str(entry.get("name", ""))
    count = _yaml_int(where, entry, "count", 0)
    names = [f"{name}-{i:03d}" for i in range(count)] if count else [name]
    model = str(entry.get("model", ""))
    gpus = _yaml_int(where, entry, "gpus", 0)
    try:
        taints = tuple(Taint.model_validate(t, strict=False) for t in entry.get("taints") or ())
    except (TypeError, ValueError) as error:
        raise NodeListError(f"{where}: bad taints: {error}") from None
    labels = dict(_gpu_labels(model, gpus)) if gpus else {}
    labels.update({str(k): str(v) for k, v in (entry.get("labels") or {}).items()})
    out = []
    for node in names:
        if not _ID_RE.match(node):
            raise NodeListError(f"{where}: node name {node!r} is not a valid id")
        out.append(
            NodeSpec(
                name=NodeId(node),
                cpu_milli=_yaml_int(where, entry, "cpu_milli", 0),
                memory_mib=_yaml_int(where, entry, "memory_mib", 0),
                gpus=gpus,
                gpu_model=model,
                gpu_memory_mib=_yaml_int(where, entry, "gpu_memory_mib", GPU_MEMORY_MIB.get(model, 0)),
                npus=_yaml_int(where, entry, "npus", 0),
                npu_model=str(entry.get("npu_model", "")),
                npu_memory_mib=_yaml_int(where, entry, "npu_memory_mib", 0),
                labels=tuple(sorted(labels.items())),
                taints=taints,
                nvlink_domain=entry.get("nvlink_domain"),
                rdma_fabric=entry.get("rdma_fabric"),
                schedulable=bool(entry.get("schedulable", True)),
            )
        )
    if gpus and not model:
        raise NodeListError(f"{where}: {gpus} GPUs but no model")
    if not 0 <= gpus <= 64:
        raise NodeListError(f"{where}: {gpus} GPUs; a node has 0 to 64")
    return out


def _yaml_int(where: str, entry: dict[str, Any], key: str, default: int) -> int:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NodeListError(f"{where}: {key} must be a non-negative integer, got {value!r}")
    return value


def _yaml_cluster(path: Path, section: object) -> ClusterDefaults:
    try:
        return cluster_section.parse(section)
    except cluster_section.ClusterSectionError as error:
        raise NodeListError(f"{path}: {error}") from None


__all__ = [
    "GPU_MEMORY_MIB",
    "NPU_POOL_MODEL",
    "NPU_POOL_NODES",
    "ClusterDefaults",
    "NodeList",
    "NodeListError",
    "NodeSpec",
    "default_nodes_path",
    "load_nodes",
    "npu_pool",
    "parse_split",
    "traces_dir",
]
