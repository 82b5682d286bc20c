"""The fleet as numpy integer arrays: free CPU, memory, per-GPU milli-GPU and per-NPU freedom of every node.

Called by the ``Placer`` (the hot loop of the cycle, the simulator and the benchmark). Nodes are held in
one canonical order, sorted by (cluster id, node id), whatever order they were given in; every array is
indexed by that position, and the nodes of one cluster form one contiguous range. ``take`` and ``give``
are the only mutations; each bumps the node's version so cached scores of that node are recomputed.

GPUs are described per card (model, memory): on a node of one model the node-wide arrays say it all and
the hot paths read only them; on a node whose cards differ (``mixed``) a replica that names models or a
memory floor counts and takes only the cards that meet them (``gpu_fits``). NPUs are whole devices, one
free flag per device, with their own models and memory; a replica that asks none never takes one.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from services.scheduler.core.policy.model import (
    MILLI,
    ClusterId,
    Gpu,
    Health,
    Job,
    Node,
    NodeId,
    ReplicaPlacement,
    Toleration,
    hard_taints,
    tolerates,
)

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Demand:
    """What one replica asks for; the cache key of the placer's per-shape scores."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0  # whole GPUs
    gpu_milli: int = 0  # a share of one GPU (1..999)
    models: tuple[str, ...] = ()
    min_gpu_memory_mib: int = 0
    tolerations: tuple[Toleration, ...] = ()
    npus: int = 0  # whole NPUs
    npu_models: tuple[str, ...] = ()
    min_npu_memory_mib: int = 0
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    """Computed once: a demand is a dictionary key on the placer's hot path, looked up a few times per
    replica placed."""

    def __post_init__(self) -> None:
        fields = (self.cpu_milli, self.memory_mib, self.gpus, self.gpu_milli, self.models, self.min_gpu_memory_mib)
        more = (self.tolerations, self.npus, self.npu_models, self.min_npu_memory_mib)
        object.__setattr__(self, "_hash", hash(fields + more))

    def __hash__(self) -> int:
        return self._hash

    @property
    def is_share(self) -> bool:
        return self.gpus == 0 and self.gpu_milli > 0

    @property
    def total_gpu_milli(self) -> int:
        return self.gpus * MILLI + self.gpu_milli

    @staticmethod
    def of(job: Job) -> Demand:
        gpus, share = job.gpus, job.gpu_milli
        if gpus == 0 and share >= MILLI:  # a "share" of a whole GPU is a whole GPU
            gpus, share = 1, 0
        return Demand(
            cpu_milli=job.cpu_milli,
            memory_mib=job.memory_mib,
            gpus=gpus,
            gpu_milli=share,
            models=tuple(sorted(set(job.gpu_models))),
            min_gpu_memory_mib=job.min_gpu_memory_mib,
            tolerations=job.tolerations,
            npus=job.npus,
            npu_models=tuple(sorted(set(job.npu_models))),
            min_npu_memory_mib=job.min_npu_memory_mib,
        )


