"""Reading the public cluster traces (Alibaba openb 2023 and spot-GPU 2026) into the core's model.

Called by the simulator and the benchmark. This is the I/O side: it reads CSV files; the policy core
never does.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from events.catalog.types import ClusterId, NodeId
from services.scheduler.core.policy.fleet import Demand
from services.scheduler.core.policy.model import Gpu, Node, Shape

# GPU memory per model (MiB), as published by the trace's authors; internal codes G1-G3 are unknown.
GPU_MEMORY_MIB = {
    "P100": 16280,
    "T4": 15109,
    "V100M16": 16160,
    "V100M32": 32510,
    "A10": 22731,
    "A100-SXM4-80GB": 81251,
}


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU
    gpu_spec: tuple[str, ...]
    creation_s: int | None = None
    deletion_s: int | None = None
    qos: str = ""

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    def demand(self) -> Demand:
        if self.num_gpu == 0:
            return Demand(cpu_milli=self.cpu_milli, memory_mib=self.memory_mib)
        if self.num_gpu == 1 and self.gpu_milli < 1000:
            return Demand(self.cpu_milli, self.memory_mib, 0, self.gpu_milli, self.gpu_spec)
        return Demand(self.cpu_milli, self.memory_mib, self.num_gpu, 0, self.gpu_spec)

    def shape(self) -> Shape:
        milli = self.gpu_milli if self.num_gpu else 0
        return Shape(cpu_milli=self.cpu_milli, gpu_milli=milli, gpus=self.num_gpu, models=self.gpu_spec)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def traces_dir() -> Path:
    env = os.environ.get("FEDSCHED_TRACES")
    return Path(env) if env else repo_root().parent / "shared" / "traces"


def default_nodes_csv() -> Path:
    return traces_dir() / "alibaba-openb-2023" / "openb_node_list_gpu_node.csv"


def pods_csv(name: str) -> Path:
    return traces_dir() / "alibaba-openb-2023" / f"openb_pod_list_{name}.csv"


def spot_nodes_csv() -> Path:
    return traces_dir() / "alibaba-spot-gpu-2026" / "node_info_df.csv"


def _int(row: dict[str, str], key: str, default: int = 0) -> int:
    v = (row.get(key) or "").strip()
    return int(float(v)) if v else default


def load_openb_nodes(path: Path, clusters: int = 1) -> list[Node]:
    """Nodes of an openb node list; with ``clusters`` > 1 they are dealt round-robin into clusters."""
    with path.open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: r["sn"])
    nodes = []
    for i, r in enumerate(rows):
        model = (r.get("model") or "").strip()
        count = _int(r, "gpu")
        nodes.append(
            Node(
                node_id=NodeId(r["sn"]),
                cluster=ClusterId(f"cluster-{i % clusters:02d}"),
                cpu_milli=_int(r, "cpu_milli"),
                memory_mib=_int(r, "memory_mib"),
                cpu_free_milli=_int(r, "cpu_milli"),
                memory_free_mib=_int(r, "memory_mib"),
                gpu_model=model if count else "",
                gpu_memory_mib=GPU_MEMORY_MIB.get(model, 0),
                gpus=tuple(Gpu(index=j) for j in range(count)),
                rdma_fabric=f"{model or 'cpu'}-{i // 32:03d}",
            )
        )
    return nodes


def load_spot_nodes(path: Path, target_nodes: int, clusters: int) -> list[Node]:
    """The spot-GPU fleet repeated up to ``target_nodes`` and dealt into ``clusters`` clusters."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    nodes = []
    for i in range(target_nodes):
        r = rows[i % len(rows)]
        model = r["gpu_model"].strip()
        count = min(8, _int(r, "gpu_capacity_num"))
        cpu = _int(r, "cpu_num") * 1000
        mem = cpu // 1000 * 8192
        nodes.append(
            Node(
                node_id=NodeId(f"spot-{i:06d}"),
                cluster=ClusterId(f"cluster-{i % clusters:02d}"),
                cpu_milli=cpu,
                memory_mib=mem,
                cpu_free_milli=cpu,
                memory_free_mib=mem,
                gpu_model=model if count else "",
                gpu_memory_mib=GPU_MEMORY_MIB.get(model, 0),
                gpus=tuple(Gpu(index=j) for j in range(count)),
                rdma_fabric=f"{model}-{i // 64:04d}",
            )
        )
    return nodes


def load_pods(path: Path) -> list[TracePod]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    pods = []
    for r in rows:
        spec = tuple(sorted(x for x in (r.get("gpu_spec") or "").split("|") if x))
        num = _int(r, "num_gpu")
        milli = _int(r, "gpu_milli") if num else 0
        milli = min(milli, 1000)
        created = (r.get("creation_time") or "").strip()
        deleted = (r.get("deletion_time") or "").strip()
        pods.append(
            TracePod(
                name=r["name"],
                cpu_milli=_int(r, "cpu_milli"),
                memory_mib=_int(r, "memory_mib"),
                num_gpu=num,
                gpu_milli=milli if num else 0,
                gpu_spec=spec if num else (),
                creation_s=int(float(created)) if created else None,
                deletion_s=int(float(deleted)) if deleted else None,
                qos=(r.get("qos") or "").strip(),
            )
        )
    pods.sort(key=lambda p: p.name)
    return pods


__all__ = [
    "TracePod",
    "default_nodes_csv",
    "load_openb_nodes",
    "load_pods",
    "load_spot_nodes",
    "pods_csv",
    "repo_root",
    "spot_nodes_csv",
    "traces_dir",
]
