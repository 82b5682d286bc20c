"""Resource profile of each node: capacity, allocation, health, stability, fitness; keyed ``cluster/node``.

Called by the projection hosts. Pure. Inputs: ``NodeObserved`` (a full snapshot; older generations are
ignored), ``NodeRemoved``, ``GpuHealthReported`` (cumulative counters), ``NodeUsageReported``, and
the job stage's allocation deltas. A snapshot or removal of a generation the node has reached, and a
health or usage report no later than the latest one applied (by time, then the order read: ``Latest``),
change nothing: a report appended again, however late, neither turns a recovered GPU back to failed nor
counts a job's GPU time twice. Outputs: ``ResourceProfileUpdated`` when the profile changes, the
node's per-model capacity for the fleet stage, and usage pieces (with the node's GPU model filled in)
for the cluster stage, which prices them.

Whose usage a report measured does not depend on the order the hosts read it in. A job's allocation
reaches a node through the job stage, one hop behind the node's own reports, so the distributed host
may read a report before the allocation it measured, where a rebuild (in time order) reads the
allocation first. A job's usage that names its run is that run's allocation's (held, or given back:
the last ``RELEASED_KEPT`` allocations given back are kept); until that allocation is read, it waits in
the profile (at most ``WAITING_USAGE`` of them; beyond, the oldest goes on as the unknown tenant's,
whole GPUs). A job's usage that names no run (a connector that cannot tell, a report from before
runs were named) is the allocation in force at the report's time, or the unknown tenant's, whole
GPUs, as work fedsched did not place is.

Health is an integer score out of 1000: the mean of the devices' states, GPUs and NPUs alike (ok 1000,
degraded 500, failed 0), less a penalty for recent failures that halves every ``HALF_LIFE_MS``. A device
that turns failed is one failure, and so is a new error a device reports that does not fail it (XID or
uncorrectable ECC for a GPU, a driver error or HBM ECC error for an NPU). Stability is failures per
1,000 device-hours observed (GPU-hours on a node without NPUs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

from events.catalog.base import Event
from events.catalog.inventory import GpuHealthReported, NodeObserved, NodeRemoved, NodeUsageReported
from events.catalog.profiles import GpuModelProfile, Quantities, ResourceProfileUpdated
from events.catalog.types import MAX_SAFE_INT, ClusterId, Health, NodeId
from events.wire.envelope import Envelope, Latest
from projections.stages.core import Applied, Emitted, Input, Output, Routed, evolve, record, split_key
from projections.stages.deltas import NodeAllocation, NodeCapacity, QueueAllocation, UsageInterval, UsageSample

STAGE = "nodes"
HALF_LIFE_MS = 24 * 3600 * 1000
FAILURE_PENALTY = 200
RECENT_FAILURES = 16
_HEALTH_POINTS = {Health.OK: 1000, Health.DEGRADED: 500, Health.FAILED: 0}
_HOUR_MS = 3_600_000
WAITING_USAGE = 64
"""Job usage a node holds for allocations it has not been told of yet (see the module docstring)."""
RELEASED_KEPT = 64
"""Allocations given back that a node keeps, for the reports read after their release."""

ModelFacts = tuple[str, int, int, int, int, int, int]
"""(model, GPUs, memory MiB, capacity milli, allocated milli, free milli, largest free block milli)."""
Quantity4 = tuple[int, int, int, int]
"""(milli-CPU, MiB, milli-GPU, NPUs)."""
ProfileFacts = tuple[Quantity4, Quantity4, Quantity4, tuple[ModelFacts, ...], int, int, bool, bool, bool]
"""What a node's profile event says but its version and time, as plain values: capacity, allocated
and free quantities, GPU models, health, stability, fit for training, fit for inference, stale."""


@record
class Gpu:
    index: int
    model: str
    memory_mib: int
    health: Health = Health.OK
    xid_errors: int = 0
    ecc_uncorrected: int = 0


@record
class Npu:
    """One NPU's health and its cumulative counters (as the latest health report gave them)."""

    index: int
    health: Health = Health.OK
    errors: int = 0
    hbm_ecc_uncorrected: int = 0


@record
class Allocation:
    job_id: str
    run: int
    tenant: str
    cpu_milli: int
    memory_mib: int
    gpu_milli: tuple[tuple[int, int], ...]
    since_ms: int = 0
    """When the run was placed here (its placement's time)."""
    npus: tuple[int, ...] = ()
    """The NPU indices it holds."""


