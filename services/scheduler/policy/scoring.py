"""Node scoring: the cost of putting one replica on each candidate node, and the GPU inside it.

Called by the ``Placer``. Every policy returns, for the candidate nodes it is given (all feasible), an
integer cost (lower is better) and, for a GPU-share replica, the GPU slot it would use (-1 otherwise;
whole GPUs are taken from the lowest free slots). One implementation per policy, shared by the cycle, the
simulator and the benchmark.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from services.scheduler.policy.fleet import Demand, FleetState
from services.scheduler.policy.fragmentation import FragModel
from services.scheduler.policy.model import MILLI

I64 = npt.NDArray[np.int64]
INF = np.int64(2**62)
TIER = 10_000_000
# Best-fit weighs free CPU against free GPU as the FGD paper's baseline does: each normalised by the
# largest node (128 CPUs, 8 GPUs), equal weights. In integers: cpu_milli + 16 * gpu_milli.
GPU_TO_CPU = 16


def _share_slot(fs: FleetState, idx: I64, d: Demand, prefer_low: bool) -> I64:
    """Best-fit (least free that fits) or worst-fit GPU for a share; ties to the lowest slot."""
    free = fs.gpu_free[idx]
    fits = free >= d.gpu_milli
    g = fs.gpu_slots
    slots = np.arange(g, dtype=np.int64)
    key = free * g + slots if prefer_low else (MILLI - free) * g + slots
    best: I64 = np.where(fits, key, INF).argmin(axis=1).astype(np.int64)
    return best


def _left_after(fs: FleetState, idx: I64, d: Demand) -> tuple[I64, I64]:
    gpu_left = fs.gpu_free[idx].sum(axis=1) - d.total_gpu_milli
    cpu_left = fs.cpu_free[idx] - d.cpu_milli
    return cpu_left, gpu_left


def best_fit(fs: FleetState, idx: I64, d: Demand) -> tuple[I64, I64]:
    cpu_left, gpu_left = _left_after(fs, idx, d)
    slot = _share_slot(fs, idx, d, True) if d.is_share else np.full(len(idx), -1, dtype=np.int64)
    return cpu_left + GPU_TO_CPU * gpu_left, slot


def spread(fs: FleetState, idx: I64, d: Demand) -> tuple[I64, I64]:
    cpu_left, gpu_left = _left_after(fs, idx, d)
    slot = _share_slot(fs, idx, d, False) if d.is_share else np.full(len(idx), -1, dtype=np.int64)
    return -(cpu_left + GPU_TO_CPU * gpu_left), slot


def dot_product(fs: FleetState, idx: I64, d: Demand) -> tuple[I64, I64]:
    """Tetris alignment (smaller free . demand is better), normalised by the largest node."""
    gpu_free = fs.gpu_free[idx].sum(axis=1)
    cost = fs.cpu_free[idx] * d.cpu_milli + GPU_TO_CPU * GPU_TO_CPU * gpu_free * d.total_gpu_milli
    slot = _share_slot(fs, idx, d, True) if d.is_share else np.full(len(idx), -1, dtype=np.int64)
    return cost, slot


def packing(fs: FleetState, idx: I64, d: Demand) -> tuple[I64, I64]:
    """GPU packing: share an already used GPU, else use free GPUs of a used node, else open a node."""
    free = fs.gpu_free[idx]
    usable = fs.gpu_usable[idx]
    full = ((free == MILLI) & usable).sum(axis=1)
    node_unused = full == fs.gpu_count[idx]
    cpu_left, _ = _left_after(fs, idx, d)
    slot = np.full(len(idx), -1, dtype=np.int64)
    if d.is_share:
        partial = (free >= d.gpu_milli) & (free < MILLI)
        g = fs.gpu_slots
        key = np.where(partial, free * g + np.arange(g), INF)
        best = key.argmin(axis=1)
        has_partial = partial.any(axis=1)
        part_free = np.take_along_axis(free, best[:, None], axis=1)[:, 0]
        slot = np.where(has_partial, best, _share_slot(fs, idx, d, True)).astype(np.int64)
        tier = np.where(has_partial, 0, np.where(node_unused, 2, 1))
        cost = tier * TIER + np.where(has_partial, part_free, full) * 10_000 + cpu_left // 100
    elif d.gpus:
        tier = np.where(node_unused, 2, 1)
        cost = tier * TIER + (full - d.gpus) * 10_000 + cpu_left // 100
    else:
        cost = cpu_left
    return cost.astype(np.int64), slot


def fragmentation(fs: FleetState, idx: I64, d: Demand, fm: FragModel) -> tuple[I64, I64]:
    """FGD: the increase of the node's expected fragmentation if the replica goes there."""
    g = fs.gpu_free[idx]
    cpu = fs.cpu_free[idx]
    model = fs.model_of[idx]
    cnt, on, total = fm.features(g)
    before = fm.frag_from(cnt, on, total, cpu, model)
    cpu_after = cpu - d.cpu_milli
    if d.is_share:
        c, slots = g.shape
        u = d.gpu_milli
        a2 = g - u
        thr = fm.thresholds
        d_cnt = (a2[..., None] >= thr).astype(np.int64) - (g[..., None] >= thr)
        d_on = a2[..., None] * (a2[..., None] >= thr) - g[..., None] * (g[..., None] >= thr)
        cnt_after = (cnt[:, None, :] + d_cnt).reshape(c * slots, -1)
        on_after = (on[:, None, :] + d_on).reshape(c * slots, -1)
        total_after = np.repeat(total - u, slots)
        after = fm.frag_from(
            cnt_after, on_after, total_after, np.repeat(cpu_after, slots), np.repeat(model, slots)
        ).reshape(c, slots)
        after = np.where(g >= u, after, INF)
        best = after.argmin(axis=1).astype(np.int64)
        cost = np.take_along_axis(after, best[:, None], axis=1)[:, 0] - before
        return cost, best
    if d.gpus:
        n = d.gpus
        after = fm.frag_from(cnt - n, on - n * MILLI, total - n * MILLI, cpu_after, model)
    else:
        after = fm.frag_from(cnt, on, total, cpu_after, model)
    return after - before, np.full(len(idx), -1, dtype=np.int64)


