"""Quota usage per tenant and queue: used, guaranteed, limit, borrowed, GPU-hours consumed.

Called by the projection hosts; keyed ``tenant/queue``. Pure. Inputs: ``QuotaSet`` (replaces the
queue's quota, unless it is no later than the latest its author set: by time, then the order read,
``Latest``, per author, since governance's grants carry the log's time and an operator's the API's clock;
so an old quota appended again does not come back), and the allocations of its jobs' runs (via the node
stage, which names the GPU model).
Holdings are kept per job, so a duplicate or a release before its hold cannot skew a total. GPU-hours
consumed (the input of fair share) grow when a run is released, by its GPU milli x its duration.
Borrowed is what is used above the guarantee (within the limit): capacity lent by the cohort.

Used amounts are running totals kept beside the holdings, and the holdings and the released runs are
persistent collections (``projections.stages.persistent``: a version is made by changing its predecessor's
state in place, not by copying it), so a delta costs the size of what it changes, not of the queue's
history. The version grows with every input that changes what the usage event says; the event is
built only when published.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field

from events.catalog.governance import QuotaSet
from events.catalog.profiles import QuotaUsage, QuotaUsageUpdated
from events.catalog.types import QueueId, ResourceKind, TenantId
from events.wire.envelope import Envelope, Latest
from projections.stages.core import Applied, Emitted, Input, Output, evolve, record
from projections.stages.deltas import QueueAllocation
from projections.stages.persistent import PMap, RunSet

STAGE = "quota"
_HOUR_MS = 3_600_000
RELEASED_RUNS = 10_000
_CPU, _MEMORY, _GPU = ResourceKind.CPU.value, ResourceKind.MEMORY.value, ResourceKind.GPU.value
_NPU = ResourceKind.NPU.value

UsageFacts = tuple[tuple[tuple[str, str | None, int, int, int | None, int], ...], int, int, int]
"""What a usage event says but its version: (resource, GPU model, used, guaranteed, limit, borrowed)
per line, GPU-hours in thousandths, start of the period, NPU-hours in thousandths."""


@record
class Holding:
    job_id: str
    run: int
    cpu_milli: int
    memory_mib: int
    gpu_milli: int
    gpu_model: str | None
    npus: int = 0
    npu_model: str | None = None


@record
class QuotaLineState:
    resource: str
    gpu_model: str | None
    guaranteed: int
    limit: int | None


@record
class Used:
    """Running totals of a queue's holdings: CPU, memory, GPU, NPU, and GPU and NPU by model (with the
    number of holdings of each model, so a model leaves when its last holding does)."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = 0
    gpu_by_model: Mapping[str | None, tuple[int, int]] = field(default_factory=dict)
    npus: int = 0
    npu_by_model: Mapping[str | None, tuple[int, int]] = field(default_factory=dict)

    def plus(self, holding: Holding, sign: int) -> Used:
        by_model = _by_model(self.gpu_by_model, holding.gpu_model, holding.gpu_milli, sign)
        npu_by_model = _by_model(self.npu_by_model, holding.npu_model, holding.npus, sign)
        return Used(
            self.cpu_milli + sign * holding.cpu_milli,
            self.memory_mib + sign * holding.memory_mib,
            self.gpu_milli + sign * holding.gpu_milli,
            by_model,
            self.npus + sign * holding.npus,
            npu_by_model,
        )


def _by_model(
    by_model: Mapping[str | None, tuple[int, int]], model: str | None, amount: int, sign: int
) -> Mapping[str | None, tuple[int, int]]:
    if not amount:
        return by_model
    out = dict(by_model)
    held, count = out.get(model, (0, 0))
    if count + sign == 0:
        del out[model]
    else:
        out[model] = (held + sign * amount, count + sign)
    return out


