"""The incremental placer: the best node (and GPUs) for one replica, in microseconds.

Called by the cycle for every replica it places, by the simulator's hot loop and by the benchmark: the
same code everywhere. Scores of a node depend only on that node's state and the replica's shape, so the
placer keeps, per distinct ``Demand``, an array of keys over all nodes and recomputes only the nodes
whose version changed since (a placement touches one node). A key is ``cost * N + tie-break rank``: one
``argmin`` finds the lowest cost and breaks ties by a stable rank, never by chance or array accident.

Our fragmentation policy (``fgd``) chooses in three steps: the nodes whose model-aware fragmentation
increase is within a window of the best (60 expected milli-GPU for whole-GPU and CPU-only replicas, exact
for GPU shares) are equally good; among them a CPU-only replica prefers the node with the least free GPU
(``scoring.cpu_only_tie``, cached like the keys); then the stable rank decides, which consolidates load.

NPUs, in a fleet that has any, add one rule to every policy's cost: a replica that asks none pays
``NPU_GUARD`` per free NPU of a node (CPU and GPU work goes to nodes with free NPUs only when no other
node fits, as CPU-only work is kept off free GPUs, so NPU nodes keep the CPU and memory their NPUs need);
a replica that asks NPUs pays ``NPU_FIT`` per free NPU it would leave on the node (best fit: whole NPU
nodes stay free for larger replicas) and the degraded-card penalty per degraded NPU it would have to take.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from services.scheduler.core.policy import scoring
from services.scheduler.core.policy.fleet import Demand, FleetState
from services.scheduler.core.policy.fragmentation import FragModel
from services.scheduler.core.policy.model import NodePolicy, ReplicaPlacement
from services.scheduler.core.policy.score_cache import MAX_BYTES, MAX_CACHED, ScoreCache

I64 = npt.NDArray[np.int64]
INF = scoring.INF
MASKED = 1 << 40  # an ``extra`` cost at or above this excludes the node
ScoreFn = Callable[[FleetState, I64, Demand], tuple[I64, I64]]
MAX_CACHED_SHAPES = 2048
SCALAR_MAX = 4  # dirty nodes up to which a refresh of our policy goes node by node (see _refresh_scalar)
NPU_GUARD = 1_000_000
"""Cost per free NPU of a node for a replica that asks no NPU: above any fragmentation window and any
GPU-scoring difference between nodes, so such a replica takes a node with free NPUs only when no other fits."""
NPU_FIT = 1_000
"""Cost per free NPU a replica asking NPUs would leave on the node (best fit among NPU nodes)."""


@dataclass(frozen=True, slots=True)
class Choice:
    node: int  # position in the fleet's canonical order
    slots: tuple[int, ...]  # GPU slots inside the node
    cost: int
    npu_slots: tuple[int, ...] = ()  # NPU slots inside the node


@dataclass(slots=True)
class _Entry:
    key: I64
    slot: I64
    seen: I64  # node versions the keys were computed at
    tie: I64 | None = None  # secondary key (before the rank) inside the window, where the policy has one


class Placer:
    def __init__(
        self,
        fleet: FleetState,
        policy: NodePolicy,
        frag: FragModel | None = None,
        seed: int = 0,
        degraded_penalty: int = 1_000_000,
        frag_window_milli: int = 60,
        frag_share_window_milli: int = 0,
        scores: dict[tuple[Demand, tuple[object, ...]], ScoreCache] | None = None,
    ) -> None:
        if policy in (NodePolicy.FRAGMENTATION, NodePolicy.FGD_PAPER) and frag is None:
            raise ValueError("the fragmentation policy needs typical shapes")
        self.fleet = fleet
        self.policy = policy
        self.frag = frag
        self.degraded_penalty = degraded_penalty
        self.rng = np.random.Generator(np.random.PCG64(seed))
        # Windows (in cost units) within which candidates count as equally good; 0: plain argmin.
        ours = policy is NodePolicy.FRAGMENTATION and frag is not None
        weight = frag.total_weight if frag is not None else 0
        self.window = frag_window_milli * weight if ours else 0
        self.share_window = frag_share_window_milli * weight if ours else 0
        self._cpu_tie = ours
        self._cache: dict[Demand, _Entry] = {}
        self._score: ScoreFn = self._score_fn()
        # Lent by the cycle memo (our policy only): weight-free parts of the scores, kept across cycles.
        self._scores = scores if policy is NodePolicy.FRAGMENTATION and frag is not None else None

    def _score_fn(self) -> ScoreFn:
        p = self.policy
        if p is NodePolicy.FRAGMENTATION:
            fm = self.frag
            assert fm is not None
            return lambda fs, idx, d: scoring.fragmentation_model_aware(fs, idx, d, fm)
        if p is NodePolicy.FGD_PAPER:
            fmp = self.frag
            assert fmp is not None
            return lambda fs, idx, d: scoring.fragmentation_paper(fs, idx, d, fmp)
        table: dict[NodePolicy, ScoreFn] = {
            NodePolicy.BEST_FIT: scoring.best_fit,
            NodePolicy.PACKING: scoring.packing,
            NodePolicy.CLUSTERING: scoring.clustering,
            NodePolicy.SPREAD: scoring.spread,
            NodePolicy.DOT_PRODUCT: scoring.dot_product,
            NodePolicy.RANDOM: lambda fs, idx, d: (
                np.zeros(len(idx), dtype=np.int64),
                np.full(len(idx), -1, dtype=np.int64),
            ),
        }
        return table[p]

    def keys(self, d: Demand) -> I64:
        """Key per node for one replica of ``d`` (``INF`` where it does not fit). Read-only view."""
        return self._entry(d).key

    def _entry(self, d: Demand) -> _Entry:
        fs = self.fleet
        e = self._cache.get(d)
        if e is None:
            if len(self._cache) >= MAX_CACHED_SHAPES:
                self._cache.clear()
            n = fs.size
            e = _Entry(
                key=np.full(n, INF, dtype=np.int64),
                slot=np.full(n, -1, dtype=np.int64),
                seen=np.full(n, -1, dtype=np.int64),
                tie=np.zeros(n, dtype=np.int64) if self._cpu_tie and not (d.gpus or d.gpu_milli) else None,
            )
            self._cache[d] = e
            if self._scores is not None:
                self._from_scores(e, d, self._scores)
        dirty = np.flatnonzero(e.seen != fs.version)
        if dirty.size:
            self._refresh(e, d, dirty)
        return e

    def _refresh(self, e: _Entry, d: Demand, dirty: I64) -> None:
        if dirty.size <= SCALAR_MAX and self.policy is NodePolicy.FRAGMENTATION:
            self._refresh_scalar(e, d, dirty.tolist())
            return
        fs = self.fleet
        e.seen[dirty] = fs.version[dirty]
        e.key[dirty] = INF
        cand = dirty[fs.feasible(d, dirty)]
        if not cand.size:
            return
        cost, slot = self._score(fs, cand, d)
        cost = cost + self._degraded_cost(cand, d, slot)
        if fs.has_npus:
            cost = cost + self._npu_cost(cand, d)
        e.key[cand] = cost * fs.size + fs.tiebreak[cand]
        e.slot[cand] = slot
        if e.tie is not None:
            e.tie[cand] = scoring.cpu_only_tie(fs, cand)

    def _from_scores(self, e: _Entry, d: Demand, kept: dict[tuple[Demand, tuple[object, ...]], ScoreCache]) -> None:
        """A new entry's keys from the scores kept across cycles, for every node this cycle has not
        touched yet (the rest are refreshed as usual)."""
        fs, fm = self.fleet, self.frag
        assert fm is not None
        name = (d, fm.signature)
        cache = kept.pop(name, None) or ScoreCache(fs, d, fm)
        held = sum(c.nbytes for c in kept.values()) + cache.nbytes
        while kept and (len(kept) >= MAX_CACHED or held > MAX_BYTES):
            held -= kept.pop(next(iter(kept))).nbytes  # the least recently used
        kept[name] = cache
        cache.refresh(fs, d, fm)
        valid = cache.stamp == fs.version
        e.seen[valid] = fs.version[valid]
        idx, cost, slot = cache.scores(fs, d, fm)
        if idx.size:
            cost = cost + self._degraded_cost(idx, d, slot)
            if fs.has_npus:
                cost = cost + self._npu_cost(idx, d)
            e.key[idx] = cost * fs.size + fs.tiebreak[idx]
            e.slot[idx] = slot
            if e.tie is not None:
                e.tie[idx] = cache.total[idx]

    def _refresh_scalar(self, e: _Entry, d: Demand, dirty: list[int]) -> None:
        """``_refresh`` for a few nodes of our policy, node by node in Python ints: the same keys, without
        the fixed cost of some forty array operations (a placement dirties one node)."""
        fs, fm = self.fleet, self.frag
        assert fm is not None
        n = fs.size
        for i in dirty:
            e.seen[i] = fs.version[i]
            if not fs.feasible_one(d, i):
                e.key[i] = INF
                continue
            cost, slot = scoring.fragmentation_model_aware_one(fs, i, d, fm)
            if d.gpus or d.gpu_milli:
                cost += self._degraded_one(i, d, slot)
            if fs.has_npus:
                cost += int(self._npu_cost(np.array([i], dtype=np.int64), d)[0])
            e.key[i] = cost * n + int(fs.tiebreak[i])
            e.slot[i] = slot
            if e.tie is not None:
                e.tie[i] = int(fs.gpu_free[i].sum())

    def _degraded_one(self, i: int, d: Demand, slot: int) -> int:
        degraded = self.fleet.gpu_degraded[i].tolist()
        if not any(degraded):
            return 0
        if d.is_share:
            return self.degraded_penalty if degraded[max(slot, 0)] else 0
        free = self.fleet.gpu_free[i].tolist()
        usable = self.fleet.gpu_usable[i].tolist()
        healthy = sum(1 for j, bad in enumerate(degraded) if free[j] == 1000 and usable[j] and not bad)
        return max(0, d.gpus - healthy) * self.degraded_penalty

    def _npu_cost(self, cand: I64, d: Demand) -> I64:
        """The NPU rule of the module docstring, for the nodes ``cand`` (where ``d`` fits)."""
        fs = self.fleet
        if not d.npus:
            guard: I64 = fs.npu_free[cand].sum(axis=1) * NPU_GUARD
            return guard
        fits = fs.npu_fits(d)[cand]
        free = fs.npu_free[cand] * fits
        cost: I64 = (free.sum(axis=1) - d.npus) * NPU_FIT
        healthy = (free * ~fs.npu_degraded[cand]).sum(axis=1)
        short: I64 = np.maximum(0, d.npus - healthy).astype(np.int64)
        return cost + short * self.degraded_penalty

    def _degraded_cost(self, cand: I64, d: Demand, slot: I64) -> I64:
        fs = self.fleet
        if not fs.gpu_degraded.any() or not (d.gpus or d.gpu_milli):
            return np.zeros(len(cand), dtype=np.int64)
        if d.is_share:
            bad = fs.gpu_degraded[cand, np.maximum(slot, 0)]
            return bad.astype(np.int64) * self.degraded_penalty
        healthy = ((fs.gpu_free[cand] == 1000) & fs.gpu_usable[cand] & ~fs.gpu_degraded[cand]).sum(axis=1)
        short: I64 = np.maximum(0, d.gpus - healthy).astype(np.int64)
        return short * self.degraded_penalty

    def choose(self, d: Demand, lo: int = 0, hi: int | None = None, extra: I64 | None = None) -> Choice | None:
        """The best node in positions ``lo:hi`` (a cluster's range); ``extra`` adds per-node cost."""
        e = self._entry(d)
        hi = self.fleet.size if hi is None else hi
        key = e.key[lo:hi]
        if extra is not None:
            ex = extra[lo:hi]
            key = np.where((key < INF) & (ex < MASKED), key + ex * self.fleet.size, INF)
        if self.policy is NodePolicy.RANDOM:
            ok = np.flatnonzero(key < INF)
            if not ok.size:
                return None
            i = lo + int(ok[int(self.rng.integers(ok.size))])
            return self._choice(d, i, 0)
        j = int(key.argmin()) if key.size else 0
        if not key.size or key[j] >= INF:
            return None
        n = self.fleet.size
        window = self.share_window if d.is_share else self.window
        if window or e.tie is not None:
            near = key // n <= int(key[j]) // n + window
            rank = self.fleet.tiebreak[lo:hi]
            if e.tie is not None:
                rank = e.tie[lo:hi] * n + rank
            j = int(np.where(near, rank, INF).argmin())
        return self._choice(d, lo + j, int(key[j]) // n)

    def ranked(self, d: Demand, lo: int, hi: int, k: int) -> list[Choice]:
        """The ``k`` best nodes of a range, best first (for score breakdowns of runners-up)."""
        key = self._entry(d).key[lo:hi]
        if not key.size:
            return []
        k = min(k, key.size)
        top = np.argpartition(key, k - 1)[:k] if k < key.size else np.arange(key.size)
        top = top[np.argsort(key[top], kind="stable")]
        return [self._choice(d, lo + int(j), int(key[j]) // self.fleet.size) for j in top if key[j] < INF]

    def _choice(self, d: Demand, i: int, cost: int) -> Choice:
        fs = self.fleet
        if d.gpus:
            slots = fs.whole_gpu_slots(i, d.gpus, d)
        elif d.gpu_milli:
            if self.policy is NodePolicy.RANDOM:
                cards = fs.gpu_fits(d)
                room = fs.gpu_free[i] >= d.gpu_milli
                fits = np.flatnonzero(room if cards is None else room & cards[i])
                slots = (int(fits[int(self.rng.integers(fits.size))]),)
            else:
                slot = int(self._cache[d].slot[i])
                slots = (fs.share_slot(i, d, slot) if i in fs.mixed_rows else slot,)
        else:
            slots = ()
        npus = fs.npu_slots_for(i, d) if d.npus else ()
        return Choice(node=i, slots=slots, cost=cost, npu_slots=npus)

    def place(self, d: Demand, c: Choice) -> ReplicaPlacement:
        return self.fleet.take(c.node, d, c.slots, c.npu_slots)

    def release(self, p: ReplicaPlacement, d: Demand) -> None:
        self.fleet.give(p, d.cpu_milli, d.memory_mib)


__all__ = ["MASKED", "Choice", "Placer"]
