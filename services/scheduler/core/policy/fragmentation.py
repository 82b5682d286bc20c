"""GPU fragmentation measured against a target workload (the FGD paper's definition), in integers.

Called by the node scoring of the fragmentation-aware policy, by the simulator's report and by the
cycle's explanations. For a node and one typical task shape k: if the node can host the shape (GPU model
accessible, enough GPUs with at least the shape's per-GPU share free, enough CPU), the fragment is the
free GPU capacity on GPUs too small for the shape; otherwise all of the node's free GPU capacity is a
fragment (CPU-only shapes use no GPU, so for them all free GPU capacity counts too, as in the paper).
A node's fragmentation is the shape-weighted sum. With integer weights ``w_k`` (counts) this is

    F(node) = W * free_gpu(node) - sum_k w_k * fits_k(node) * free_on_gpus_at_least(share_k)

in milli-GPU x weight units (divide by W = sum of weights for expected milli-GPU). No floats.

Model-aware variant (used by our placement policy ``fgd``; the reported measure stays the paper's): on a
node of GPU model m, the shapes that can never run there (their model list excludes m) are left out and
the others renormalised, so that a placement is judged against the work that could actually use the node:

    F_m(node) = W_m * free_gpu(node) - sum_k w_k * fits_k(node) * free_on_gpus_at_least(share_k)

with W_m = W - (weight of the shapes excluded on m). A node's model never changes, so F_m = F - (W - W_m)
* free_gpu, and the increase follows from the paper's in O(1): dF_m = dF + (W - W_m) * taken_milli, scaled
by W / W_m to stay comparable across models.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from services.scheduler.core.policy.model import MILLI, Shape

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


def typical_shapes(samples: Iterable[Shape], coverage_pct: int = 95, fillers: bool = False) -> tuple[Shape, ...]:
    """The most common shapes that together cover ``coverage_pct`` % of the samples, with counts
    (and, with ``fillers``, the ``share_fillers`` of the rest).

    Samples' own weights are summed; ties in popularity are broken by the shape itself (stable).
    """
    counts: Counter[tuple[int, int, int, tuple[str, ...]]] = Counter()
    for s in samples:
        counts[(s.cpu_milli, s.gpu_milli if s.gpus else 0, s.gpus, tuple(sorted(s.models)))] += s.weight
    return typical_shapes_from_counts(counts, coverage_pct, fillers)


def typical_shapes_from_counts(
    counts: Mapping[tuple[int, int, int, tuple[str, ...]], int], coverage_pct: int = 95, fillers: bool = False
) -> tuple[Shape, ...]:
    """``typical_shapes`` from weights already summed per (cpu, milli-GPU, GPUs, models)."""
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out: list[Shape] = []
    covered = 0
    for (cpu, milli, gpus, models), count in ranked:
        if covered * 100 >= coverage_pct * total:
            break
        out.append(Shape(cpu_milli=cpu, gpu_milli=milli, gpus=gpus, models=models, weight=count))
        covered += count
    if fillers:
        out.extend(share_fillers(counts, out))
    return tuple(out)


def share_fillers(
    counts: Mapping[tuple[int, int, int, tuple[str, ...]], int], typical: Sequence[Shape]
) -> tuple[Shape, ...]:
    """One shape per GPU-share size smaller than every typical GPU shape's, weighted by its count.

    The coverage cut drops the rare sizes, and among them the small shares are the only work that can use
    a hole smaller than every typical ask (the 190 milli-GPU beside an 810 share): without them every
    such hole is equally dead, so a share may as well leave 80 milli-GPU no one can use as 100 a rare
    100-milli share could. (A left-out size above the smallest typical one adds little: a hole it fits,
    a typical share fits too, and each size is one more threshold to score.) The filler stands for every
    share of its size: the least CPU any of them asks, and any GPU model unless each of them names models
    (then the models they name).
    """
    below = min((s.gpu_milli for s in typical if s.gpus > 0 and s.gpu_milli > 0), default=MILLI)
    cpu_of: dict[int, int] = {}
    weight_of: dict[int, int] = {}
    models_of: dict[int, set[str] | None] = {}
    for (cpu, milli, gpus, models), count in sorted(counts.items()):
        if gpus != 1 or not 0 < milli < below or count <= 0:
            continue
        cpu_of[milli] = min(cpu, cpu_of.get(milli, cpu))
        weight_of[milli] = weight_of.get(milli, 0) + count
        named = models_of.get(milli, set())
        models_of[milli] = None if named is None or not models else named | set(models)
    return tuple(
        Shape(
            cpu_milli=cpu_of[milli],
            gpu_milli=milli,
            gpus=1,
            models=tuple(sorted(models_of[milli] or ())),
            weight=weight_of[milli],
        )
        for milli in sorted(weight_of)
    )


class FragModel:
    """Typical shapes compiled against one fleet's GPU-model vocabulary."""

    def __init__(self, shapes: Sequence[Shape], fleet_models: Sequence[str]) -> None:
        if not shapes:
            raise ValueError("fragmentation needs at least one typical shape")
        self.shapes = tuple(shapes)
        self.total_weight = int(sum(s.weight for s in shapes))
        gpu_shapes = [s for s in shapes if s.gpus > 0 and s.gpu_milli > 0]
        self.thresholds: I64 = np.array(sorted({s.gpu_milli for s in gpu_shapes}) or [1000], dtype=np.int64)
        tpos = {int(t): i for i, t in enumerate(self.thresholds)}
        self.t_idx: I64 = np.array([tpos[s.gpu_milli] for s in gpu_shapes], dtype=np.int64)
        self.num: I64 = np.array([s.gpus for s in gpu_shapes], dtype=np.int64)
        self.cpu: I64 = np.array([s.cpu_milli for s in gpu_shapes], dtype=np.int64)
        self.weight: I64 = np.array([s.weight for s in gpu_shapes], dtype=np.int64)
        models = list(fleet_models)
        access = np.zeros((len(models) + 1, len(gpu_shapes)), dtype=np.bool_)  # last row: no GPU model
        for k, s in enumerate(gpu_shapes):
            for m, name in enumerate(models):
                access[m, k] = not s.models or name in s.models
        self.access: B = access
        # W_m per model row (last row: nodes without GPUs); at least 1 so that it can divide.
        excluded = ((~access).astype(np.int64) * self.weight).sum(axis=1)
        self.model_weight: I64 = np.maximum(1, self.total_weight - excluded).astype(np.int64)
        # What a node's score depends on besides the weights: scores cached across cycles stay valid while
        # it holds (the weights follow the running jobs, so they change nearly every cycle).
        self.signature: tuple[object, ...] = (
            tuple(self.thresholds.tolist()),
            tuple(self.t_idx.tolist()),
            tuple(self.num.tolist()),
            tuple(self.cpu.tolist()),
            access.tobytes(),
            access.shape,
        )
        # The same, as plain ints for ``frag_one``: per model row, the GPU shapes allowed there as
        # (threshold position, GPUs, CPU, weight).
        self.thresholds_list: tuple[int, ...] = tuple(self.thresholds.tolist())
        self.model_weight_list: tuple[int, ...] = tuple(self.model_weight.tolist())
        self.shapes_of_model: tuple[tuple[tuple[int, int, int, int], ...], ...] = tuple(
            tuple(
                (int(self.t_idx[k]), int(self.num[k]), int(self.cpu[k]), int(self.weight[k]))
                for k in range(len(gpu_shapes))
                if access[m, k]
            )
            for m in range(len(models) + 1)
        )

    def features(self, gpu_free: I64) -> tuple[I64, I64, I64]:
        """Per state: GPUs with at least each threshold free, milli-GPU on them, total free."""
        ge = gpu_free[..., None] >= self.thresholds
        cnt = ge.sum(axis=-2, dtype=np.int64)
        on = (gpu_free[..., None] * ge).sum(axis=-2, dtype=np.int64)
        return cnt, on, gpu_free.sum(axis=-1, dtype=np.int64)

    def parts(self, cnt: I64, on: I64, cpu_free: I64, model_of: I64) -> I64:
        """Per state and GPU shape, what the shape could use there (0 where it cannot run): ``frag_from``
        is ``W * total - parts @ weight``, and the parts do not depend on the weights."""
        fits = self.access[model_of] & (cnt[:, self.t_idx] >= self.num) & (cpu_free[:, None] >= self.cpu)
        out: I64 = on[:, self.t_idx] * fits
        return out

    def frag_from(self, cnt: I64, on: I64, total: I64, cpu_free: I64, model_of: I64) -> I64:
        """F for states given by their features (arrays of equal leading shape; 2-D for cnt/on)."""
        out: I64 = self.total_weight * total - self.parts(cnt, on, cpu_free, model_of) @ self.weight
        return out

    def share_features(self, gpu_free: I64, cnt: I64, on: I64, share: int) -> tuple[I64, I64]:
        """The features after a share of ``share`` milli-GPU goes to each slot in turn, one row per
        (state, slot): a slot's change only moves its own contribution to ``cnt`` and ``on``."""
        g = gpu_free
        rows, slots = g.shape
        left = g - share
        thr = self.thresholds
        now = left[..., None] >= thr
        was = g[..., None] >= thr
        d_cnt = now.astype(np.int64) - was
        d_on = left[..., None] * now - g[..., None] * was
        cnt_after = (cnt[:, None, :] + d_cnt).reshape(rows * slots, -1)
        on_after = (on[:, None, :] + d_on).reshape(rows * slots, -1)
        return cnt_after, on_after

    def frag_one(self, cnt: Sequence[int], on: Sequence[int], total: int, cpu_free: int, model: int) -> int:
        """``frag_from`` of one state, in Python ints (``model`` -1: a node without GPUs). A placement
        changes one node: for it, this costs a tenth of the array call's fixed overhead."""
        usable = 0
        for t, num, cpu, weight in self.shapes_of_model[model]:
            if cnt[t] >= num and cpu_free >= cpu:
                usable += on[t] * weight
        return self.total_weight * total - usable

    def features_one(self, gpu_free: Sequence[int]) -> tuple[list[int], list[int], int]:
        """``features`` of one node's free milli-GPU per slot."""
        cnt = [0] * len(self.thresholds_list)
        on = [0] * len(self.thresholds_list)
        for free in gpu_free:
            for j, t in enumerate(self.thresholds_list):
                if free < t:
                    break  # the thresholds ascend
                cnt[j] += 1
                on[j] += free
        return cnt, on, sum(gpu_free)

    def model_aware_increase(self, inc: I64, model_of: I64, taken_milli: int) -> I64:
        """The paper's increase ``inc`` of nodes of models ``model_of`` turned into the model-aware one.

        ``taken_milli`` is the GPU the placement takes from the node. Integer, in the same W units as ``inc``
        (floor division by W_m; exact when every shape can run on every model, as then W_m = W).
        """
        wm = self.model_weight[model_of]
        out: I64 = (inc + (self.total_weight - wm) * taken_milli) * self.total_weight // wm
        return out

    def frag(self, gpu_free: I64, cpu_free: I64, model_of: I64) -> I64:
        cnt, on, total = self.features(gpu_free)
        return self.frag_from(cnt, on, total, cpu_free, model_of)


__all__ = ["FragModel", "share_fillers", "typical_shapes", "typical_shapes_from_counts"]
