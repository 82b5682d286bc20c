"""Node scoring: the cost of putting one replica on each candidate node, and the GPU inside it.

Called by the ``Placer``. Every policy returns, for the candidate nodes it is given (all feasible), an
integer cost (lower is better) and, for a GPU-share replica, the GPU slot it would use (-1 otherwise;
whole GPUs are taken from the lowest free slots). One implementation per policy, shared by the cycle, the
simulator and the benchmark. ``fragmentation_model_aware`` (with ``cpu_only_tie``) is our policy;
``fragmentation_paper``, ``packing``, ``dot_product`` and ``clustering`` follow the FGD authors' plugins.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from services.scheduler.core.policy.fleet import Demand, FleetState
from services.scheduler.core.policy.fragmentation import FragModel
from services.scheduler.core.policy.model import MILLI

I64 = npt.NDArray[np.int64]
INF = np.int64(2**62)
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


# The FGD authors' baselines (their Kubernetes score plugins, github.com/hkust-adsl/kubernetes-scheduler-
# simulator, pkg/simulator/plugin) score 0..100, higher is better, in integer steps; equal scores are then
# broken by a fixed node order. We return cost = -score and let the placer's stable rank break the ties:
# the coarse integer steps are part of those policies' behaviour (ties spread or consolidate load).
MAX_SCORE = 100
MAX_SPEC_CPU = 128_000  # the authors' normalisation constants (largest node: 128 CPUs, 8 GPUs)
MAX_SPEC_GPU = 8_000


def _none(n: int) -> I64:
    return np.full(n, -1, dtype=np.int64)


def dot_product(fs: FleetState, idx: I64, d: Demand) -> tuple[I64, I64]:
    """The authors' DotProd (Tetris alignment, "merge" GPU dimension, "max" normalisation).

    score = floor(100 * (1 - (cpu_free/128k * cpu/128k + gpu_free/8k * gpu/8k) / 2)): the smaller the
    alignment of free capacity with the demand, the higher; GPU shares take the tightest GPU that fits.
    """
    gpu_free = fs.gpu_free[idx].sum(axis=1)
    num = fs.cpu_free[idx] * d.cpu_milli + GPU_TO_CPU * GPU_TO_CPU * gpu_free * d.total_gpu_milli
    den = MAX_SPEC_CPU * MAX_SPEC_CPU
    score = (MAX_SCORE * den - MAX_SCORE // 2 * num) // den
    slot = _share_slot(fs, idx, d, True) if d.is_share else _none(len(idx))
    return -score.astype(np.int64), slot


def packing(fs: FleetState, idx: I64, d: Demand) -> tuple[I64, I64]:
    """The authors' GPU Packing: share a used GPU, else use free GPUs of a used node, else open a node.

    Scores: sharing a used GPU 100 - (its free milli // 100) (at least 50); whole free GPUs of a used node
    50 - GPUs taken (at least 33); a node with every GPU free max(33 - its GPUs, its GPUs); CPU-only replicas
    score 0 everywhere (the stable rank decides). Shares take the tightest GPU that fits.
    """
    n = len(idx)
    slot = _none(n)
    if not (d.gpus or d.gpu_milli):
        return np.zeros(n, dtype=np.int64), slot
    free = fs.gpu_free[idx]
    full = ((free == MILLI) & fs.gpu_usable[idx]).sum(axis=1)
    fresh = full == fs.gpu_count[idx]
    open_node = np.maximum(MAX_SCORE // 3 - full, full)
    if d.gpus:
        used_node = np.full(n, max(MAX_SCORE // 2 - d.gpus, MAX_SCORE // 3), dtype=np.int64)
    else:
        slot = _share_slot(fs, idx, d, True)
        left = np.take_along_axis(free, slot[:, None], axis=1)[:, 0]
        shared = np.maximum(MAX_SCORE - left * 100 // MILLI // 10, MAX_SCORE // 2)
        used_node = np.where(left == MILLI, max(MAX_SCORE // 2 - 1, MAX_SCORE // 3), shared)
    score = np.where(fresh, open_node, used_node)
    return -score.astype(np.int64), slot


def clustering(fs: FleetState, idx: I64, d: Demand) -> tuple[I64, I64]:
    """The authors' GPU Clustering: keep replicas of one GPU class (share, 1, 2, 4, 8 GPUs) together.

    Per node, the classes of the GPU replicas placed on it (``FleetState.pod_class``) and its allocated GPU
    (0..25 points, the fuller the more): +75 if the node holds only this class, +50 if this class among
    others, +25 if it holds no GPU replica, +0 if only other classes. CPU-only replicas score 0 everywhere.
    """
    n = len(idx)
    slot = _none(n)
    if not (d.gpus or d.gpu_milli):
        return np.zeros(n, dtype=np.int64), slot
    if d.is_share:
        slot = _share_slot(fs, idx, d, True)
    classes = fs.pod_class[idx]
    mine = classes[:, min(d.gpus, classes.shape[1] - 1)] > 0
    kinds = (classes > 0).sum(axis=1)
    quarter = MAX_SCORE // 4
    fill = np.maximum(0, quarter * (MAX_SPEC_GPU - fs.gpu_free[idx].sum(axis=1)) // MAX_SPEC_GPU)
    band = np.where(mine, np.where(kinds == 1, 3, 2), np.where(kinds == 0, 1, 0))
    return -(fill + band * quarter).astype(np.int64), slot


def _share_after(fs: FleetState, idx: I64, d: Demand, fm: FragModel) -> tuple[I64, I64]:
    """For a GPU share: F before, and F after the share goes to each GPU slot (``INF`` where it cannot)."""
    g = fs.gpu_free[idx]
    cpu = fs.cpu_free[idx]
    model = fs.model_of[idx]
    cnt, on, total = fm.features(g)
    before = fm.frag_from(cnt, on, total, cpu, model)
    c, slots = g.shape
    u = d.gpu_milli
    cnt_after, on_after = fm.share_features(g, cnt, on, u)
    total_after = np.repeat(total - u, slots)
    after = fm.frag_from(
        cnt_after, on_after, total_after, np.repeat(cpu - d.cpu_milli, slots), np.repeat(model, slots)
    ).reshape(c, slots)
    return before, np.where(g >= u, after, INF)


def fragmentation(fs: FleetState, idx: I64, d: Demand, fm: FragModel) -> tuple[I64, I64]:
    """FGD: the increase of the node's expected fragmentation if the replica goes there.

    A share takes the GPU that gives the lowest fragmentation after (ties: the lowest slot).
    """
    if d.is_share:
        before, after = _share_after(fs, idx, d, fm)
        best = after.argmin(axis=1).astype(np.int64)
        cost = np.take_along_axis(after, best[:, None], axis=1)[:, 0] - before
        return cost, best
    g = fs.gpu_free[idx]
    cpu = fs.cpu_free[idx]
    model = fs.model_of[idx]
    cnt, on, total = fm.features(g)
    before = fm.frag_from(cnt, on, total, cpu, model)
    cpu_after = cpu - d.cpu_milli
    if d.gpus:
        n = d.gpus
        after = fm.frag_from(cnt - n, on - n * MILLI, total - n * MILLI, cpu_after, model)
    else:
        after = fm.frag_from(cnt, on, total, cpu_after, model)
    return after - before, _none(len(idx))


def fragmentation_model_aware(fs: FleetState, idx: I64, d: Demand, fm: FragModel) -> tuple[I64, I64]:
    """Our FGD's primary cost: the increase measured against the shapes that can run on each node's model
    (see ``fragmentation``'s module); identical to the paper's increase when no shape names a model."""
    inc, slot = fragmentation(fs, idx, d, fm)
    return fm.model_aware_increase(inc, fs.model_of[idx], d.total_gpu_milli), slot


def fragmentation_model_aware_one(fs: FleetState, i: int, d: Demand, fm: FragModel) -> tuple[int, int]:
    """``fragmentation_model_aware`` of one node (a feasible one), in Python ints: the same numbers.
    A share only changes its own slot's contribution to the features, so each slot's "after" is the
    "before" features patched by that slot."""
    g: list[int] = fs.gpu_free[i].tolist()
    cpu = int(fs.cpu_free[i])
    model = int(fs.model_of[i])
    cnt, on, total = fm.features_one(g)
    before = fm.frag_one(cnt, on, total, cpu, model)
    slot = -1
    if d.is_share:
        u = d.gpu_milli
        thresholds = fm.thresholds_list
        cpu_after = cpu - d.cpu_milli
        best = None
        tried: set[int] = set()
        for s, free in enumerate(g):
            # Slots with the same free milli give the same "after": the first (lowest) stands for them all.
            if free < u or free in tried:
                continue
            tried.add(free)
            left = free - u
            c2, o2 = list(cnt), list(on)
            for j, t in enumerate(thresholds):
                if free < t:
                    break  # the thresholds ascend, and left < free
                c2[j] -= 1
                o2[j] -= free
                if left >= t:
                    c2[j] += 1
                    o2[j] += left
            after = fm.frag_one(c2, o2, total - u, cpu_after, model)
            if best is None or after < best:
                best, slot = after, s
        assert best is not None, "a feasible node has a GPU the share fits"
        inc = best - before
    elif d.gpus:
        n = d.gpus
        after = fm.frag_one(
            [c - n for c in cnt], [o - n * MILLI for o in on], total - n * MILLI, cpu - d.cpu_milli, model
        )
        inc = after - before
    else:
        inc = fm.frag_one(cnt, on, total, cpu - d.cpu_milli, model) - before
    wm = fm.model_weight_list[model]
    w = fm.total_weight
    return (inc + (w - wm) * d.total_gpu_milli) * w // wm, slot


def cpu_only_tie(fs: FleetState, idx: I64) -> I64:
    """Secondary key of our FGD for CPU-only replicas: the node's free GPU (milli), the fewer the better.

    Among nodes about equally good for fragmentation, a CPU-only replica goes where its CPU is least needed
    by GPU work: nodes without GPUs, then nodes whose GPUs are all taken, then the least free.
    """
    out: I64 = fs.gpu_free[idx].sum(axis=1)
    return out


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


def paper_score(inc: I64, fm: FragModel) -> I64:
    """The authors' score floor(100 * sigmoid(-increase / 1000 milli-GPU)) of increases in W units."""
    out: I64 = (len(_BOUNDS_ASC) - np.searchsorted(_BOUNDS_ASC * fm.total_weight, inc, side="left")).astype(np.int64)
    return out


def fragmentation_paper(fs: FleetState, idx: I64, d: Demand, fm: FragModel) -> tuple[I64, I64]:
    """The authors' FGD: the same increase, quantised to their 0..100 score (cost = -score).

    As in their plugin, a share takes the first GPU (lowest slot) with the highest quantised score.
    """
    if d.is_share:
        before, after = _share_after(fs, idx, d, fm)
        score = np.where(after < INF, paper_score(after - before[:, None], fm), -1)
        best = score.argmax(axis=1).astype(np.int64)
        return -np.take_along_axis(score, best[:, None], axis=1)[:, 0], best
    inc, slot = fragmentation(fs, idx, d, fm)
    return -paper_score(inc, fm), slot


__all__ = [
    "INF",
    "best_fit",
    "clustering",
    "cpu_only_tie",
    "dot_product",
    "fragmentation",
    "fragmentation_model_aware",
    "fragmentation_model_aware_one",
    "fragmentation_paper",
    "packing",
    "paper_score",
    "spread",
]
