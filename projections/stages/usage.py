"""Utilisation and cost: GPU and NPU time allocated and used, and its cost, per tenant x cluster x
device kind x model x hour.

Called by the projection hosts; keyed ``tenant|cluster|kind|model|hour`` (kind "gpu" or "npu"). Pure.
Allocated time comes from finished runs (priced by the cluster stage); used time from usage reports,
which measure GPUs and NPUs alike (each bucket counts the samples that measured it: a bucket no report
measured has no used share to tell, which is not the same as one measured idle). Idle allocated time is
allocated minus used.
Each run contributes once per hour bucket (kept by job and run), so a replayed delta cannot count twice.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import field

from events.wire.envelope import Envelope
from projections.stages.clusters import PricedUsage
from projections.stages.core import Applied, Emitted, Input, Silent, evolve, record

STAGE = "usage"


@record
class UsageBucket:
    tenant: str
    cluster: str
    gpu_model: str
    hour_ms: int
    allocated_milli_ms: int = 0
    used_milli_ms: int = 0
    cost_micro: int = 0
    currency: str = ""
    runs: tuple[tuple[str, int, str], ...] = ()
    """(job, run, part) of every run counted here (a part: the run's replicas on one node)."""
    projects: tuple[tuple[str, int, int], ...] = ()  # (project, allocated milli-ms, cost micro)
    applied: Applied = field(default_factory=Applied)
    kind: str = "gpu"
    """The device kind counted: "gpu" (``gpu_model`` a GPU model) or "npu" (an NPU model, ``*_milli_ms``
    milli-NPU x ms). GPU-hour budgets count "gpu" buckets only."""
    samples: int = 0
    """Usage samples that measured it (0: nothing measured its devices in the hour)."""

    @property
    def allocated_gpu_hours(self) -> float:
        return self.allocated_milli_ms / 1000 / 3_600_000

    @property
    def idle_milli_ms(self) -> int:
        return max(0, self.allocated_milli_ms - self.used_milli_ms)


class UsageStage(Silent[UsageBucket]):
    name = STAGE
    event_types: tuple[type, ...] = ()  # fed by other stages only

    def keys(self, envelope: Envelope) -> Sequence[str]:
        return ()

    def reduce(self, entity: UsageBucket | None, item: Input) -> tuple[UsageBucket | None, list[Emitted]]:
        tenant, cluster, kind, model, hour = item.key.split("|")
        bucket = entity or UsageBucket(tenant, cluster, model, int(hour), kind=kind)
        piece = item.item
        if bucket.applied.seen(item) or not isinstance(piece, PricedUsage):
            return entity, []
        if piece.sample:
            bucket = evolve(
                bucket, used_milli_ms=bucket.used_milli_ms + piece.used_milli_ms, samples=bucket.samples + 1
            )
        else:
            run = (piece.job_id, piece.run, piece.part)
            at = bisect_left(bucket.runs, run)
            if at < len(bucket.runs) and bucket.runs[at] == run:
                return entity, []
            projects = {name: (alloc, cost) for name, alloc, cost in bucket.projects}
            alloc, cost = projects.get(piece.project, (0, 0))
            projects[piece.project] = (alloc + piece.allocated_milli_ms, cost + piece.cost_micro)
            bucket = evolve(
                bucket,
                allocated_milli_ms=bucket.allocated_milli_ms + piece.allocated_milli_ms,
                cost_micro=bucket.cost_micro + piece.cost_micro,
                currency=piece.currency or bucket.currency,
                runs=(*bucket.runs[:at], run, *bucket.runs[at:]),
                projects=tuple(sorted((name, a, c) for name, (a, c) in projects.items())),
            )
        applied = bucket.applied.after(item)
        return (bucket if applied is bucket.applied else evolve(bucket, applied=applied)), []
