"""Scores of our fragmentation policy kept from one cycle to the next, for the nodes that did not change.

Called by the ``Placer`` when the cycle memo lends it a cache. A cycle's placer scores every node for each
shape it places: at 10,000 nodes that cost 6 ms for whole GPUs and 22 ms for GPU shares, per shape and
per cycle, though a cycle changes a few nodes. What cannot be kept is the score itself: it weighs each
typical shape by how many such jobs run, which changes nearly every cycle. So the cache keeps what does
not depend on the weights: per node, whether the replica fits, and what each typical shape could use
there before and after the placement (per GPU slot for a share); a cycle turns them into scores with
its weights in a few array operations over the fleet, and rescores only the nodes whose row changed
(their stamp, see ``fleet.STAMP``). The keys are exactly those of the placer's own refresh.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from services.scheduler.core.policy.fleet import STAMP, Demand, FleetState
from services.scheduler.core.policy.fragmentation import FragModel
from services.scheduler.core.policy.model import MILLI
from services.scheduler.core.policy.scoring import INF

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

MAX_CACHED = 32  # demands x shape sets kept
MAX_BYTES = 128 << 20  # and their arrays' size: a share's at 10,000 nodes and 10 shapes is 6.5 MB


class ScoreCache:
    """One demand's weight-free parts of the score of every node, at the node's stamp."""

    def __init__(self, fs: FleetState, d: Demand, fm: FragModel) -> None:
        n, k = fs.size, len(fm.weight)
        self.stamp: I64 = np.full(n, -1, dtype=np.int64)
        self.feasible: B = np.zeros(n, dtype=np.bool_)
        self.total: I64 = np.zeros(n, dtype=np.int64)
        self.before: I64 = np.zeros((n, k), dtype=np.int64)
        self.after: I64 = np.zeros((n, fs.gpu_slots, k) if d.is_share else (n, k), dtype=np.int64)
        self.fits: B = np.zeros((n, fs.gpu_slots), dtype=np.bool_)  # a share: the slots it fits

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.stamp, self.feasible, self.total, self.before, self.after, self.fits))

    def refresh(self, fs: FleetState, d: Demand, fm: FragModel) -> None:
        """Recompute the rows whose stamp changed. A row this cycle changed carries no stamp and is left
        to the placer: the next cycle's copy starts it from the same stamp again, so the same version
        could then name another state."""
        version = fs.version
        rows = np.flatnonzero((version != self.stamp) & (version % STAMP == 0))
        if not rows.size:
            return
        self.stamp[rows] = version[rows]
        self.feasible[rows] = fs.feasible(d, rows)
        g = fs.gpu_free[rows]
        cpu = fs.cpu_free[rows]
        model = fs.model_of[rows]
        cnt, on, total = fm.features(g)
        self.total[rows] = total
        self.before[rows] = fm.parts(cnt, on, cpu, model)
        cpu_after = cpu - d.cpu_milli
        if d.is_share:
            r, slots = g.shape
            u = d.gpu_milli
            cnt_after, on_after = fm.share_features(g, cnt, on, u)
            parts = fm.parts(cnt_after, on_after, np.repeat(cpu_after, slots), np.repeat(model, slots))
            self.after[rows] = parts.reshape(r, slots, -1)
            self.fits[rows] = g >= u
        elif d.gpus:
            n = d.gpus
            self.after[rows] = fm.parts(cnt - n, on - n * MILLI, cpu_after, model)
        else:
            self.after[rows] = fm.parts(cnt, on, cpu_after, model)

    def scores(self, fs: FleetState, d: Demand, fm: FragModel) -> tuple[I64, I64, I64]:
        """The nodes at their cached stamp where the replica fits, their model-aware cost and GPU slot."""
        idx = np.flatnonzero((self.stamp == fs.version) & self.feasible)
        w = fm.weight
        big = fm.total_weight
        total = self.total
        # Over every row, then taken at ``idx``: cheaper than gathering the parts first (most rows are in).
        # einsum, not ``@``: numpy's integer matmul is five times slower here.
        before = big * total - np.einsum("nk,k->n", self.before, w)
        if d.is_share:
            after = big * (total - d.gpu_milli)[:, None] - np.einsum("nsk,k->ns", self.after, w)
            after = np.where(self.fits, after, INF)
            slot: I64 = after.argmin(axis=1).astype(np.int64)[idx]
            inc = after[idx, slot] - before[idx]
        else:
            taken = d.gpus * MILLI
            inc = (big * (total - taken) - np.einsum("nk,k->n", self.after, w) - before)[idx]
            slot = np.full(idx.size, -1, dtype=np.int64)
        cost = fm.model_aware_increase(inc, fs.model_of[idx], d.total_gpu_milli)
        return idx, cost, slot


__all__ = ["MAX_BYTES", "MAX_CACHED", "ScoreCache"]