class FleetState:
    """Mutable integer arrays of one fleet. Owned by one placer or one cycle; never shared."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        ordered = sorted(nodes, key=_order)
        n = len(ordered)
        self.nodes: tuple[Node, ...] = tuple(ordered)
        self.node_ids: tuple[NodeId, ...] = tuple(x.node_id for x in ordered)
        self.index: dict[NodeId, int] = {nid: i for i, nid in enumerate(self.node_ids)}
        if len(self.index) != n:
            raise ValueError("node ids must be unique")
        self.clusters: tuple[ClusterId, ...] = tuple(sorted({x.cluster for x in ordered}))
        cpos = {c: i for i, c in enumerate(self.clusters)}
        self.cluster_of: I64 = np.array([cpos[x.cluster] for x in ordered], dtype=np.int64)
        bounds = np.searchsorted(self.cluster_of, np.arange(len(self.clusters) + 1))
        self.cluster_range: tuple[tuple[int, int], ...] = tuple(
            (int(bounds[i]), int(bounds[i + 1])) for i in range(len(self.clusters))
        )
        flat = list(itertools.chain.from_iterable(x.gpus for x in ordered))
        cards = set(map(_MODEL, flat)) - {""}
        self.models: tuple[str, ...] = tuple(sorted({x.gpu_model for x in ordered if x.gpu_model} | cards))
        mpos = {m: i for i, m in enumerate(self.models)}
        self._mpos = mpos
        self.model_of: I64 = np.array([mpos.get(x.gpu_model, -1) for x in ordered], dtype=np.int64)
        # NVLink domains and RDMA fabrics by name, numbered in name order; -1: the node has none.
        self.nvlink_domains, self.nvlink_of = _numbered([x.nvlink_domain for x in ordered])
        self.rdma_fabrics, self.rdma_of = _numbered([x.rdma_fabric for x in ordered])
        self.gpu_slots = max([1] + [len(x.gpus) for x in ordered])
        g = self.gpu_slots
        self.gpu_free: I64 = np.zeros((n, g), dtype=np.int64)
        self.gpu_index: I64 = np.full((n, g), -1, dtype=np.int64)
        self.gpu_degraded: B = np.zeros((n, g), dtype=np.bool_)
        self.gpu_usable: B = np.zeros((n, g), dtype=np.bool_)
        # Per card, on mixed nodes only (elsewhere the node's model and memory hold for every card).
        self.gpu_model_slot: I64 = np.full((n, g), -1, dtype=np.int64)
        self.gpu_mem_slot: I64 = np.zeros((n, g), dtype=np.int64)
        self.npu_models: tuple[str, ...] = tuple(sorted({u.model for x in ordered for u in x.npus}))
        self._npos = {m: i for i, m in enumerate(self.npu_models)}
        self.npu_slots = max([1] + [len(x.npus) for x in ordered])
        s = self.npu_slots
        self.npu_free: I64 = np.zeros((n, s), dtype=np.int64)  # 1: free and not failed
        self.npu_index: I64 = np.full((n, s), -1, dtype=np.int64)
        self.npu_usable: B = np.zeros((n, s), dtype=np.bool_)
        self.npu_degraded: B = np.zeros((n, s), dtype=np.bool_)
        self.npu_model_of: I64 = np.full((n, s), -1, dtype=np.int64)
        self.npu_mem: I64 = np.zeros((n, s), dtype=np.int64)
        self.has_npus = any(x.npus for x in ordered)
        """Any NPU in the fleet: without one, nothing about NPUs is computed anywhere."""
        self._slot_ok: dict[tuple[tuple[str, ...], int], B] = {}
        self._npu_ok: dict[tuple[tuple[str, ...], int], B] = {}
        node_mem = np.array([x.gpu_memory_mib for x in ordered], dtype=np.int64)
        mixed = self._fill_gpus(ordered, flat, node_mem)
        self.mixed: tuple[int, ...] = mixed
        self.mixed_rows = frozenset(mixed)
        self.devices_vary = self.has_npus or bool(mixed)
        """NPUs or mixed nodes in the fleet: only then do the scalar checks look past the node-wide arrays."""
        for i in (i for i, x in enumerate(ordered) if x.npus):
            self._set_npus(i, ordered[i])
        self.gpu_count: I64 = self.gpu_usable.sum(axis=1).astype(np.int64)
        self.cpu_cap: I64 = np.array([x.cpu_milli for x in ordered], dtype=np.int64)
        self.mem_cap: I64 = np.array([x.memory_mib for x in ordered], dtype=np.int64)
        self.cpu_free: I64 = np.array([x.cpu_free_milli for x in ordered], dtype=np.int64)
        self.mem_free: I64 = np.array([x.memory_free_mib for x in ordered], dtype=np.int64)
        self.gpu_mem: I64 = node_mem
        for i in mixed:
            self.gpu_mem[i] = _gpu_memory(ordered[i])
        self.schedulable: B = np.array([x.schedulable for x in ordered], dtype=np.bool_)
        self.tainted: tuple[int, ...] = tuple(i for i, x in enumerate(ordered) if hard_taints(x.taints))
        self._tolerated: dict[tuple[Toleration, ...], B] = {}
        self.version: I64 = np.zeros(n, dtype=np.int64)
        # GPU replicas placed through this fleet, per node and class (column 0: GPU shares, k: k whole GPUs),
        # for the GPU-clustering baseline. Replicas already running in a snapshot are not known by class.
        self.pod_class: I64 = np.zeros((n, g + 1), dtype=np.int64)
        # Tie-break rank: node order unless a caller installs a (seeded) permutation.
        self.tiebreak: I64 = np.arange(n, dtype=np.int64)

    def _fill_gpus(self, ordered: Sequence[Node], flat: list[Gpu], node_mem: I64) -> tuple[int, ...]:
        """Every card's arrays at once (what ``_set_gpus`` does node by node, at C speed over the fleet's
        cards), and the mixed nodes' positions. A node whose cards are not given by index is redone by
        ``_set_gpus``."""
        total = len(flat)
        if not total:
            return ()
        n = len(ordered)
        counts = np.fromiter(map(len, (x.gpus for x in ordered)), dtype=np.int64, count=n)
        rows = np.repeat(np.arange(n, dtype=np.int64), counts)
        cols = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        index = np.fromiter(map(_INDEX, flat), dtype=np.int64, count=total)
        health = np.fromiter(map(_HEALTH_CODE.__getitem__, map(_HEALTH, flat)), dtype=np.int64, count=total)
        free = np.fromiter(map(_FREE, flat), dtype=np.int64, count=total)
        codes = {"": -2, **self._mpos}
        model = np.fromiter(map(codes.__getitem__, map(_MODEL, flat)), dtype=np.int64, count=total)
        model = np.where(model == -2, self.model_of[rows], model)
        memory = np.fromiter(map(_MEMORY, flat), dtype=np.int64, count=total)
        memory = np.where(memory == 0, node_mem[rows], memory)
        ok = health != _HEALTH_CODE[Health.FAILED]
        self.gpu_index[rows, cols] = index
        self.gpu_model_slot[rows, cols] = model
        self.gpu_mem_slot[rows, cols] = memory
        self.gpu_usable[rows, cols] = ok
        self.gpu_free[rows, cols] = np.where(ok, np.clip(free, 0, MILLI), 0)
        self.gpu_degraded[rows, cols] = ok & (health == _HEALTH_CODE[Health.DEGRADED])
        same = rows[1:] == rows[:-1]
        for i in np.unique(rows[1:][same & (index[1:] < index[:-1])]).tolist():
            self.gpu_index[i] = -1
            self.gpu_usable[i] = False
            self.gpu_free[i] = 0
            self.gpu_degraded[i] = False
            self._set_gpus(i, ordered[i])
        differs = (self.gpu_model_slot != self.model_of[:, None]) | (self.gpu_mem_slot != node_mem[:, None])
        return tuple(np.flatnonzero((differs & (self.gpu_index >= 0)).any(axis=1)).tolist())

    def _set_gpus(self, i: int, node: Node) -> None:
        for j, gpu in enumerate(sorted(node.gpus, key=lambda x: x.index)):
            self.gpu_index[i, j] = gpu.index
            self.gpu_model_slot[i, j] = self._mpos.get(gpu.model or node.gpu_model, -1)
            self.gpu_mem_slot[i, j] = gpu.memory_mib or node.gpu_memory_mib
            if gpu.health is not Health.FAILED:
                self.gpu_usable[i, j] = True
                self.gpu_free[i, j] = max(0, min(MILLI, gpu.free_milli))
                self.gpu_degraded[i, j] = gpu.health is Health.DEGRADED

    def _set_npus(self, i: int, node: Node) -> None:
        for j, npu in enumerate(sorted(node.npus, key=lambda x: x.index)):
            self.npu_index[i, j] = npu.index
            self.npu_model_of[i, j] = self._npos[npu.model]
            self.npu_mem[i, j] = npu.memory_mib
            if npu.health is not Health.FAILED:
                self.npu_usable[i, j] = True
                self.npu_free[i, j] = 1 if npu.free else 0
                self.npu_degraded[i, j] = npu.health is Health.DEGRADED

    def _set_row(self, i: int, node: Node) -> None:
        """Node ``i`` as ``node`` says now (same id, cluster, model, domains and GPU count as before)."""
        self.gpu_index[i] = -1
        self.gpu_usable[i] = False
        self.gpu_free[i] = 0
        self.gpu_degraded[i] = False
        self.npu_index[i] = -1
        self.npu_usable[i] = False
        self.npu_free[i] = 0
        self.npu_degraded[i] = False
        self.npu_model_of[i] = -1
        self.npu_mem[i] = 0
        self._set_gpus(i, node)
        self._set_npus(i, node)
        self.gpu_count[i] = int(self.gpu_usable[i].sum())
        self.cpu_cap[i] = node.cpu_milli
        self.mem_cap[i] = node.memory_mib
        self.cpu_free[i] = node.cpu_free_milli
        self.mem_free[i] = node.memory_free_mib
        self.gpu_mem[i] = _gpu_memory(node)
        self.schedulable[i] = node.schedulable

    def copy(self) -> FleetState:
        """A copy that places and releases on its own: the arrays placing changes (free capacity,
        versions, placed classes) are copied; the rest (capacity, GPU layout and health, ...) are
        read-only views of this fleet's, and names and indexes are shared. Copying every array cost
        1.5 ms a cycle at 10,000 nodes."""
        twin = object.__new__(FleetState)
        for name, value in self.__dict__.items():
            if isinstance(value, np.ndarray):
                if name in _PLACING_CHANGES:
                    value = value.copy()
                else:
                    value = value.view()
                    value.flags.writeable = False
            setattr(twin, name, value)
        return twin

    @property
    def size(self) -> int:
        return len(self.node_ids)

    def model_mask(self, models: Sequence[str]) -> B:
        """Per node: does its GPU model (any of its cards' on a mixed node) satisfy ``models`` (empty =
        any model, even none)."""
        if not models:
            return np.ones(self.size, dtype=np.bool_)
        allowed = np.zeros(len(self.models) + 1, dtype=np.bool_)  # last entry: node without GPUs
        for m in models:
            if m in self.models:
                allowed[self.models.index(m)] = True
        mask = allowed[self.model_of]
        if self.mixed:  # absent cards are -1: the last entry, False
            rows = np.array(self.mixed, dtype=np.int64)
            mask[rows] = allowed[self.gpu_model_slot[rows]].any(axis=1)
        return mask

    def gpu_fits(self, d: Demand) -> B | None:
        """Per card: is it of a model ``d`` accepts, with the memory it asks; ``None`` when every node is
        of one model or ``d`` names neither (the node-wide checks then say it all). Cached per (models,
        memory floor) for the fleet's layout (which fixes every card's model and memory); read-only.
        Whether a card failed is ``gpu_usable``'s to say."""
        if not self.mixed or not (d.models or d.min_gpu_memory_mib):
            return None
        key = (d.models, d.min_gpu_memory_mib)
        mask = self._slot_ok.get(key)
        if mask is None:
            allowed = np.zeros(len(self.models) + 1, dtype=np.bool_)
            allowed[[self.models.index(m) for m in d.models if m in self.models]] = True
            if not d.models:
                allowed[:] = True
            mask = allowed[self.gpu_model_slot] & (self.gpu_mem_slot >= d.min_gpu_memory_mib)
            mask.flags.writeable = False
            self._slot_ok[key] = mask
        return mask

    def npu_fits(self, d: Demand) -> B:
        """Per NPU: is it of a model ``d`` accepts, with the memory it asks (cached for the layout, as
        ``gpu_fits``; a failed NPU is never free, see ``npu_free``)."""
        key = (d.npu_models, d.min_npu_memory_mib)
        mask = self._npu_ok.get(key)
        if mask is None:
            mask = (self.npu_index >= 0) & (self.npu_mem >= d.min_npu_memory_mib)
            if d.npu_models:
                allowed = np.zeros(len(self.npu_models) + 1, dtype=np.bool_)
                allowed[[self._npos[m] for m in d.npu_models if m in self._npos]] = True
                mask &= allowed[self.npu_model_of]
            mask.flags.writeable = False
            self._npu_ok[key] = mask
        return mask

    def free_npus(self, d: Demand, sel: slice | I64 = slice(None)) -> I64:
        """Per node (of ``sel``): its free NPUs that ``d`` accepts."""
        counted: I64 = (self.npu_free[sel] * self.npu_fits(d)[sel]).sum(axis=1)
        return counted

    def cluster_has_npus(self, cluster: ClusterId) -> bool:
        """Whether a node of ``cluster`` has NPUs (failed ones count): its failures may be its NPUs'."""
        if not self.has_npus or cluster not in self.clusters:
            return False
        at = self.clusters.index(cluster)
        lo, hi = self.cluster_range[at]
        return bool((self.npu_index[lo:hi] >= 0).any())

    def npu_count(self, d: Demand, sel: slice | I64 = slice(None)) -> I64:
        """Per node (of ``sel``): its NPUs that ``d`` accepts, free or not (what it holds when empty)."""
        counted: I64 = (self.npu_fits(d)[sel] & self.npu_usable[sel]).sum(axis=1)
        return counted

    def tolerated(self, tolerations: tuple[Toleration, ...]) -> B:
        """Per node: does a job with these tolerations tolerate its taints (nodes without any: yes)."""
        mask = self._tolerated.get(tolerations)
        if mask is None:
            mask = np.ones(self.size, dtype=np.bool_)
            for i in self.tainted:
                mask[i] = tolerates(tolerations, self.nodes[i].taints)
            mask.flags.writeable = False
            self._tolerated[tolerations] = mask
        return mask

    def usable(self, d: Demand) -> B:
        """Per node: may a replica of ``d`` go there at all (schedulable, its taints tolerated)."""
        if not self.tainted:
            return self.schedulable
        return self.schedulable & self.tolerated(d.tolerations)

    def feasible(self, d: Demand, idx: I64 | None = None) -> B:
        """Per node (or per listed node): can one replica of ``d`` go there now."""
        sel = slice(None) if idx is None else idx
        ok = self.usable(d)[sel] & (self.cpu_free[sel] >= d.cpu_milli) & (self.mem_free[sel] >= d.memory_mib)
        if d.npus:
            ok &= self.free_npus(d, sel) >= d.npus
        cards = self.gpu_fits(d) if self.mixed and (d.gpus or d.gpu_milli) else None
        if cards is not None:  # mixed nodes in the fleet: count the cards that fit, node by node
            if d.gpus:
                ok &= ((self.gpu_free[sel] == MILLI) & cards[sel] & self.gpu_usable[sel]).sum(axis=1) >= d.gpus
            else:
                ok &= ((self.gpu_free[sel] >= d.gpu_milli) & cards[sel]).any(axis=1)  # failed cards: free 0
            return ok
        if d.models:
            ok &= self.model_mask(d.models)[sel]
        if d.gpus or d.gpu_milli:
            ok &= self.gpu_mem[sel] >= d.min_gpu_memory_mib
        if d.gpus:
            ok &= ((self.gpu_free[sel] == MILLI) & self.gpu_usable[sel]).sum(axis=1) >= d.gpus
        elif d.gpu_milli:
            ok &= (self.gpu_free[sel] >= d.gpu_milli).any(axis=1)
        return ok

    def feasible_one(self, d: Demand, i: int) -> bool:
        """``feasible`` for node ``i`` alone, in Python scalars."""
        if not (self.schedulable[i] and self.cpu_free[i] >= d.cpu_milli and self.mem_free[i] >= d.memory_mib):
            return False
        if self.tainted and not self.tolerated(d.tolerations)[i]:
            return False
        if self.devices_vary or d.npus:
            verdict = self._feasible_devices(d, i)
            if verdict is not None:
                return verdict
        if d.models:
            m = int(self.model_of[i])
            if m < 0 or self.models[m] not in d.models:
                return False
        if (d.gpus or d.gpu_milli) and self.gpu_mem[i] < d.min_gpu_memory_mib:
            return False
        if d.gpus:
            usable = self.gpu_usable[i].tolist()
            return sum(1 for j, free in enumerate(self.gpu_free[i].tolist()) if free == MILLI and usable[j]) >= d.gpus
        if d.gpu_milli:
            free: list[int] = self.gpu_free[i].tolist()
            return max(free) >= d.gpu_milli
        return True

    def _feasible_devices(self, d: Demand, i: int) -> bool | None:
        """What NPUs and a mixed fleet's cards say of node ``i`` for ``d``: False when its NPUs are short,
        the answer when its cards decide it, None when the node-wide checks do."""
        if d.npus and int(self.free_npus(d, slice(i, i + 1))[0]) < d.npus:
            return False
        cards = self.gpu_fits(d) if self.mixed and (d.gpus or d.gpu_milli) else None
        if cards is None:
            return None
        fits = (cards[i] & self.gpu_usable[i]).tolist()
        free_now = self.gpu_free[i].tolist()
        if d.gpus:
            return sum(1 for j, free in enumerate(free_now) if free == MILLI and fits[j]) >= d.gpus
        return any(free >= d.gpu_milli and fits[j] for j, free in enumerate(free_now))

    def whole_gpu_slots(self, i: int, count: int, d: Demand | None = None) -> tuple[int, ...]:
        """The first ``count`` fully free GPUs of node ``i`` that ``d`` accepts, healthy ones before
        degraded ones."""
        cards = self.gpu_fits(d) if d is not None and self.mixed else None
        fit: list[bool] = (self.gpu_usable[i] if cards is None else cards[i] & self.gpu_usable[i]).tolist()
        share: list[int] = self.gpu_free[i].tolist()
        free = [j for j, ok in enumerate(fit) if ok and share[j] == MILLI]
        if len(free) > count:
            degraded: list[bool] = self.gpu_degraded[i].tolist()
            free.sort(key=lambda j: (degraded[j], j))
        if len(free) < count:
            raise ValueError("not enough free GPUs")
        return tuple(sorted(free[:count]))

    def share_slot(self, i: int, d: Demand, scored: int) -> int:
        """The card a GPU share takes on node ``i``: the one scoring chose when ``d`` accepts it, else
        (a mixed node, scored as a whole) the fullest card ``d`` accepts that still has room."""
        cards = self.gpu_fits(d)
        if cards is None or (scored >= 0 and cards[i, scored]):
            return scored
        room = [(int(self.gpu_free[i, j]), j) for j in range(self.gpu_slots) if cards[i, j] and self.gpu_usable[i, j]]
        return min((free, j) for free, j in room if free >= d.gpu_milli)[1]

    def npu_slots_for(self, i: int, d: Demand) -> tuple[int, ...]:
        """The NPUs one replica of ``d`` takes on node ``i``: free ones it accepts, healthy before
        degraded, then by position."""
        fits = self.npu_fits(d)[i].tolist()
        free = self.npu_free[i].tolist()
        degraded = self.npu_degraded[i].tolist()
        chosen = sorted((j for j in range(self.npu_slots) if fits[j] and free[j]), key=lambda j: (degraded[j], j))
        if len(chosen) < d.npus:
            raise ValueError("not enough free NPUs")
        return tuple(sorted(chosen[: d.npus]))

    def model_of_slots(self, i: int, slots: Sequence[int]) -> str:
        """The GPU model of the cards ``slots`` of node ``i`` (its first card's: replicas take cards of
        the models they accept, and a quota per model counts the first)."""
        if not slots:
            return ""
        m = int(self.gpu_model_slot[i, slots[0]] if i in self.mixed_rows else self.model_of[i])
        return self.models[m] if m >= 0 else ""

    def npu_model_of_slots(self, i: int, slots: Sequence[int]) -> str:
        if not slots:
            return ""
        m = int(self.npu_model_of[i, slots[0]])
        return self.npu_models[m] if m >= 0 else ""

    def take(self, i: int, d: Demand, slots: Sequence[int], npu_slots: Sequence[int] = ()) -> ReplicaPlacement:
        if npu_slots or d.npus:
            if len(npu_slots) != d.npus:
                raise ValueError("a replica takes exactly the NPUs it asks")
            if not all(self.npu_free[i, j] for j in npu_slots):
                raise ValueError("NPU over-commit")
        each = MILLI if d.gpus else d.gpu_milli
        for j in slots:
            if self.gpu_free[i, j] < each:
                raise ValueError("GPU over-commit")
            self.gpu_free[i, j] -= each
        if self.cpu_free[i] < d.cpu_milli or self.mem_free[i] < d.memory_mib:
            raise ValueError("CPU or memory over-commit")
        self.cpu_free[i] -= d.cpu_milli
        self.mem_free[i] -= d.memory_mib
        for j in npu_slots:
            self.npu_free[i, j] = 0
        self.version[i] += 1
        if slots:
            self.pod_class[i, 0 if d.is_share else len(slots)] += 1
        return ReplicaPlacement(
            node_id=self.node_ids[i],
            gpu_indices=tuple(int(self.gpu_index[i, j]) for j in slots),
            gpu_milli_each=each if slots else 0,
            npu_indices=tuple(int(self.npu_index[i, j]) for j in npu_slots) if npu_slots else (),
        )

    def _npus(self, i: int, p: ReplicaPlacement, free: int) -> None:
        for ni in p.npu_indices:
            found = np.flatnonzero(self.npu_index[i] == ni)
            if found.size and self.npu_usable[i, int(found[0])]:  # one it no longer has, or failed: not counted
                self.npu_free[i, int(found[0])] = free

    def _count_class(self, i: int, p: ReplicaPlacement, delta: int) -> None:
        if p.gpu_indices:
            k = 0 if len(p.gpu_indices) == 1 and p.gpu_milli_each < MILLI else min(len(p.gpu_indices), self.gpu_slots)
            self.pod_class[i, k] = max(0, int(self.pod_class[i, k]) + delta)

    def give(self, p: ReplicaPlacement, cpu_milli: int, memory_mib: int) -> None:
        """Return what ``p`` took (a departure, a preemption or a rolled-back trial placement)."""
        i = self.index[p.node_id]
        for gi in p.gpu_indices:
            found = np.flatnonzero(self.gpu_index[i] == gi)
            if not found.size:
                continue  # a GPU the node no longer has (observed again with fewer): never counted as taken
            j = int(found[0])
            self.gpu_free[i, j] = min(MILLI, int(self.gpu_free[i, j]) + p.gpu_milli_each)
        self.cpu_free[i] += cpu_milli
        self.mem_free[i] += memory_mib
        if p.npu_indices:
            self._npus(i, p, 1)
        self.version[i] += 1
        self._count_class(i, p, -1)

    def retake(self, p: ReplicaPlacement, cpu_milli: int, memory_mib: int) -> None:
        """Take exactly what ``p`` describes again (undo of ``give`` after a what-if)."""
        i = self.index[p.node_id]
        for gi in p.gpu_indices:
            found = np.flatnonzero(self.gpu_index[i] == gi)
            if not found.size:
                continue  # as in ``give``
            self.gpu_free[i, int(found[0])] -= p.gpu_milli_each
        self.cpu_free[i] -= cpu_milli
        self.mem_free[i] -= memory_mib
        if p.npu_indices:
            self._npus(i, p, 0)
        self.version[i] += 1
        self._count_class(i, p, 1)

    def allocated_gpu_milli(self) -> int:
        return int((self.gpu_count * MILLI).sum() - (self.gpu_free * self.gpu_usable).sum())

    def capacity_gpu_milli(self) -> int:
        return int(self.gpu_count.sum() * MILLI)