# Boundaries of the FGD authors' score floor(100 * sigmoid(-increase / 1000 milli-GPU)): score >= k
# exactly when the expected increase is at most SIGMOID_BOUNDS[k - 1] milli-GPU (k = 1..99).
SIGMOID_BOUNDS = (
    4595, 3892, 3476, 3178, 2944, 2752, 2587, 2442, 2314, 2197, 2091, 1992, 1901, 1815, 1735, 1658, 1586,
    1516, 1450, 1386, 1325, 1266, 1208, 1153, 1099, 1046, 995, 944, 895, 847, 800, 754, 708, 663, 619, 575,
    532, 490, 447, 405, 364, 323, 282, 241, 201, 160, 120, 80, 40, 0, -40, -80, -120, -160, -201, -241,
    -282, -323, -364, -405, -447, -490, -532, -575, -619, -663, -708, -754, -800, -847, -895, -944, -995,
    -1046, -1099, -1153, -1208, -1266, -1325, -1386, -1450, -1516, -1586, -1658, -1735, -1815, -1901,
    -1992, -2091, -2197, -2314, -2442, -2587, -2752, -2944, -3178, -3476, -3892, -4595,
)  # fmt: skip
_BOUNDS_ASC = np.array(SIGMOID_BOUNDS[::-1], dtype=np.int64)


def fragmentation_paper(fs: FleetState, idx: I64, d: Demand, fm: FragModel) -> tuple[I64, I64]:
    """The authors' FGD: the same increase, quantised to their 0..100 score (cost = -score)."""
    inc, slot = fragmentation(fs, idx, d, fm)
    score = len(_BOUNDS_ASC) - np.searchsorted(_BOUNDS_ASC * fm.total_weight, inc, side="left")
    return -score.astype(np.int64), slot


__all__ = ["INF", "best_fit", "dot_product", "fragmentation", "fragmentation_paper", "packing", "spread"]
