"""Seeded randomness of a simulated cluster: the fault schedule, job failures and utilisation.

Called by the model. Pure: every draw comes from its own ``random.Random`` seeded with a string naming
what is drawn (seed, cluster, and the job, run, window or hour it is for), never from the ``random``
module's global generator. String seeds are hashed with SHA-512 by ``random``, so draws are the same on
every machine and for every ``PYTHONHASHSEED``, and one draw never shifts another: adding a job does not
change the fault schedule, and the schedule of hour 7 does not depend on how far hour 6 was read.

The fault schedule is a Poisson process over simulated time measured from the cluster's origin (the
moment it first registered), cut into hours: hour ``k`` holds the faults drawn from its own generator. A
fault hits one node (picked by position in the name-sorted node list) and lasts a drawn duration:

- ``gpu_failure`` (60% when the node has GPUs and no NPUs): one GPU fails (XID 79, fallen off the bus, or
  XID 48, an uncorrectable ECC error); the runs on it fail with ``GpuFailure``;
- ``npu_failure`` (60% when the node has NPUs and no GPUs): one NPU fails (Ascend event 0x80E01809,
  multi-bit ECC errors in its HBM, or 0x80C98000, its AI Core's instructions fail verification); the
  runs on it fail with ``NpuFailure``. On a node with both, a device failure is a GPU's or an NPU's in
  proportion to how many of each it has;
- ``node_cordoned`` (25%): the node is cordoned for maintenance; what runs there keeps running;
- ``node_lost`` (15%): the node stops reporting (``NodeRemoved``) and the runs on it fail with
  ``NodeFailure``; it comes back when the fault ends.

Which NPU fails, with what code, and whether a mixed node's device failure is an NPU's are drawn from the
fault's own generator (seeded with the fault's name), never from the hour's: the hour's draws are those
of a cluster without NPUs, so adding NPU nodes to a cluster leaves the faults of its other nodes as
they were, and the schedule of a node without NPUs is the same as before NPUs could fail.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from connectors.sim.config import HOUR_MS, SimConfig, ms
from connectors.sim.nodes import NodeSpec
from events.catalog.jobs import JobKind
from events.catalog.reasons import ReasonCode
from events.catalog.types import NodeId


class FaultKind(Enum):
    GPU_FAILURE = "gpu_failure"
    NPU_FAILURE = "npu_failure"
    NODE_CORDONED = "node_cordoned"
    NODE_LOST = "node_lost"


@dataclass(frozen=True, slots=True)
class Fault:
    at_ms: int
    until_ms: int
    hour: int
    number: int
    """Position within its hour: ``(hour, number)`` names the fault."""
    kind: FaultKind
    node: NodeId
    gpu: int | None = None
    xid: int | None = None
    npu: int | None = None
    npu_error: int | None = None
    """The NPU driver's event code (``NPU_ERRORS``)."""

    @property
    def name(self) -> str:
        return f"{self.hour}.{self.number}"