def _numbered(names: Sequence[str]) -> tuple[tuple[str, ...], I64]:
    """The distinct non-empty names, sorted, and each entry's position among them (-1 for "")."""
    named = tuple(sorted(set(names) - {""}))
    pos = {name: i for i, name in enumerate(named)}
    return named, np.array([pos.get(name, -1) for name in names], dtype=np.int64)


# (cluster, node id), read at C speed: fleets are sorted every cycle.
_order: Callable[[Node], tuple[str, str]] = operator.attrgetter("cluster", "node_id")
# A card's fields, read at C speed when a fleet is built.
_INDEX = operator.attrgetter("index")
_HEALTH = operator.attrgetter("health")
_FREE = operator.attrgetter("free_milli")
_MODEL = operator.attrgetter("model")
_MEMORY = operator.attrgetter("memory_mib")
_HEALTH_CODE = {Health.OK: 0, Health.DEGRADED: 1, Health.FAILED: 2}

# The arrays ``take``, ``give`` and ``hold`` change; a copy owns these (see ``FleetState.copy``).
_PLACING_CHANGES = frozenset({"gpu_free", "cpu_free", "mem_free", "version", "pod_class", "npu_free"})


def _mixed(node: Node) -> bool:
    """Do the node's cards differ in model or memory (so each must be looked at, not the node)."""
    return any((g.model and g.model != node.gpu_model) or (g.memory_mib and g.memory_mib != node.gpu_memory_mib)
               for g in node.gpus)  # fmt: skip