@record
class Released:
    """An allocation given back, and when."""

    allocation: Allocation
    until_ms: int


@record
class WaitingUsage:
    """What a report said a job's run used here, waiting for the run's allocation (see the module
    docstring)."""

    job_id: str
    run: int | None
    gpu_model: str
    gpus: int
    """The devices measured (GPUs, or NPUs for ``kind`` "npu")."""
    utilisation_pct: int
    window_ms: int
    end_ms: int
    kind: str = "gpu"
    """"gpu", or "npu" (``gpu_model`` is then the node's NPU model)."""


@record
class NodeProfile:
    cluster: str
    node: str
    present: bool = False
    generation: int = -1
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: tuple[Gpu, ...] = ()
    npus: int = 0
    npu_model: str = ""
    """The model of its first NPU ("" without NPUs)."""
    npu_devices: tuple[Npu, ...] = ()
    """Its NPUs by index, with their health as the latest snapshot or health report says: a failed one is
    not healthy and never free."""
    nvlink_domain: str | None = None
    rdma_fabric: str | None = None
    schedulable: bool = False
    allocations: tuple[Allocation, ...] = ()
    first_seen_ms: int | None = None
    last_seen_ms: int = 0
    observed_gpu_ms: int = 0
    """Device-time observed: the milliseconds its GPUs and NPUs that were not failed were seen for."""
    failures: int = 0
    recent_failures_ms: tuple[int, ...] = ()
    gpu_utilisation_pct: int = 0
    npu_utilisation_pct: int = 0
    """The mean of its NPUs' utilisation in its latest usage report."""
    npus_measured: bool = False
    """Whether its latest usage report measured its NPUs (a connector that cannot read them sends none)."""
    version: int = 0
    published: tuple[ProfileFacts, int] | None = None
    """What version ``version`` of the profile says, and its ``last_seen_ms``."""
    applied: Applied = field(default_factory=Applied)
    health_at: Latest = field(default_factory=Latest)
    """The latest ``GpuHealthReported`` applied."""
    usage_at: Latest = field(default_factory=Latest)
    """The latest ``NodeUsageReported`` applied."""
    released: tuple[Released, ...] = ()
    """The last ``RELEASED_KEPT`` allocations given back, oldest first."""
    waiting_usage: tuple[WaitingUsage, ...] = ()
    """Job usage read before the allocation it measured, oldest first."""

    def model_of(self, index: int) -> str:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu.model
        return self.gpus[0].model if self.gpus else ""


class NodeStage:
    name = STAGE
    event_types = (NodeObserved, NodeRemoved, GpuHealthReported, NodeUsageReported)

    def keys(self, envelope: Envelope) -> Sequence[str]:
        data = envelope.data
        if isinstance(data, NodeObserved | NodeRemoved | GpuHealthReported | NodeUsageReported):
            return (f"{data.cluster}/{data.node}",)
        return ()

    def reduce(self, entity: NodeProfile | None, item: Input) -> tuple[NodeProfile | None, list[Emitted]]:
        after, emitted = self.fold(entity, item)
        return after, [*emitted, *self.publish(entity, after)]

    def fold(self, entity: NodeProfile | None, item: Input) -> tuple[NodeProfile | None, list[Emitted]]:
        cluster, node = split_key(item.key)
        profile = entity or NodeProfile(cluster=cluster, node=node)
        if profile.applied.seen(item):
            return entity, []
        before = profile
        profile, emitted = _apply(profile, item.item, item.time_ms, item.envelope_id)
        applied = profile.applied.after(item)
        if profile is before and entity is not None:
            # Passed through, or changed nothing: the profile says what it said (its latest version says
            # what ``profile_facts`` would), and only the positions it applied may have moved.
            return (entity if applied is before.applied else evolve(entity, applied=applied)), emitted
        if applied is not profile.applied:
            profile = evolve(profile, applied=applied)
        return _versioned(before, profile, emitted)

    def publish(self, before: NodeProfile | None, after: NodeProfile | None) -> list[Output]:
        if after is None or after.published is None or after.version <= (before.version if before else 0):
            return []
        facts, seen_ms = after.published
        event = profile_event_of(after, facts, after.version, seen_ms)
        return [Output(event, f"profile:{after.cluster}/{after.node}:v{after.version}")]


