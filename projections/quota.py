"""Quota usage per tenant and queue: used, guaranteed, limit, borrowed, GPU-hours consumed.

Called by the projection hosts; keyed ``tenant/queue``. Pure. Inputs: ``QuotaSet`` (replaces the
queue's quota), and the allocations of its jobs' runs (via the node stage, which names the GPU model).
Holdings are kept per job, so a duplicate or a release before its hold cannot skew a total. GPU-hours
consumed (the input of fair share) grow when a run is released, by its GPU milli x its duration.
Borrowed is what is used above the guarantee (within the limit): capacity lent by the cohort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from events.catalog.governance import QuotaSet
from events.catalog.profiles import QuotaUsage, QuotaUsageUpdated
from events.catalog.types import QueueId, ResourceKind, TenantId
from events.envelope import Envelope
from projections.core import Applied, Emitted, Input, Output
from projections.deltas import QueueAllocation

STAGE = "quota"
_HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Holding:
    job_id: str
    run: int
    cpu_milli: int
    memory_mib: int
    gpu_milli: int
    gpu_model: str | None


@dataclass(frozen=True, slots=True)
class QuotaLineState:
    resource: str
    gpu_model: str | None
    guaranteed: int
    limit: int | None


@dataclass(frozen=True, slots=True)
class QueueQuota:
    tenant: str
    queue: str
    lines: tuple[QuotaLineState, ...] = ()
    holdings: tuple[Holding, ...] = ()
    released_runs: tuple[tuple[str, int], ...] = ()
    gpu_milli_ms_consumed: int = 0
    period_start_ms: int = 0
    version: int = 0
    last_output: QuotaUsageUpdated | None = None
    applied: Applied = field(default_factory=Applied)

    def used(self, resource: str, gpu_model: str | None) -> int:
        total = 0
        for h in self.holdings:
            if resource == ResourceKind.CPU:
                total += h.cpu_milli
            elif resource == ResourceKind.MEMORY:
                total += h.memory_mib
            elif resource == ResourceKind.GPU and (gpu_model is None or h.gpu_model == gpu_model):
                total += h.gpu_milli
        return total


class QuotaStage:
    name = STAGE

    def keys(self, envelope: Envelope) -> Sequence[str]:
        data = envelope.data
        if isinstance(data, QuotaSet):
            return (f"{data.tenant}/{data.queue}",)
        return ()

    def reduce(self, entity: QueueQuota | None, item: Input) -> tuple[QueueQuota | None, list[Emitted]]:
        tenant, _, queue = item.key.partition("/")
        quota = entity or QueueQuota(tenant, queue, period_start_ms=item.time_ms)
        if quota.applied.seen(item):
            return entity, []
        data = item.item
        if isinstance(data, QuotaSet):
            lines = tuple(
                sorted(
                    (
                        QuotaLineState(line.resource.value, line.gpu_model, line.guaranteed, line.limit)
                        for line in data.lines
                    ),
                    key=lambda line: (line.resource, line.gpu_model or ""),
                )
            )
            quota = replace(quota, lines=lines)
        elif isinstance(data, QueueAllocation):
            quota = _allocation(quota, data, item.time_ms)
        quota = replace(quota, applied=quota.applied.after(item))
        if quota.tenant == "unknown" and not quota.holdings and not quota.gpu_milli_ms_consumed:
            # Held only while a placement waited for its submission to be read: nothing to keep.
            return None, []
        return _output(quota)


def _allocation(quota: QueueQuota, delta: QueueAllocation, now: int) -> QueueQuota:
    others = tuple(h for h in quota.holdings if h.job_id != delta.job_id)
    current = next((h for h in quota.holdings if h.job_id == delta.job_id), None)
    if delta.held:
        if (delta.job_id, delta.run) in quota.released_runs or (current is not None and current.run > delta.run):
            return quota
        holding = Holding(delta.job_id, delta.run, delta.cpu_milli, delta.memory_mib, delta.gpu_milli, delta.gpu_model)
        return replace(quota, holdings=tuple(sorted((*others, holding), key=lambda h: h.job_id)))
    if (delta.job_id, delta.run) in quota.released_runs:
        return quota
    consumed = delta.gpu_milli * max(0, (delta.at_ms or now) - delta.since_ms)
    kept = others if current is not None and current.run == delta.run else quota.holdings
    return replace(
        quota,
        holdings=kept,
        released_runs=tuple(sorted((*quota.released_runs, (delta.job_id, delta.run))))[-10_000:],
        gpu_milli_ms_consumed=quota.gpu_milli_ms_consumed + consumed,
    )


def usage_event(quota: QueueQuota, version: int) -> QuotaUsageUpdated:
    keys: dict[tuple[str, str | None], QuotaLineState | None] = {
        (line.resource, line.gpu_model): line for line in quota.lines
    }
    for holding in quota.holdings:
        if holding.gpu_milli and (ResourceKind.GPU.value, holding.gpu_model) not in keys:
            keys[(ResourceKind.GPU.value, holding.gpu_model)] = None
    usage = []
    for (resource, model), line in sorted(keys.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        used = quota.used(resource, model)
        guaranteed = line.guaranteed if line else 0
        limit = line.limit if line else None
        usage.append(
            QuotaUsage(
                resource=ResourceKind(resource),
                gpu_model=model,
                used=used,
                guaranteed=guaranteed,
                limit=limit,
                borrowed=max(0, used - guaranteed) if line else 0,
            )
        )
    return QuotaUsageUpdated(
        tenant=TenantId(quota.tenant),
        queue=QueueId(quota.queue),
        version=version,
        usage=tuple(usage),
        gpu_hours_milli=quota.gpu_milli_ms_consumed // _HOUR_MS,
        period_start_ms=quota.period_start_ms,
    )


def _output(quota: QueueQuota) -> tuple[QueueQuota, list[Emitted]]:
    candidate = usage_event(quota, quota.version + 1)
    previous = quota.last_output
    if previous is not None and candidate.model_copy(update={"version": previous.version}) == previous:
        return quota, []
    quota = replace(quota, version=quota.version + 1, last_output=candidate)
    return quota, [Output(candidate, f"quota:{quota.tenant}/{quota.queue}:v{quota.version}")]