def _gpu_memory(node: Node) -> int:
    """The most memory of any of its cards (on a node of one model, its cards' memory)."""
    return max([node.gpu_memory_mib] + [g.memory_mib for g in node.gpus])


@dataclass(slots=True)
class FleetMemo:
    """What one cycle's fleet leaves for the next: consecutive snapshots share most ``Node`` objects
    (the scheduler's state rebuilds only the nodes that changed), so the next fleet is the previous
    pristine one with those rows rewritten, not a rebuild of every array. The result is the same
    arrays ``FleetState(nodes)`` builds; anything else about the fleet changing means a rebuild."""

    nodes: tuple[Node, ...] = ()
    base: FleetState | None = None
    generation: int = 0  # bumped on every rebuild: what was derived from the old layout is stale
    patched: int = 0
    stamps: int = 0  # the next unused row stamp (see ``STAMP``)


STAMP = 1 << 20
"""A memo's fleets carry row stamps as versions: multiples of this, a new one each time a row is
written, so a stamp names one state of one row of one layout, across cycles (what a cycle's placing
adds to a version stays below the next multiple). Scores cached across cycles are keyed by them."""


def _stamp(memo: FleetMemo, fleet: FleetState, rows: Sequence[int]) -> None:
    for i in rows:
        fleet.version[i] = memo.stamps * STAMP
        memo.stamps += 1