def _apply(profile: NodeProfile, item: Event | object, now: int, event_id: str) -> tuple[NodeProfile, list[Emitted]]:
    if isinstance(item, NodeObserved):
        if item.generation <= profile.generation:
            return profile, []
        return _observed(_seen(profile, now), item), []
    if isinstance(item, NodeRemoved):
        if item.generation < profile.generation or (item.generation == profile.generation and not profile.present):
            return profile, []  # older, or gone at this generation already
        return evolve(_seen(profile, now), present=False, schedulable=False, generation=item.generation), []
    if isinstance(item, GpuHealthReported):
        stamp = profile.health_at.after(now, event_id)
        if stamp is None:
            return profile, []
        return _health(_seen(evolve(profile, health_at=stamp), now), item, now), []
    if isinstance(item, NodeUsageReported):
        stamp = profile.usage_at.after(now, event_id)
        if stamp is None:
            return profile, []
        return _usage(_seen(evolve(profile, usage_at=stamp), now), item, now)
    if isinstance(item, NodeAllocation):
        return _allocation(profile, item, now)
    if isinstance(item, QueueAllocation):
        model = profile.gpus[0].model if (profile.gpus and item.gpu_milli) else None
        npu_model = (profile.npu_model or None) if item.npus else None
        return profile, [Routed("quota", item.queue_key, evolve(item, gpu_model=model, npu_model=npu_model))]
    if isinstance(item, UsageInterval):
        model = profile.npu_model if item.kind == "npu" else _main_model(profile)
        return profile, [Routed("clusters", profile.cluster, evolve(item, gpu_model=model))]
    return profile, []


