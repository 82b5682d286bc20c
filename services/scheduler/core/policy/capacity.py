"""Counting capacity: how many replicas of a shape fit per node, and the GPU-model pressure of a fleet.

Called by the cycle (gang feasibility, hot-spot governance), by explanations ("the largest free block is
6 GPUs in cluster-b") and by estimates of start times. Replicas of one job are identical, so per node the
count is the minimum over CPU, memory and GPUs of how many copies fit; the sum over a cluster's nodes is
exact for whole-GPU replicas and for shares alike. NPUs are whole devices: free accepted NPUs // NPUs
asked. On mixed nodes (cards of several models or memories) only the cards the shape accepts count.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from events.catalog.profiles import pressure_milli
from services.scheduler.core.policy.fleet import Demand, FleetState
from services.scheduler.core.policy.model import MILLI

I64 = npt.NDArray[np.int64]
BIG = 1 << 40


def per_node(
    fs: FleetState, d: Demand, lo: int = 0, hi: int | None = None, *, ignore: frozenset[str] = frozenset()
) -> I64:
    """Replicas of ``d`` that fit on each node of ``lo:hi``; ``ignore`` drops constraints (for what-ifs)."""
    hi = fs.size if hi is None else hi
    sl = slice(lo, hi)
    n = hi - lo
    fits = np.full(n, BIG, dtype=np.int64)
    if "cpu" not in ignore and d.cpu_milli:
        fits = np.minimum(fits, fs.cpu_free[sl] // d.cpu_milli)
    if "memory" not in ignore and d.memory_mib:
        fits = np.minimum(fits, fs.mem_free[sl] // d.memory_mib)
    if "npu" not in ignore and d.npus:
        fits = np.minimum(fits, fs.free_npus(d, sl) // d.npus)
    cards = fs.gpu_fits(d) if (d.gpus or d.gpu_milli) and not ignore & {"model", "gpu_memory"} else None
    if "gpu" not in ignore:
        usable = fs.gpu_usable[sl] if cards is None else fs.gpu_usable[sl] & cards[sl]
        if d.gpus:
            full = ((fs.gpu_free[sl] == MILLI) & usable).sum(axis=1)
            fits = np.minimum(fits, full // d.gpus)
        elif d.gpu_milli:
            fits = np.minimum(fits, (np.where(usable, fs.gpu_free[sl], 0) // d.gpu_milli).sum(axis=1))
    if d.gpus or d.gpu_milli:
        if "model" not in ignore and d.models:
            fits = np.where(fs.model_mask(d.models)[sl], fits, 0)
        if "gpu_memory" not in ignore:
            fits = np.where(fs.gpu_mem[sl] >= d.min_gpu_memory_mib, fits, 0)
        fits = np.where(fs.gpu_count[sl] > 0, fits, 0)
    if "schedulable" not in ignore:
        fits = np.where(fs.usable(d)[sl], fits, 0)
    return np.minimum(fits, 1 << 20)


def largest_whole_gpu_block(fs: FleetState, d: Demand, lo: int, hi: int) -> tuple[int, int]:
    """(most fully free GPUs on one eligible node, its position) in ``lo:hi``; CPU and memory must fit."""
    probe = replace(d, gpus=1, gpu_milli=0)
    ok = per_node(fs, probe, lo, hi, ignore=frozenset({"gpu"})) > 0
    cards = fs.gpu_fits(d)
    usable = fs.gpu_usable[lo:hi] if cards is None else fs.gpu_usable[lo:hi] & cards[lo:hi]
    full = np.where(ok, ((fs.gpu_free[lo:hi] == MILLI) & usable).sum(axis=1), 0)
    if not full.size:
        return 0, -1
    j = int(full.argmax())
    return int(full[j]), lo + j


def largest_npu_block(fs: FleetState, d: Demand, lo: int, hi: int) -> tuple[int, int]:
    """(most free NPUs ``d`` accepts on one eligible node, its position) in ``lo:hi``; CPU, memory and
    GPUs must fit."""
    ok = per_node(fs, d, lo, hi, ignore=frozenset({"npu"})) > 0
    free = np.where(ok, fs.free_npus(d, slice(lo, hi)), 0)
    if not free.size:
        return 0, -1
    j = int(free.argmax())
    return int(free[j]), lo + j


def model_pressure(fs: FleetState) -> dict[str, int]:
    """Allocated share of each GPU model's working capacity, per mille (``pressure_milli``: what makes a
    model hot, for the scheduler and the read side alike)."""
    out: dict[str, int] = {}
    free = (fs.gpu_free * fs.gpu_usable).sum(axis=1)
    for m, name in enumerate(fs.models):
        sel = fs.model_of == m
        out[name] = pressure_milli(int(fs.gpu_count[sel].sum()) * MILLI, int(free[sel].sum()))
    return out


def npu_model_pressure(fs: FleetState) -> dict[str, int]:
    """Allocated share of each NPU model's working NPUs (failed ones left out), per mille: the same
    ``pressure_milli`` that makes a GPU model hot makes an NPU model hot."""
    out: dict[str, int] = {}
    if not fs.has_npus:
        return out
    free = (fs.npu_free > 0) & fs.npu_usable
    for m, name in enumerate(fs.npu_models):
        sel = fs.npu_model_of == m
        working = int((fs.npu_usable & sel).sum())
        out[name] = pressure_milli(working * MILLI, int((free & sel).sum()) * MILLI)
    return out


__all__ = ["largest_npu_block", "largest_whole_gpu_block", "model_pressure", "npu_model_pressure", "per_node"]
