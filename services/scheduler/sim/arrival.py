"""Arrival-mode simulation: the FGD paper's (ATC '23) procedure, driving the policy core's placer.

Called by ``fedsched simulate --mode arrival``. Procedure, as in the authors' simulator:
1. The trace's pods, sorted by name, are the workload; its typical shapes (the most common shapes
   covering 95% of the pods, CPU-only pods included) define fragmentation for the FGD policy. The
   fragmentation policies can be scored against another coverage (``typical_coverage_pct``, e.g. 100:
   every shape of the workload); the reported fragmentation measure stays the authors' 95%. Our policy
   (``fgd``) adds one filler per GPU-share size below the smallest typical one (``fragmentation.share_fillers``),
   as the scheduling cycle does; the authors' (``fgd-paper``) scores against the typical shapes alone.
2. The pods are shuffled with the seed, then inflated: pods drawn uniformly with replacement from the
   workload are appended until the next one would take GPU demand above 130% of the fleet's GPU capacity
   (the authors compare the drawn pod's per-GPU share with the remaining room; so do we). A trace whose
   demand is already above 130% is thinned by removing random pods instead.
3. Pods arrive one at a time, never depart and are never retried; a pod that fits nowhere counts as
   arrived and is dropped. After every pod we record arrived and allocated milli-GPU.
4. Per integer "arrived % of GPU capacity", allocation % is the mean within the bucket (a bucket with no
   sample borrows its neighbours'); "unallocated GPU %" = 100 - allocation at arrived = 100%.
Ties between equally good nodes are broken by a stable rank of the nodes. The authors' simulator patches
the Kubernetes scheduler to take the smallest node name among equal scores ("for reproducibility"), one
fixed order for every seed; by default we rank the nodes by a permutation seeded with the run's seed, so
that the ten seeds also vary the tie order (``tiebreak="name"`` reproduces the authors' rule).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from services.scheduler.core.policy.federation import choose_replica_across_clusters
from services.scheduler.core.policy.fleet import Demand, FleetState
from services.scheduler.core.policy.fragmentation import FragModel, typical_shapes
from services.scheduler.core.policy.model import ClusterWeights, Node, NodePolicy
from services.scheduler.core.policy.placer import Placer
from services.scheduler.sim.traces import TracePod

TUNE_RATIO_PCT = 130
PAPER_COVERAGE_PCT = 95  # the authors' typical shapes: the most common covering 95% of the pods
TIEBREAKS = ("seeded", "name")


@dataclass(slots=True)
class PlacementRow:
    seed: int
    policy: str
    pod: str
    node: str
    gpu_indices: tuple[int, ...]
    gpu_milli_each: int


@dataclass(slots=True)
class ArrivalRun:
    policy: str
    seed: int
    capacity_milli: int
    arrived: np.ndarray  # per pod, cumulative arrived milli-GPU
    allocated: np.ndarray  # per pod, allocated milli-GPU after it
    frag: np.ndarray  # per pod, expected fragmented milli-GPU (paper's definition) after it
    pods: int
    placed: int
    wall_s: float
    placements: list[PlacementRow] = field(default_factory=list)

    def curve(self) -> list[tuple[int, float]]:
        """(arrived %, allocation %) per integer bucket 0..130, as the authors' analysis computes it."""
        arr = np.rint(self.arrived * 100.0 / self.capacity_milli).astype(np.int64)
        alloc = np.round(self.allocated * 100.0 / self.capacity_milli, 2)
        out = []
        for a in range(0, TUNE_RATIO_PCT + 1):
            sel = alloc[arr == a]
            if not sel.size:
                sel = alloc[(arr >= a - 1) & (arr <= a + 1)]
            if sel.size:
                out.append((a, round(float(sel.mean()), 2)))
        return out

    def unallocated_at(self, arrived_pct: int = 100) -> float:
        for a, alloc in self.curve():
            if a == arrived_pct:
                return round(100.0 - alloc, 2)
        return float("nan")

    def frag_pct_at(self, arrived_pct: int = 100) -> float:
        arr = np.rint(self.arrived * 100.0 / self.capacity_milli).astype(np.int64)
        sel = self.frag[arr == arrived_pct]
        if not sel.size:
            return float("nan")
        return round(float(sel.mean()) * 100.0 / self.capacity_milli, 2)