def fleet_for(nodes: Iterable[Node], memo: FleetMemo | None) -> FleetState:
    """A fresh fleet for one cycle: it places and releases freely, and stays valid until the next call
    with the same memo (which may rewrite rows it shares with it, see ``FleetState.copy``)."""
    if memo is None:
        return FleetState(nodes)
    given = tuple(nodes)
    # Nodes with the same ids in the same places as the last fleet's are in fleet order too, so nodes
    # given in order (the scheduler's state keeps them so) need no sort.
    if (
        memo.base is not None
        and len(given) == len(memo.nodes)
        and (_patched(memo, given) or _patched(memo, tuple(sorted(given, key=_order))))
    ):
        return memo.base.copy()
    ordered = tuple(sorted(given, key=_order))
    memo.base = FleetState(ordered)
    memo.nodes = ordered
    memo.generation += 1
    _stamp(memo, memo.base, range(memo.base.size))
    return memo.base.copy()


def _patched(memo: FleetMemo, ordered: tuple[Node, ...]) -> bool:
    """Rewrite the rows of the nodes that changed in place, if every node keeps its place and layout."""
    base, old = memo.base, memo.nodes
    assert base is not None
    changed = list(itertools.compress(itertools.count(), map(operator.is_not, ordered, old)))  # C speed
    if not all(_same_layout(ordered[i], old[i]) for i in changed):
        return False
    for i in changed:
        base._set_row(i, ordered[i])
    _stamp(memo, base, changed)
    base.nodes = ordered
    memo.nodes = ordered
    memo.patched += 1
    return True


def _same_layout(new: Node, old: Node) -> bool:
    return (
        new.node_id == old.node_id
        and new.cluster == old.cluster
        and new.gpu_model == old.gpu_model
        and new.nvlink_domain == old.nvlink_domain
        and new.rdma_fabric == old.rdma_fabric
        and len(new.gpus) == len(old.gpus)
        and new.taints == old.taints
        and _card_layout(new) == _card_layout(old)
    )


def _card_layout(node: Node) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    """What of a node's devices the fleet's layout depends on (models index positions, mixed rows)."""
    if not node.npus and not _mixed(node):
        return (), ()
    return tuple((g.model, g.memory_mib) for g in node.gpus), tuple((u.model, u.memory_mib) for u in node.npus)


__all__ = ["Demand", "FleetMemo", "FleetState", "fleet_for"]