@record
class QueueQuota:
    tenant: str
    queue: str
    lines: tuple[QuotaLineState, ...] = ()
    holdings: PMap[str, Holding] = field(default_factory=PMap)
    """By job and part (``job@cluster/node``: a run holds its queue node by node, a spread run in each of
    its clusters; ``job`` for a whole-run hold)."""
    released_runs: RunSet = field(default_factory=lambda: RunSet(cap=RELEASED_RUNS))
    """(job, run, part) triples; the latest ``RELEASED_RUNS`` in their sorted order (a full set drops its
    smallest)."""
    gpu_milli_ms_consumed: int = 0
    npu_milli_ms_consumed: int = 0
    """NPU time of the runs given back (1000 per NPU x ms), apart from GPU time."""
    period_start_ms: int = 0
    version: int = 0
    published: UsageFacts | None = None
    """What version ``version`` of the usage event says."""
    applied: Applied = field(default_factory=Applied)
    totals: Used = field(default_factory=Used)
    set_at: tuple[tuple[str, Latest], ...] = ()
    """The latest ``QuotaSet`` applied of each author (``set_by``), by author."""

    def used(self, resource: str, gpu_model: str | None) -> int:
        if resource == _CPU:
            return self.totals.cpu_milli
        if resource == _MEMORY:
            return self.totals.memory_mib
        if resource == _GPU:
            if gpu_model is None:
                return self.totals.gpu_milli
            return self.totals.gpu_by_model.get(gpu_model, (0, 0))[0]
        if resource == _NPU:
            if gpu_model is None:
                return self.totals.npus
            return self.totals.npu_by_model.get(gpu_model, (0, 0))[0]
        return 0


class QuotaStage:
    name = STAGE
    event_types = (QuotaSet,)

    def keys(self, envelope: Envelope) -> Sequence[str]:
        data = envelope.data
        if isinstance(data, QuotaSet):
            return (f"{data.tenant}/{data.queue}",)
        return ()

    def reduce(self, entity: QueueQuota | None, item: Input) -> tuple[QueueQuota | None, list[Emitted]]:
        after, emitted = self.fold(entity, item)
        return after, [*emitted, *self.publish(entity, after)]

    def fold(self, entity: QueueQuota | None, item: Input) -> tuple[QueueQuota | None, list[Emitted]]:
        tenant, _, queue = item.key.partition("/")
        data = item.item
        # When it happened: a hold or release says so itself (the job stage may emit it when a cause read
        # late completes the job's history, under a later input). The period starts at the earliest.
        at = (data.at_ms or item.time_ms) if isinstance(data, QueueAllocation) else item.time_ms
        quota = entity or QueueQuota(tenant, queue, period_start_ms=at)
        if quota.applied.seen(item):
            return entity, []
        before = quota
        if isinstance(data, QuotaSet):
            authors = dict(quota.set_at)
            stamp = authors.get(data.set_by, Latest()).after(item.time_ms, item.envelope_id)
            if stamp is None:
                return entity, []
            authors[data.set_by] = stamp
            lines = tuple(
                sorted(
                    (
                        QuotaLineState(line.resource.value, line.gpu_model, line.guaranteed, line.limit)
                        for line in data.lines
                    ),
                    key=lambda line: (line.resource, line.gpu_model or ""),
                )
            )
            quota = evolve(quota, lines=lines, set_at=tuple(sorted(authors.items())))
        elif isinstance(data, QueueAllocation):
            quota = _allocation(quota, data, item.time_ms)
        if at < quota.period_start_ms:
            quota = evolve(quota, period_start_ms=at)
        applied = quota.applied.after(item)
        if quota is before and entity is not None:
            # Changed nothing (a stored queue's usage facts are its latest version's): positions at most.
            return (entity if applied is before.applied else evolve(entity, applied=applied)), []
        if applied is not quota.applied:
            quota = evolve(quota, applied=applied)
        # A queue is kept when it empties: dropping it would restart its versions, and a reader that saw
        # v5 ignores a new v1 (same id, new content).
        return _versioned(quota), []

    def publish(self, before: QueueQuota | None, after: QueueQuota | None) -> list[Output]:
        if after is None or after.published is None or after.version <= (before.version if before else 0):
            return []
        event = usage_event_of(after, after.published, after.version)
        return [Output(event, f"quota:{after.tenant}/{after.queue}:v{after.version}")]