def _seen(profile: NodeProfile, now: int) -> NodeProfile:
    gpus = sum(1 for g in profile.gpus if g.health is not Health.FAILED)
    gpus += sum(1 for n in profile.npu_devices if n.health is not Health.FAILED)
    observed = profile.observed_gpu_ms
    if profile.first_seen_ms is not None and now > profile.last_seen_ms:
        observed += gpus * (now - profile.last_seen_ms)
    return evolve(
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
    known_npus = {npu.index: npu for npu in profile.npu_devices}
    npus = []
    for npu_device in event.npus:
        old_npu = known_npus.get(npu_device.index)
        npus.append(
            Npu(
                npu_device.index,
                npu_device.health,
                old_npu.errors if old_npu else 0,
                old_npu.hbm_ecc_uncorrected if old_npu else 0,
            )
        )
    failures, recent = _count_failures(profile, gpus, npus, profile.last_seen_ms)
    return evolve(
        profile,
        present=True,
        generation=event.generation,
        cpu_milli=event.cpu_milli,
        memory_mib=event.memory_mib,
        gpus=tuple(gpus),
        npus=len(event.npus),
        npu_model=event.npus[0].model if event.npus else "",
        npu_devices=tuple(npus),
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
            evolve(
                gpu,
                health=sample.health,
                xid_errors=max(gpu.xid_errors, sample.xid_errors),
                ecc_uncorrected=max(gpu.ecc_uncorrected, sample.ecc_uncorrected or 0),
            )
        )
    npu_samples = {sample.index: sample for sample in event.npus}
    npus = []
    for npu in profile.npu_devices:
        reported = npu_samples.get(npu.index)
        if reported is None:
            npus.append(npu)
            continue
        new_errors = max(0, reported.errors - npu.errors)
        new_hbm = max(0, (reported.hbm_ecc_uncorrected or 0) - npu.hbm_ecc_uncorrected)
        extra_failures += 1 if (new_errors or new_hbm) and reported.health is not Health.FAILED else 0
        npus.append(
            evolve(
                npu,
                health=reported.health,
                errors=max(npu.errors, reported.errors),
                hbm_ecc_uncorrected=max(npu.hbm_ecc_uncorrected, reported.hbm_ecc_uncorrected or 0),
            )
        )
    failures, recent = _count_failures(profile, gpus, npus, now)
    recent = (recent + (now,) * extra_failures)[-RECENT_FAILURES:]
    return evolve(
        profile,
        gpus=tuple(gpus),
        npu_devices=tuple(npus),
        failures=failures + extra_failures,
        recent_failures_ms=recent,
    )


def _count_failures(
    profile: NodeProfile, gpus: Sequence[Gpu], npus: Sequence[Npu], now: int
) -> tuple[int, tuple[int, ...]]:
    """A GPU or NPU that turns failed is one failure."""
    before = {gpu.index: gpu.health for gpu in profile.gpus}
    turned = sum(1 for gpu in gpus if gpu.health is Health.FAILED and before.get(gpu.index) is not Health.FAILED)
    npus_before = {npu.index: npu.health for npu in profile.npu_devices}
    turned += sum(1 for n in npus if n.health is Health.FAILED and npus_before.get(n.index) is not Health.FAILED)
    if not profile.gpus and not profile.npu_devices:
        # first sight: a node that arrives with failed devices did not fail under us
        return profile.failures, profile.recent_failures_ms
    recent = (profile.recent_failures_ms + (now,) * turned)[-RECENT_FAILURES:]
    return profile.failures + turned, recent


def _usage(profile: NodeProfile, event: NodeUsageReported, now: int) -> tuple[NodeProfile, list[Emitted]]:
    pct = sum(g.utilisation_pct for g in event.gpus) // len(event.gpus) if event.gpus else 0
    npu_pct = sum(n.utilisation_pct for n in event.npus) // len(event.npus) if event.npus else 0
    emitted: list[Emitted] = []
    waiting = list(profile.waiting_usage)
    for used in _job_usage(profile, event, now):
        allocation = _measured(profile, used)
        if allocation is None and used.run is not None:
            waiting.append(used)
        else:
            emitted.append(_sample(profile, used, allocation))
    overflow = max(0, len(waiting) - WAITING_USAGE)
    emitted += [_sample(profile, used, None) for used in waiting[:overflow]]
    profile = evolve(profile, gpu_utilisation_pct=pct, npu_utilisation_pct=npu_pct, npus_measured=bool(event.npus))
    return evolve(profile, waiting_usage=tuple(waiting[overflow:])), emitted


def _job_usage(profile: NodeProfile, event: NodeUsageReported, now: int) -> list[WaitingUsage]:
    """Each job's measured use of its GPUs and of its NPUs on the node, one sample per device kind."""
    out = []
    for job in event.jobs:
        if job.gpu_indices:
            model = profile.model_of(job.gpu_indices[0])
            gpus = len(job.gpu_indices)
            out.append(WaitingUsage(job.job_id, job.run, model, gpus, job.utilisation_pct, event.window_ms, now))
        if job.npu_indices:
            npus, pct = len(job.npu_indices), job.npu_utilisation_pct
            out.append(
                WaitingUsage(job.job_id, job.run, profile.npu_model, npus, pct, event.window_ms, now, kind="npu")
            )
    return out


def _measured(profile: NodeProfile, used: WaitingUsage) -> Allocation | None:
    """The allocation a job's usage measured: its run's, held or given back; with no run named, the
    latest placed by the report's time and not given back before it."""
    kept = [(a, None) for a in profile.allocations] + [(g.allocation, g.until_ms) for g in profile.released]
    found: Allocation | None = None
    for allocation, until_ms in kept:
        if allocation.job_id != used.job_id:
            continue
        if used.run is not None:
            if allocation.run == used.run:
                return allocation
        elif (
            allocation.since_ms <= used.end_ms
            and (until_ms is None or used.end_ms <= until_ms)
            and (found is None or allocation.since_ms > found.since_ms)
        ):
            found = allocation
    return found


def _sample(profile: NodeProfile, used: WaitingUsage, allocation: Allocation | None) -> Routed:
    # What the job holds of those devices: a share of one GPU is not the whole GPU (no allocation known:
    # whole devices, as reported); NPUs are held whole.
    if used.kind == "npu":
        milli = 1000 * (len(allocation.npus) if allocation else used.gpus)
    else:
        milli = sum(m for _, m in allocation.gpu_milli) if allocation else 1000 * used.gpus
    sample = UsageSample(
        used.job_id,
        allocation.tenant if allocation else "",
        "",
        profile.cluster,
        used.gpu_model,
        milli,
        used.utilisation_pct,
        used.window_ms,
        used.end_ms,
        used.kind,
    )
    return Routed("clusters", profile.cluster, sample)


def _allocation(profile: NodeProfile, delta: NodeAllocation, now: int) -> tuple[NodeProfile, list[Emitted]]:
    others = tuple(a for a in profile.allocations if a.job_id != delta.job_id)
    current = next((a for a in profile.allocations if a.job_id == delta.job_id), None)
    if delta.held:
        if current is not None and current.run > delta.run:
            return profile, []
        since = now
        if current is not None and current.run == delta.run:
            since = current.since_ms
        elif current is not None:  # a later run replaces one still held: that one is given back now
            profile = _given_back(profile, current, now)
        new = Allocation(
            delta.job_id, delta.run, delta.tenant, delta.cpu_milli, delta.memory_mib, delta.gpu_milli, since, delta.npus
        )
        profile = evolve(profile, allocations=tuple(sorted((*others, new), key=lambda a: a.job_id)))
        return _usage_for(profile, delta.job_id)
    if current is not None and current.run == delta.run:
        return evolve(_given_back(profile, current, now), allocations=others), []
    return profile, []


def _given_back(profile: NodeProfile, allocation: Allocation, now: int) -> NodeProfile:
    return evolve(profile, released=(*profile.released, Released(allocation, now))[-RELEASED_KEPT:])


def _usage_for(profile: NodeProfile, job_id: str) -> tuple[NodeProfile, list[Emitted]]:
    """The usage that waited for an allocation of the job now held."""
    emitted: list[Emitted] = []
    waiting = []
    for used in profile.waiting_usage:
        allocation = _measured(profile, used) if used.job_id == job_id else None
        if allocation is None:
            waiting.append(used)
        else:
            emitted.append(_sample(profile, used, allocation))
    if not emitted:
        return profile, []
    return evolve(profile, waiting_usage=tuple(waiting)), emitted


def failed_npus(profile: NodeProfile) -> set[int]:
    """The indices of its failed NPUs."""
    return {npu.index for npu in profile.npu_devices if npu.health is Health.FAILED}


def healthy_npus(profile: NodeProfile) -> int:
    """Its NPUs that are not failed, degraded ones included (none when it is not present)."""
    return profile.npus - len(failed_npus(profile)) if profile.present else 0


def degraded_npus(profile: NodeProfile) -> int:
    """Its NPUs that work but are degraded (none when it is not present)."""
    return sum(1 for npu in profile.npu_devices if npu.health is Health.DEGRADED) if profile.present else 0


def _main_model(profile: NodeProfile) -> str:
    return profile.gpus[0].model if profile.gpus else ""


def health_milli(profile: NodeProfile) -> int:
    devices = len(profile.gpus) + len(profile.npu_devices)
    if not devices:
        return 1000 if profile.present else 0
    points = 0
    for gpu in profile.gpus:
        health = gpu.health
        points += 1000 if health is Health.OK else _HEALTH_POINTS[health]  # most are OK: no enum hashing
    for npu in profile.npu_devices:
        points += 1000 if npu.health is Health.OK else _HEALTH_POINTS[npu.health]
    base = points // devices
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


def profile_facts(profile: NodeProfile) -> ProfileFacts:
    used = allocated_by_gpu(profile)
    present = profile.present
    models: dict[str, list[int]] = {}
    capacity_gpu = free_gpu = 0
    for gpu in profile.gpus:
        taken = used.get(gpu.index, 0)
        entry = models.get(gpu.model)
        if entry is None:
            entry = models[gpu.model] = [0, 0, 0, 0, 0, 0]
        entry[0] += 1
        if gpu.memory_mib > entry[1]:
            entry[1] = gpu.memory_mib
        entry[3] += taken
        if present and gpu.health is not Health.FAILED:
            free = 1000 - taken if taken < 1000 else 0
            entry[2] += 1000
            entry[4] += free
            entry[5] += 1000 if free == 1000 else 0
            capacity_gpu += 1000
            free_gpu += free
    # Each allocation is within the catalogue's bounds; their sum need not be (a hostile or absurd log):
    # the profile says "at least the most a profile can say" rather than fail to be published.
    cpu_alloc = min(MAX_SAFE_INT, sum(a.cpu_milli for a in profile.allocations))
    mem_alloc = min(MAX_SAFE_INT, sum(a.memory_mib for a in profile.allocations))
    cpu, memory, npus = (profile.cpu_milli, profile.memory_mib, profile.npus) if present else (0, 0, 0)
    npus_held = {index for a in profile.allocations for index in a.npus if index < npus}
    npus_taken = len(npus_held)
    # A failed NPU is never free (the scheduler places nothing on it), as a failed GPU is not.
    npus_free = npus - len(npus_held | {index for index in failed_npus(profile) if index < npus})
    health = health_milli(profile)
    stability = failures_per_kgpu_hour_milli(profile)
    return (
        (cpu, memory, capacity_gpu, npus),
        (cpu_alloc, mem_alloc, sum(used.values()), npus_taken),
        (max(0, cpu - cpu_alloc), max(0, memory - mem_alloc), free_gpu, npus_free),
        tuple((model, *models[model]) for model in sorted(models)),  # type: ignore[misc]
        health,
        stability,
        present
        and health >= 900
        and (len(profile.gpus) >= 8 or profile.nvlink_domain is not None or profile.rdma_fabric is not None),
        present and health >= 800 and stability < 5000,
        not present,
    )


def profile_event_of(profile: NodeProfile, facts: ProfileFacts, version: int, seen_ms: int) -> ResourceProfileUpdated:
    capacity, allocated, free, models, health, stability, training, inference, stale = facts
    return ResourceProfileUpdated(
        cluster=ClusterId(profile.cluster),
        node=NodeId(profile.node),
        version=version,
        capacity=Quantities(cpu_milli=capacity[0], memory_mib=capacity[1], gpu_milli=capacity[2], npus=capacity[3]),
        allocated=Quantities(
            cpu_milli=allocated[0], memory_mib=allocated[1], gpu_milli=allocated[2], npus=allocated[3]
        ),
        free=Quantities(cpu_milli=free[0], memory_mib=free[1], gpu_milli=free[2], npus=free[3]),
        gpu_models=tuple(
            GpuModelProfile(
                model=model,
                gpus=gpus,
                memory_mib=memory,
                capacity_milli=cap,
                allocated_milli=alloc,
                free_milli=fr,
                largest_free_block_milli=largest,
            )
            for model, gpus, memory, cap, alloc, fr, largest in models
        ),
        health_milli=health,
        failures_per_kgpu_hour_milli=stability,
        congestion_milli=0,
        fit_training=training,
        fit_inference=inference,
        last_seen_ms=seen_ms,
        stale=stale,
        recent_failures=recent_failures(profile, seen_ms),
    )


def profile_event(profile: NodeProfile, version: int) -> ResourceProfileUpdated:
    return profile_event_of(profile, profile_facts(profile), version, profile.last_seen_ms)


def recent_failures(profile: NodeProfile, at_ms: int) -> int:
    """Its GPU and NPU failures within ``HALF_LIFE_MS`` (a day) before ``at_ms``."""
    return sum(1 for moment in profile.recent_failures_ms if at_ms - moment < HALF_LIFE_MS)


def capacity_delta(profile: NodeProfile, facts: ProfileFacts | None = None, at_ms: int | None = None) -> NodeCapacity:
    """What the fleet stage rolls up of the node: capacity per model, health, fit, and its failures in the
    day before ``at_ms`` (default: its latest report)."""
    if not profile.present:
        return NodeCapacity(profile.cluster, profile.node, False)
    facts = facts or profile_facts(profile)
    return NodeCapacity(
        profile.cluster,
        profile.node,
        True,
        tuple((m[0], m[3], m[5]) for m in facts[3]),
        len(profile.gpus) + len(profile.npu_devices),
        facts[4],
        recent_failures(profile, profile.last_seen_ms if at_ms is None else at_ms),
        facts[6],
        facts[7],
    )


def _versioned(before: NodeProfile, after: NodeProfile, emitted: list[Emitted]) -> tuple[NodeProfile, list[Emitted]]:
    """A new version when the profile says something new, or a heartbeat so readers can tell a node
    is alive; and the node's capacity for the fleet when that changed."""
    if after.first_seen_ms is None:  # only deltas so far, no sight of the node: nothing to publish
        return after, emitted
    facts = profile_facts(after)
    previous = after.published
    if previous is not None and previous[0] == facts and after.last_seen_ms - previous[1] < HEARTBEAT_MS:
        return after, emitted
    after = evolve(after, version=after.version + 1, published=(facts, after.last_seen_ms))
    # A stored profile says what its latest version says (but the time): ``previous`` is ``before``'s,
    # and its failures in the day before it were those of ``before`` (a failure makes a new version).
    delta = capacity_delta(after, facts)
    if previous is None or capacity_delta(before, previous[0], previous[1]) != delta:
        emitted = [*emitted, Routed("fleet", "fleet", delta)]
    return after, emitted


HEARTBEAT_MS = 300_000
