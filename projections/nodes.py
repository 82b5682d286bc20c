"""Resource profile of each node: capacity, allocation, health, stability, fitness; keyed ``cluster/node``.

Called by the projection hosts. Pure. Inputs: ``NodeObserved`` (a full snapshot; older generations are
ignored), ``NodeRemoved``, ``GpuHealthReported`` (cumulative counters), ``NodeUsageReported``, and
the job stage's allocation deltas. Outputs: ``ResourceProfileUpdated`` when the profile changes, the
node's per-model capacity for the fleet stage, and usage pieces (with the node's GPU model filled in)
for the cluster stage, which prices them.

Health is an integer score out of 1000: the mean of the GPUs' states (ok 1000, degraded 500,
failed 0) less a penalty for recent failures that halves every ``HALF_LIFE_MS``. Stability is
failures per 1,000 GPU-hours observed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from events.catalog.base import Event
from events.catalog.inventory import GpuHealthReported, NodeObserved, NodeRemoved, NodeUsageReported
from events.catalog.profiles import GpuModelProfile, Quantities, ResourceProfileUpdated
from events.catalog.types import ClusterId, Health, NodeId
from events.envelope import Envelope
from projections.core import Applied, Emitted, Input, Output, Routed, split_key
from projections.deltas import NodeAllocation, NodeCapacity, QueueAllocation, UsageInterval, UsageSample

STAGE = "nodes"
HALF_LIFE_MS = 24 * 3600 * 1000
FAILURE_PENALTY = 200
RECENT_FAILURES = 16
_HEALTH_POINTS = {Health.OK: 1000, Health.DEGRADED: 500, Health.FAILED: 0}
_HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    model: str
    memory_mib: int
    health: Health = Health.OK
    xid_errors: int = 0
    ecc_uncorrected: int = 0


@dataclass(frozen=True, slots=True)
class Allocation:
    job_id: str
    run: int
    tenant: str
    cpu_milli: int
    memory_mib: int
    gpu_milli: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class NodeProfile:
    cluster: str
    node: str
    present: bool = False
    generation: int = -1
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: tuple[Gpu, ...] = ()
    npus: int = 0
    nvlink_domain: str | None = None
    rdma_fabric: str | None = None
    schedulable: bool = False
    allocations: tuple[Allocation, ...] = ()
    first_seen_ms: int | None = None
    last_seen_ms: int = 0
    observed_gpu_ms: int = 0
    failures: int = 0
    recent_failures_ms: tuple[int, ...] = ()
    gpu_utilisation_pct: int = 0
    version: int = 0
    last_output: ResourceProfileUpdated | None = None
    applied: Applied = field(default_factory=Applied)

    def model_of(self, index: int) -> str:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu.model
        return self.gpus[0].model if self.gpus else ""


class NodeStage:
    name = STAGE

    def keys(self, envelope: Envelope) -> Sequence[str]:
        data = envelope.data
        if isinstance(data, NodeObserved | NodeRemoved | GpuHealthReported | NodeUsageReported):
            return (f"{data.cluster}/{data.node}",)
        return ()

    def reduce(self, entity: NodeProfile | None, item: Input) -> tuple[NodeProfile | None, list[Emitted]]:
        cluster, node = split_key(item.key)
        profile = entity or NodeProfile(cluster=cluster, node=node)
        if profile.applied.seen(item):
            return entity, []
        before = profile
        profile, emitted = _apply(profile, item.item, item.time_ms)
        profile = replace(profile, applied=profile.applied.after(item))
        profile, outputs = _outputs(before, profile)
        return profile, emitted + outputs


def _apply(profile: NodeProfile, item: Event | object, now: int) -> tuple[NodeProfile, list[Emitted]]:
    if isinstance(item, NodeObserved):
        if item.generation <= profile.generation:
            return profile, []
        return _observed(_seen(profile, now), item), []
    if isinstance(item, NodeRemoved):
        if item.generation < profile.generation:
            return profile, []
        return replace(_seen(profile, now), present=False, schedulable=False, generation=item.generation), []
    if isinstance(item, GpuHealthReported):
        return _health(_seen(profile, now), item, now), []
    if isinstance(item, NodeUsageReported):
        return _usage(_seen(profile, now), item, now)
    if isinstance(item, NodeAllocation):
        return _allocation(profile, item), []
    if isinstance(item, QueueAllocation):
        model = profile.gpus[0].model if (profile.gpus and item.gpu_milli) else None
        return profile, [Routed("quota", item.queue_key, replace(item, gpu_model=model))]
    if isinstance(item, UsageInterval):
        return profile, [Routed("clusters", profile.cluster, replace(item, gpu_model=_main_model(profile)))]
    return profile, []


def _seen(profile: NodeProfile, now: int) -> NodeProfile:
    gpus = sum(1 for g in profile.gpus if g.health is not Health.FAILED)
    observed = profile.observed_gpu_ms
    if profile.first_seen_ms is not None and now > profile.last_seen_ms:
        observed += gpus * (now - profile.last_seen_ms)
    return replace(
        profile,
        first_seen_ms=profile.first_seen_ms if profile.first_seen_ms is not None else now,
        last_seen_ms=max(profile.last_seen_ms, now),
        observed_gpu_ms=observed,
    )


def _observed(profile: NodeProfile, event: NodeObserved) -> NodeProfile:
    known = {gpu.index: gpu for gpu in profile.gpus}
    gpus = []
    for device in event.gpus:
        old = known.get(device.index)
        gpus.append(
            Gpu(
                device.index,
                device.model,
                device.memory_mib,
                device.health,
                old.xid_errors if old else 0,
                old.ecc_uncorrected if old else 0,
            )
        )
    failures, recent = _count_failures(profile, gpus, profile.last_seen_ms)
    return replace(
        profile,
        present=True,
        generation=event.generation,
        cpu_milli=event.cpu_milli,
        memory_mib=event.memory_mib,
        gpus=tuple(gpus),
        npus=len(event.npus),
        nvlink_domain=event.nvlink_domain,
        rdma_fabric=event.rdma_fabric,
        schedulable=event.schedulable,
        failures=failures,
        recent_failures_ms=recent,
    )


def _health(profile: NodeProfile, event: GpuHealthReported, now: int) -> NodeProfile:
    samples = {sample.index: sample for sample in event.gpus}
    gpus = []
    extra_failures = 0
    for gpu in profile.gpus:
        sample = samples.get(gpu.index)
        if sample is None:
            gpus.append(gpu)
            continue
        new_xid = max(0, sample.xid_errors - gpu.xid_errors)
        new_ecc = max(0, (sample.ecc_uncorrected or 0) - gpu.ecc_uncorrected)
        extra_failures += 1 if (new_xid or new_ecc) and sample.health is not Health.FAILED else 0
        gpus.append(
            replace(
                gpu,
                health=sample.health,
                xid_errors=max(gpu.xid_errors, sample.xid_errors),
                ecc_uncorrected=max(gpu.ecc_uncorrected, sample.ecc_uncorrected or 0),
            )
        )
    failures, recent = _count_failures(profile, gpus, now)
    recent = (recent + (now,) * extra_failures)[-RECENT_FAILURES:]
    return replace(profile, gpus=tuple(gpus), failures=failures + extra_failures, recent_failures_ms=recent)


def _count_failures(profile: NodeProfile, gpus: Sequence[Gpu], now: int) -> tuple[int, tuple[int, ...]]:
    """A GPU that turns failed is one failure."""
    before = {gpu.index: gpu.health for gpu in profile.gpus}
    turned = sum(1 for gpu in gpus if gpu.health is Health.FAILED and before.get(gpu.index) is not Health.FAILED)
    if not profile.gpus:  # first sight: a node that arrives with failed GPUs did not fail under us
        return profile.failures, profile.recent_failures_ms
    recent = (profile.recent_failures_ms + (now,) * turned)[-RECENT_FAILURES:]
    return profile.failures + turned, recent


def _usage(profile: NodeProfile, event: NodeUsageReported, now: int) -> tuple[NodeProfile, list[Emitted]]:
    pct = sum(g.utilisation_pct for g in event.gpus) // len(event.gpus) if event.gpus else 0
    tenants = {a.job_id: a.tenant for a in profile.allocations}
    emitted: list[Emitted] = []
    for job in event.jobs:
        if not job.gpu_indices:
            continue
        model = profile.model_of(job.gpu_indices[0])
        sample = UsageSample(
            job.job_id,
            tenants.get(job.job_id, ""),
            "",
            profile.cluster,
            model,
            len(job.gpu_indices),
            job.utilisation_pct,
            event.window_ms,
            now,
        )
        emitted.append(Routed("clusters", profile.cluster, sample))
    return replace(profile, gpu_utilisation_pct=pct), emitted


def _allocation(profile: NodeProfile, delta: NodeAllocation) -> NodeProfile:
    others = tuple(a for a in profile.allocations if a.job_id != delta.job_id)
    current = next((a for a in profile.allocations if a.job_id == delta.job_id), None)
    if delta.held:
        if current is not None and current.run > delta.run:
            return profile
        new = Allocation(delta.job_id, delta.run, delta.tenant, delta.cpu_milli, delta.memory_mib, delta.gpu_milli)
        return replace(profile, allocations=tuple(sorted((*others, new), key=lambda a: a.job_id)))
    if current is not None and current.run == delta.run:
        return replace(profile, allocations=others)
    return profile


def _main_model(profile: NodeProfile) -> str:
    return profile.gpus[0].model if profile.gpus else ""


def health_milli(profile: NodeProfile) -> int:
    if not profile.gpus:
        return 1000 if profile.present else 0
    base = sum(_HEALTH_POINTS[gpu.health] for gpu in profile.gpus) // len(profile.gpus)
    penalty = 0
    for moment in profile.recent_failures_ms:
        age = max(0, profile.last_seen_ms - moment)
        penalty += FAILURE_PENALTY >> min(30, age // HALF_LIFE_MS)
    return max(0, base - penalty)


def failures_per_kgpu_hour_milli(profile: NodeProfile) -> int:
    if profile.observed_gpu_ms <= 0:
        return 0
    # failures / (observed GPU-hours / 1000), in thousandths
    return profile.failures * 1000 * 1000 * _HOUR_MS // profile.observed_gpu_ms


def allocated_by_gpu(profile: NodeProfile) -> dict[int, int]:
    used: dict[int, int] = {}
    for allocation in profile.allocations:
        for index, milli in allocation.gpu_milli:
            used[index] = used.get(index, 0) + milli
    return used


def profile_event(profile: NodeProfile, version: int) -> ResourceProfileUpdated:
    used = allocated_by_gpu(profile)
    usable = [g for g in profile.gpus if g.health is not Health.FAILED] if profile.present else []
    capacity_gpu = 1000 * len(usable)
    allocated_gpu = sum(used.values())
    free_gpu = sum(max(0, 1000 - used.get(g.index, 0)) for g in usable)
    models = []
    for model in sorted({g.model for g in profile.gpus}):
        of_model = [g for g in usable if g.model == model]
        free_each = [max(0, 1000 - used.get(g.index, 0)) for g in of_model]
        models.append(
            GpuModelProfile(
                model=model,
                gpus=sum(1 for g in profile.gpus if g.model == model),
                memory_mib=max((g.memory_mib for g in profile.gpus if g.model == model), default=0),
                capacity_milli=1000 * len(of_model),
                allocated_milli=sum(used.get(g.index, 0) for g in profile.gpus if g.model == model),
                free_milli=sum(free_each),
                largest_free_block_milli=1000 * sum(1 for f in free_each if f == 1000),
            )
        )
    cpu_alloc = sum(a.cpu_milli for a in profile.allocations)
    mem_alloc = sum(a.memory_mib for a in profile.allocations)
    capacity = Quantities(
        cpu_milli=profile.cpu_milli if profile.present else 0,
        memory_mib=profile.memory_mib if profile.present else 0,
        gpu_milli=capacity_gpu,
        npus=profile.npus if profile.present else 0,
    )
    allocated = Quantities(cpu_milli=cpu_alloc, memory_mib=mem_alloc, gpu_milli=allocated_gpu)
    free = Quantities(
        cpu_milli=max(0, capacity.cpu_milli - cpu_alloc),
        memory_mib=max(0, capacity.memory_mib - mem_alloc),
        gpu_milli=free_gpu,
        npus=capacity.npus,
    )
    health = health_milli(profile)
    stability = failures_per_kgpu_hour_milli(profile)
    return ResourceProfileUpdated(
        cluster=ClusterId(profile.cluster),
        node=NodeId(profile.node),
        version=version,
        capacity=capacity,
        allocated=allocated,
        free=free,
        gpu_models=tuple(models),
        health_milli=health,
        failures_per_kgpu_hour_milli=stability,
        congestion_milli=0,
        fit_training=profile.present
        and health >= 900
        and (len(profile.gpus) >= 8 or profile.nvlink_domain is not None or profile.rdma_fabric is not None),
        fit_inference=profile.present and health >= 800 and stability < 5000,
        last_seen_ms=profile.last_seen_ms,
        stale=not profile.present,
    )


def capacity_delta(profile: NodeProfile) -> NodeCapacity:
    if not profile.present:
        return NodeCapacity(profile.cluster, profile.node, False)
    event = profile_event(profile, 1)
    return NodeCapacity(
        profile.cluster,
        profile.node,
        True,
        tuple((m.model, m.capacity_milli, m.free_milli) for m in event.gpu_models),
    )


def _outputs(before: NodeProfile, after: NodeProfile) -> tuple[NodeProfile, list[Emitted]]:
    if after.first_seen_ms is None:  # only deltas so far, no sight of the node: nothing to publish
        return after, []
    candidate = profile_event(after, after.version + 1)
    previous = after.last_output
    if previous is not None and not _worth_publishing(previous, candidate):
        return after, []
    after = replace(after, version=after.version + 1, last_output=candidate)
    emitted: list[Emitted] = [Output(candidate, f"profile:{after.cluster}/{after.node}:v{after.version}")]
    if previous is None or capacity_delta(before) != capacity_delta(after):
        emitted.append(Routed("fleet", "fleet", capacity_delta(after)))
    return after, emitted


HEARTBEAT_MS = 300_000


def _worth_publishing(previous: ResourceProfileUpdated, candidate: ResourceProfileUpdated) -> bool:
    """A change of anything but the time seen, or a heartbeat so readers can tell a node is alive."""
    same = candidate.model_copy(update={"version": previous.version, "last_seen_ms": previous.last_seen_ms})
    return same != previous or candidate.last_seen_ms - previous.last_seen_ms >= HEARTBEAT_MS