def _allocation(quota: QueueQuota, delta: QueueAllocation, now: int) -> QueueQuota:
    """A run holds (or gives back) its part on one node: holdings are kept per job and part, so a run over
    nodes of several models counts each part under its own model. A part is named by its cluster and node:
    a run spread over clusters may hold nodes of one name in two of them, each its own part."""
    holdings = quota.holdings
    part = f"{delta.cluster}/{delta.part}" if delta.part else ""
    key = f"{delta.job_id}@{part}" if part else delta.job_id
    current = holdings.get(key)
    run = (delta.job_id, delta.run, part)
    was_released = run in quota.released_runs
    if delta.held:
        if was_released or (current is not None and current.run > delta.run):
            return quota
        holding = Holding(
            delta.job_id,
            delta.run,
            delta.cpu_milli,
            delta.memory_mib,
            delta.gpu_milli,
            delta.gpu_model,
            delta.npus,
            delta.npu_model,
        )
        totals = quota.totals if current is None else quota.totals.plus(current, -1)
        return evolve(quota, holdings=holdings.set(key, holding), totals=totals.plus(holding, 1))
    if was_released:
        return quota
    held_ms = max(0, (delta.at_ms or now) - delta.since_ms)
    consumed = delta.gpu_milli * held_ms
    totals = quota.totals
    if current is not None and current.run == delta.run:
        holdings = holdings.remove(key)
        totals = totals.plus(current, -1)
    return evolve(
        quota,
        holdings=holdings,
        released_runs=quota.released_runs.add(run),
        gpu_milli_ms_consumed=quota.gpu_milli_ms_consumed + consumed,
        npu_milli_ms_consumed=quota.npu_milli_ms_consumed + 1000 * delta.npus * held_ms,
        totals=totals,
    )


def running_jobs(quota: QueueQuota) -> int:
    """Jobs holding the queue now (a run holds it node by node: one job, however many parts)."""
    return len({holding.job_id for _, holding in quota.holdings.items()})


def usage_facts(quota: QueueQuota) -> UsageFacts:
    keys: dict[tuple[str, str | None], QuotaLineState | None] = {
        (line.resource, line.gpu_model): line for line in quota.lines
    }
    for model in quota.totals.gpu_by_model:
        if (_GPU, model) not in keys:
            keys[(_GPU, model)] = None
    for model in quota.totals.npu_by_model:
        if (_NPU, model) not in keys:
            keys[(_NPU, model)] = None
    usage = []
    for (resource, model), line in sorted(keys.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        used = quota.used(resource, model)
        guaranteed = line.guaranteed if line else 0
        usage.append(
            (
                resource,
                model,
                used,
                guaranteed,
                line.limit if line else None,
                max(0, used - guaranteed) if line else 0,
            )
        )
    npu_hours_milli = quota.npu_milli_ms_consumed // _HOUR_MS
    return tuple(usage), quota.gpu_milli_ms_consumed // _HOUR_MS, quota.period_start_ms, npu_hours_milli


def usage_event_of(quota: QueueQuota, facts: UsageFacts, version: int) -> QuotaUsageUpdated:
    usage, gpu_hours_milli, period_start_ms, npu_hours_milli = facts
    return QuotaUsageUpdated(
        tenant=TenantId(quota.tenant),
        queue=QueueId(quota.queue),
        version=version,
        usage=tuple(
            QuotaUsage(
                resource=ResourceKind(resource),
                gpu_model=model,
                used=used,
                guaranteed=guaranteed,
                limit=limit,
                borrowed=borrowed,
            )
            for resource, model, used, guaranteed, limit, borrowed in usage
        ),
        gpu_hours_milli=gpu_hours_milli,
        period_start_ms=period_start_ms,
        npu_hours_milli=npu_hours_milli,
    )


def usage_event(quota: QueueQuota, version: int) -> QuotaUsageUpdated:
    return usage_event_of(quota, usage_facts(quota), version)


def _versioned(quota: QueueQuota) -> QueueQuota:
    facts = usage_facts(quota)
    if facts == quota.published:
        return quota
    return evolve(quota, version=quota.version + 1, published=facts)