class FaultPlan:
    """The faults of one cluster, drawn lazily hour by hour from the origin."""

    def __init__(self, cluster: str, nodes: Sequence[NodeSpec], config: SimConfig, origin_ms: int) -> None:
        self._cluster = cluster
        self._nodes = tuple(nodes)
        self._config = config
        self.origin_ms = origin_ms
        self._hours: dict[int, tuple[Fault, ...]] = {}

    def between(self, after_ms: int, upto_ms: int) -> list[Fault]:
        """Faults that begin in ``(after_ms, upto_ms]``, in time order."""
        if self._config.fault_rate <= 0 or not self._nodes or upto_ms <= after_ms:
            return []
        first = max(0, (after_ms - self.origin_ms) // HOUR_MS)
        last = (upto_ms - self.origin_ms) // HOUR_MS
        out: list[Fault] = []
        for hour in range(first, last + 1):
            out.extend(f for f in self.hour(hour) if after_ms < f.at_ms <= upto_ms)
        return out

    def hour(self, hour: int) -> tuple[Fault, ...]:
        cached = self._hours.get(hour)
        if cached is None:
            cached = self._draw(hour)
            if len(self._hours) > 64:
                self._hours.clear()
            self._hours[hour] = cached
        return cached

    def _draw(self, hour: int) -> tuple[Fault, ...]:
        config = self._config
        rng = random.Random(f"fedsched-sim/{config.seed}/{self._cluster}/faults/{hour}")
        per_hour = config.fault_rate * len(self._nodes)
        start = self.origin_ms + hour * HOUR_MS
        offset = 0.0
        faults: list[Fault] = []
        while True:
            offset += rng.expovariate(per_hour) * HOUR_MS
            if offset >= HOUR_MS:
                return tuple(faults)
            node = self._nodes[rng.randrange(len(self._nodes))]
            roll = rng.random()
            duration = ms(rng.uniform(config.fault_min_s, config.fault_max_s))
            at = start + int(offset)
            number = len(faults)
            if node.gpus and roll < 0.60:
                gpu, xid = rng.randrange(node.gpus), rng.choice((79, 48))
                fault = Fault(at, at + duration, hour, number, FaultKind.GPU_FAILURE, node.name, gpu, xid)
                if node.npus:
                    fault = self._on_npu(fault, node, hour, number, mixed=True)
            elif node.npus and roll < 0.60:
                fault = Fault(at, at + duration, hour, number, FaultKind.NPU_FAILURE, node.name)
                fault = self._on_npu(fault, node, hour, number, mixed=False)
            elif roll < 0.85:
                fault = Fault(at, at + duration, hour, len(faults), FaultKind.NODE_CORDONED, node.name)
            else:
                fault = Fault(at, at + duration, hour, len(faults), FaultKind.NODE_LOST, node.name)
            faults.append(fault)

    def _on_npu(self, fault: Fault, node: NodeSpec, hour: int, number: int, *, mixed: bool) -> Fault:
        """A device failure on a node with NPUs, drawn from the fault's own generator: on a mixed node
        whether it is an NPU's (in proportion to the NPUs among its devices; else ``fault`` as it is),
        and which NPU fails with what code."""
        rng = random.Random(f"fedsched-sim/{self._config.seed}/{self._cluster}/faults/{hour}/{number}/npu")
        if mixed and rng.randrange(node.gpus + node.npus) < node.gpus:
            return fault
        npu, code = rng.randrange(node.npus), rng.choice(NPU_ERRORS)
        return replace(fault, kind=FaultKind.NPU_FAILURE, gpu=None, xid=None, npu=npu, npu_error=code)


NPU_HBM_ECC = 0x80E01809
"""Ascend event: multi-bit ECC errors found in the NPU's HBM (counted in ``hbm_ecc_uncorrected``)."""
NPU_AI_CORE = 0x80C98000
"""Ascend event: the AI Core's instruction data failed verification (the task on it fails)."""
NPU_ERRORS = (NPU_HBM_ECC, NPU_AI_CORE)


@dataclass(frozen=True, slots=True)
class RunFailure:
    after_ms: int
    """How long after the start the run fails."""
    exit_code: int
    reason: ReasonCode


def run_failure(
    config: SimConfig, cluster: str, job: str, run: int, runtime_ms: int | None, *, forced: RunFailure | None = None
) -> RunFailure | None:
    """Whether this run fails on its own, when and how. ``forced`` (from the job's labels) wins."""
    if forced is not None:
        return forced
    if config.job_failure_rate <= 0:
        return None
    rng = random.Random(f"fedsched-sim/{config.seed}/{cluster}/fail/{job}/{run}")
    if rng.random() >= config.job_failure_rate:
        return None
    span = runtime_ms if runtime_ms is not None else config.default_runtime_s * 1000
    after = int(span * rng.uniform(0.05, 0.95))
    if rng.random() < 0.3:
        return RunFailure(after, 137, ReasonCode.OUT_OF_MEMORY)
    return RunFailure(after, 1, ReasonCode.NON_ZERO_EXIT)


_BUSY = {
    JobKind.TRAINING: (80, 98),
    JobKind.FINE_TUNE: (70, 95),
    JobKind.BATCH: (40, 90),
    JobKind.INFERENCE: (20, 70),
    JobKind.NOTEBOOK: (20, 60),
}


@dataclass(frozen=True, slots=True)
class Usage:
    utilisation_pct: int
    memory_share_permille: int
    """Share of its device memory (GPU or NPU, and host memory) the job holds, in thousandths."""


def usage_draw(config: SimConfig, cluster: str, job: str, run: int, window: int, kind: JobKind, idle: bool) -> Usage:
    """The job's utilisation over one usage window (of its GPUs and NPUs alike); an idle notebook uses 0-3%
    and holds little memory."""
    rng = random.Random(f"fedsched-sim/{config.seed}/{cluster}/usage/{job}/{run}/{window}")
    if idle:
        return Usage(rng.randint(0, 3), rng.randint(150, 350))
    low, high = _BUSY[kind]
    pct = rng.randint(low, high)
    return Usage(pct, 300 + pct * 6)


__all__ = [
    "NPU_AI_CORE",
    "NPU_ERRORS",
    "NPU_HBM_ECC",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "RunFailure",
    "Usage",
    "run_failure",
    "usage_draw",
]