def inflate(workload: Sequence[TracePod], seed: int, capacity_milli: int) -> list[TracePod]:
    rng = np.random.Generator(np.random.PCG64(seed))
    order = [workload[int(i)] for i in rng.permutation(len(workload))]
    total = sum(p.total_gpu_milli for p in order)
    target = capacity_milli * TUNE_RATIO_PCT // 100
    if total < target:
        while True:
            p = workload[int(rng.integers(len(workload)))]
            if total + p.gpu_milli > target:
                break
            order.append(p)
            total += p.total_gpu_milli
    else:
        while total > target and order:
            p = order.pop(int(rng.integers(len(order))))
            total -= p.total_gpu_milli
    return order


def run_arrival(
    nodes: Sequence[Node],
    workload: Sequence[TracePod],
    policy: NodePolicy,
    seed: int,
    keep_placements: bool = False,
    tiebreak: str = "seeded",
    typical_coverage_pct: int = PAPER_COVERAGE_PCT,
) -> ArrivalRun:
    if tiebreak not in TIEBREAKS:
        raise ValueError(f"tiebreak must be one of {TIEBREAKS}")
    if isinstance(typical_coverage_pct, bool) or not 1 <= typical_coverage_pct <= 100:
        raise ValueError(f"typical_coverage_pct must be from 1 to 100, not {typical_coverage_pct!r}")
    t0 = time.perf_counter()
    fleet = FleetState(nodes)
    if tiebreak == "seeded":
        rng = np.random.Generator(np.random.PCG64([seed, 1]))
        fleet.tiebreak = rng.permutation(fleet.size).astype(np.int64)
    capacity = fleet.capacity_gpu_milli()
    samples = [p.shape() for p in workload]
    fm = FragModel(typical_shapes(samples, PAPER_COVERAGE_PCT), fleet.models)
    scored = fm
    # Our policy also weighs the share sizes below the smallest typical one, as the cycle does; the authors'
    # keeps their list.
    fillers = policy is NodePolicy.FRAGMENTATION
    if typical_coverage_pct != PAPER_COVERAGE_PCT or fillers:
        scored = FragModel(typical_shapes(samples, typical_coverage_pct, fillers), fleet.models)
    placer = Placer(fleet, policy, scored, seed=seed)
    pods = inflate(workload, seed, capacity)
    demands: dict[tuple[int, int, int, int, tuple[str, ...]], Demand] = {}
    n = len(pods)
    arrived = np.zeros(n, dtype=np.int64)
    allocated = np.zeros(n, dtype=np.int64)
    frag_total = np.zeros(n, dtype=np.int64)
    node_frag = fm.frag(fleet.gpu_free, fleet.cpu_free, fleet.model_of)
    frag_sum = int(node_frag.sum())
    weights = ClusterWeights()
    acc_arr = acc_alloc = placed = 0
    rows: list[PlacementRow] = []
    for k, pod in enumerate(pods):
        key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)
        d = demands.get(key)
        if d is None:
            d = demands[key] = pod.demand()
        acc_arr += pod.total_gpu_milli
        got = choose_replica_across_clusters(placer, d, {}, weights)
        if got is not None:
            choice = got[0]
            p = placer.place(d, choice)
            acc_alloc += d.total_gpu_milli
            placed += 1
            i = choice.node
            new = int(fm.frag(fleet.gpu_free[i : i + 1], fleet.cpu_free[i : i + 1], fleet.model_of[i : i + 1])[0])
            frag_sum += new - int(node_frag[i])
            node_frag[i] = new
            if keep_placements:
                rows.append(PlacementRow(seed, policy.value, pod.name, p.node_id, p.gpu_indices, p.gpu_milli_each))
        arrived[k] = acc_arr
        allocated[k] = acc_alloc
        frag_total[k] = frag_sum
    return ArrivalRun(
        policy=policy.value,
        seed=seed,
        capacity_milli=capacity,
        arrived=arrived,
        allocated=allocated,
        frag=frag_total // fm.total_weight,
        pods=n,
        placed=placed,
        wall_s=time.perf_counter() - t0,
        placements=rows,
    )


__all__ = ["PAPER_COVERAGE_PCT", "TIEBREAKS", "ArrivalRun", "PlacementRow", "inflate", "run_arrival"]
