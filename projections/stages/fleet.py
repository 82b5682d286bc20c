"""The fleet: per GPU model, capacity, free capacity and pending demand; congestion and hot models;
and per cluster, the roll-up profile the scheduler reads first. One entity, key ``fleet``.

A cluster's roll-up is its own: its congestion is the pending demand that could use its GPUs (jobs that
accept a model it has, or any model) against its own free GPUs, in thousandths, at most 1000; its
stability (the event's ``health_milli``) is its nodes' health weighted by their devices, GPUs and NPUs
(each node's health is lowered by its failed GPUs and NPUs and by its recent failures, a penalty that
halves every day: see ``projections.stages.nodes``); its failure rate is its GPU and NPU failures in the
last day per 1,000 device-hours of its GPUs and NPUs over that day; it is fit for training or for
inference when one of its nodes is.

Called by the projection hosts. Pure. Congestion of a model is pending demand over free capacity (in
thousandths; 1000 means the queue would take every free card). A model is hot as the scheduler defines
it (``events.catalog.profiles.is_hot``: its allocated share of its working capacity reaches the policy's
default ``hot_pressure_milli``), so ``fedsched resources`` calls hot what the scheduler steers jobs off.
A job that accepts several models counts against each (it could go to any), and a job that accepts any
model counts against every model, so demand is an upper bound. A job asking for more GPUs than the
whole fleet has of the models it accepts counts against none: it cannot run as asked whatever the
queue, and one such job made every model congested (each placement then paid for congestion that was
not there). Whether a job fits is looked at again whenever a model's capacity changes.

Totals are kept as running sums (per model, per cluster and model, pending demand per model), and the
nodes and pending jobs are persistent maps (``projections.stages.persistent``: a version is made by changing its
predecessor's state in place, not by copying it), so a delta costs the size of what it changes, not of
the fleet. A roll-up's version grows with every input
that changes it (anything but ``last_seen_ms``); its event is built only when published.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field

from events.catalog.profiles import GpuModelProfile, Quantities, ResourceProfileUpdated, is_hot, pressure_milli
from events.catalog.types import ClusterId
from events.wire.envelope import Envelope
from projections.stages.core import Applied, Emitted, Input, Output, evolve, record
from projections.stages.deltas import NodeCapacity, PendingDemand
from projections.stages.persistent import PMap

STAGE = "fleet"

Totals = Mapping[str, tuple[int, int, int]]
"""GPU model -> (capacity milli, free milli, node entries naming the model)."""
RollupFacts = tuple[tuple[tuple[str, int, int], ...], int, tuple[str, ...], int, int, int, bool, bool]
"""What a cluster's roll-up says but its time: (model, capacity, free) by model, congestion, hot models,
stability, GPU failures in the last day and per 1,000 GPU-hours (thousandths), fit for training, fit for
inference."""
NodeHealth = tuple[int, int, int, int, int]
"""Summed over a cluster's present nodes: devices (GPUs and NPUs), devices x health, GPU and NPU failures in
the last day, nodes fit for training, nodes fit for inference."""
_DAY_HOURS = 24


@record
class FleetState:
    """Copy-on-write: the mappings are never changed once the state is built (the persistent maps of
    nodes and pending jobs are changed by making new versions of them)."""

    nodes: PMap[tuple[str, str], NodeCapacity] = field(default_factory=PMap)
    """Present nodes, by (cluster, node)."""
    pending: PMap[str, PendingDemand] = field(default_factory=PMap)
    """Pending demand, by job."""
    models: Totals = field(default_factory=dict)
    clusters: Mapping[str, Totals] = field(default_factory=dict)
    demand_any: int = 0
    """Pending milli-GPU of jobs that accept any model (those that never fit left out)."""
    demand_by_model: Mapping[str, int] = field(default_factory=dict)
    unfit: PMap[str, bool] = field(default_factory=PMap)
    """Pending jobs that ask for more than the fleet's capacity of the models they accept."""
    versions: Mapping[str, int] = field(default_factory=dict)
    """Cluster -> roll-up version."""
    rollups: Mapping[str, tuple[RollupFacts, int]] = field(default_factory=dict)
    """Cluster -> what its latest roll-up version says, and its ``last_seen_ms``."""
    applied: Applied = field(default_factory=Applied)
    health: Mapping[str, NodeHealth] = field(default_factory=dict)
    """Cluster -> its nodes' health, summed."""

    def cluster_congestion(self, cluster: str) -> int:
        """The pending demand that could use the cluster's GPUs against its own free GPUs (0..1000)."""
        models = self.clusters.get(cluster, {})
        if not models:
            return 0
        demand = self.demand_any + sum(self.demand_by_model.get(model, 0) for model in models)
        free = sum(fr for _, fr, _ in models.values())
        return min(1000, demand * 1000 // (free if free > 1 else 1))

    def demand(self, model: str) -> int:
        return self.demand_any + self.demand_by_model.get(model, 0)

    def per_model(self) -> dict[str, tuple[int, int]]:
        return {model: (capacity, free) for model, (capacity, free, _) in self.models.items()}

    def congestion(self) -> dict[str, int]:
        out = {}
        demand_any, by_model, models = self.demand_any, self.demand_by_model, self.models
        for model in sorted(models):
            free = models[model][1]
            out[model] = min(1_000_000, (demand_any + by_model.get(model, 0)) * 1000 // (free if free > 1 else 1))
        return out

    def hot_models(self) -> tuple[str, ...]:
        models = self.models
        return tuple(model for model in sorted(models) if is_hot(pressure_milli(models[model][0], models[model][1])))


class FleetStage:
    name = STAGE
    event_types: tuple[type, ...] = ()  # fed by other stages only

    def keys(self, envelope: Envelope) -> Sequence[str]:
        return ()

    def reduce(self, entity: FleetState | None, item: Input) -> tuple[FleetState | None, list[Emitted]]:
        after, _ = self.fold(entity, item)
        return after, list(self.publish(entity, after))

    def fold(self, entity: FleetState | None, item: Input) -> tuple[FleetState | None, list[Emitted]]:
        fleet = entity or FleetState()
        if fleet.applied.seen(item):
            return entity, []
        delta = item.item
        changed: FleetState | None = None
        if isinstance(delta, NodeCapacity):
            changed = _capacity(fleet, delta)
        elif isinstance(delta, PendingDemand):
            changed = _demand(fleet, delta)
        applied = fleet.applied.after(item)
        if changed is None and entity is not None:
            # Nothing to fold: the congestion and the roll-ups (brought up to date with every change)
            # cannot change either; the positions applied may.
            return (entity if applied is entity.applied else evolve(entity, applied=applied)), []
        hot_before = fleet.hot_models()
        fleet = changed or fleet
        # A roll-up changes with its cluster's totals and nodes, with the demand (its congestion), or with
        # the hot models among its own.
        demand = isinstance(delta, PendingDemand)
        clusters = set(fleet.rollups) if demand or fleet.hot_models() != hot_before else set()
        if isinstance(delta, NodeCapacity) and (delta.present or delta.cluster in fleet.rollups):
            clusters.add(delta.cluster)
        return _rollups(fleet, sorted(clusters), applied, item.time_ms), []

    def publish(self, before: FleetState | None, after: FleetState | None) -> list[Output]:
        if after is None:
            return []
        old = before.versions if before is not None else {}
        outputs = []
        for cluster, version in sorted(after.versions.items()):
            if version > old.get(cluster, 0):
                facts, seen_ms = after.rollups[cluster]
                outputs.append(Output(rollup_event(cluster, facts, version, seen_ms), f"profile:{cluster}:v{version}"))
        return outputs


def _capacity(fleet: FleetState, delta: NodeCapacity) -> FleetState | None:
    key = (delta.cluster, delta.node)
    old = fleet.nodes.get(key)
    if old is None and not delta.present:
        return None
    nodes = fleet.nodes.set(key, delta) if delta.present else fleet.nodes.remove(key)
    models = dict(fleet.models)
    clusters = dict(fleet.clusters)
    in_cluster = dict(clusters.get(delta.cluster, {}))
    if old is not None:
        for model, capacity, free in old.per_model:
            _add(models, model, -capacity, -free, -1)
            _add(in_cluster, model, -capacity, -free, -1)
    if delta.present:
        for model, capacity, free in delta.per_model:
            _add(models, model, capacity, free, 1)
            _add(in_cluster, model, capacity, free, 1)
    clusters[delta.cluster] = in_cluster
    health = dict(fleet.health)
    sums = _node_health(health.get(delta.cluster, (0, 0, 0, 0, 0)), old, -1)
    sums = _node_health(sums, delta if delta.present else None, 1)
    health[delta.cluster] = sums
    changed = FleetState(
        nodes,
        fleet.pending,
        models,
        clusters,
        fleet.demand_any,
        fleet.demand_by_model,
        fleet.unfit,
        fleet.versions,
        fleet.rollups,
        fleet.applied,
        health,
    )
    # The fleet's capacity changed exactly when this node's did (most deltas only change what is free).
    before = {model: capacity for model, capacity, _ in old.per_model} if old is not None else {}
    after = {model: capacity for model, capacity, _ in delta.per_model} if delta.present else {}
    if after == before:
        return changed
    # Which jobs could ever fit may have changed. A fleet that only grew (nodes arriving, the common
    # case, thousands of times while a log is replayed) can only make unfit jobs fit: those are looked at.
    grew = all(after.get(model, 0) >= capacity for model, capacity in before.items())
    return _recount(changed, only_unfit=grew)


def _node_health(sums: NodeHealth, node: NodeCapacity | None, sign: int) -> NodeHealth:
    if node is None:
        return sums
    gpus, weighted, failures, training, inference = sums
    return (
        gpus + sign * node.gpus,
        weighted + sign * node.gpus * node.health_milli,
        failures + sign * node.recent_failures,
        training + sign * node.fit_training,
        inference + sign * node.fit_inference,
    )


def _fits(models: Totals, demand: PendingDemand) -> bool:
    accepted = set(demand.gpu_models) if demand.gpu_models else models.keys()
    return demand.gpu_milli <= sum(models[model][0] for model in accepted if model in models)


def _recount(fleet: FleetState, *, only_unfit: bool) -> FleetState:
    """Pending jobs' demand counted again against the fleet's capacity now, every job's or only the unfit
    ones' (capacity changes seldom: a node comes, goes, or a GPU fails; what is free changes with every
    placement and is not looked at)."""
    if only_unfit:
        demand_any, by_model, unfit = fleet.demand_any, dict(fleet.demand_by_model), fleet.unfit
        candidates = [(job_id, fleet.pending.get(job_id)) for job_id, _ in sorted(unfit.items())]
    else:
        demand_any, by_model, unfit = 0, {}, PMap[str, bool]()
        candidates = sorted(fleet.pending.items())
    for job_id, demand in candidates:
        assert demand is not None  # an unfit job is pending
        if not _fits(fleet.models, demand):
            unfit = unfit if job_id in unfit else unfit.set(job_id, True)
            continue
        unfit = unfit.remove(job_id)
        if not demand.gpu_models:
            demand_any += demand.gpu_milli
        for model in set(demand.gpu_models):
            by_model[model] = by_model.get(model, 0) + demand.gpu_milli
    return evolve(fleet, demand_any=demand_any, demand_by_model=by_model, unfit=unfit)


def _add(totals: dict[str, tuple[int, int, int]], model: str, capacity: int, free: int, entries: int) -> None:
    cap, fr, count = totals.get(model, (0, 0, 0))
    if count + entries == 0:
        totals.pop(model, None)
    else:
        totals[model] = (cap + capacity, fr + free, count + entries)


def _demand(fleet: FleetState, delta: PendingDemand) -> FleetState | None:
    old = fleet.pending.get(delta.job_id)
    if not delta.pending and old is None:
        return None
    pending = fleet.pending.set(delta.job_id, delta) if delta.pending else fleet.pending.remove(delta.job_id)
    demand_any = fleet.demand_any
    by_model = dict(fleet.demand_by_model)
    unfit = fleet.unfit
    for demand, sign in ((old, -1), (delta if delta.pending else None, 1)):
        if demand is None:
            continue
        if sign < 0 and delta.job_id in unfit:
            unfit = unfit.remove(delta.job_id)
            continue
        if sign > 0 and not _fits(fleet.models, demand):
            unfit = unfit.set(delta.job_id, True)
            continue
        if not demand.gpu_models:
            demand_any += sign * demand.gpu_milli
        for model in set(demand.gpu_models):
            total = by_model.get(model, 0) + sign * demand.gpu_milli
            if total:
                by_model[model] = total
            else:
                by_model.pop(model, None)
    return FleetState(
        fleet.nodes,
        pending,
        fleet.models,
        fleet.clusters,
        demand_any,
        by_model,
        unfit,
        fleet.versions,
        fleet.rollups,
        fleet.applied,
        fleet.health,
    )


def rollup_facts(fleet: FleetState, cluster: str, hot: Sequence[str]) -> RollupFacts:
    models = fleet.clusters.get(cluster, {})
    totals = sorted((model, capacity, free) for model, (capacity, free, _) in models.items())
    gpus, weighted, failures, training, inference = fleet.health.get(cluster, (0, 0, 0, 0, 0))
    stability = weighted // gpus if gpus > 0 else 1000
    # Failures in the last day per 1,000 GPU-hours of its GPUs over that day, in thousandths.
    rate = failures * 1000 * 1000 // (gpus * _DAY_HOURS) if gpus > 0 else 0
    return (
        tuple(totals),
        fleet.cluster_congestion(cluster),
        tuple(model for model in hot if model in models),
        stability,
        failures,
        rate,
        training > 0,
        inference > 0,
    )


def rollup_event(cluster: str, facts: RollupFacts, version: int, now: int) -> ResourceProfileUpdated:
    models, congestion, hot, stability, recent, failures, training, inference = facts
    capacity = sum(cap for _, cap, _ in models)
    free = sum(fr for _, _, fr in models)
    return ResourceProfileUpdated(
        cluster=ClusterId(cluster),
        node=None,
        version=version,
        capacity=Quantities(gpu_milli=capacity),
        allocated=Quantities(gpu_milli=capacity - free),
        free=Quantities(gpu_milli=free),
        gpu_models=tuple(
            GpuModelProfile(
                model=model,
                gpus=cap // 1000,
                memory_mib=0,
                capacity_milli=cap,
                allocated_milli=cap - fr,
                free_milli=fr,
            )
            for model, cap, fr in models
        ),
        health_milli=stability,
        failures_per_kgpu_hour_milli=failures,
        congestion_milli=congestion,
        hot_models=hot,
        fit_training=training,
        fit_inference=inference,
        last_seen_ms=now,
        recent_failures=recent,
    )


def rollup(fleet: FleetState, cluster: str, version: int, now: int) -> ResourceProfileUpdated:
    return rollup_event(cluster, rollup_facts(fleet, cluster, fleet.hot_models()), version, now)


def _rollups(fleet: FleetState, clusters: Sequence[str], applied: Applied, now: int) -> FleetState:
    """A new roll-up version for each of these clusters whose roll-up says something new."""
    hot = fleet.hot_models()
    versions: dict[str, int] | None = None
    rollups: dict[str, tuple[RollupFacts, int]] | None = None
    for cluster in clusters:
        facts = rollup_facts(fleet, cluster, hot)
        old = fleet.rollups.get(cluster)
        if old is not None and old[0] == facts:
            continue
        versions = versions or dict(fleet.versions)
        rollups = rollups or dict(fleet.rollups)
        versions[cluster] = versions.get(cluster, 0) + 1
        # The time of the latest change: the latest of the inputs' times (inputs of different jobs may be
        # folded out of time order when they come from different partitions).
        rollups[cluster] = (facts, now if old is None else max(now, old[1]))
    return FleetState(
        fleet.nodes,
        fleet.pending,
        fleet.models,
        fleet.clusters,
        fleet.demand_any,
        fleet.demand_by_model,
        fleet.unfit,
        fleet.versions if versions is None else versions,
        fleet.rollups if rollups is None else rollups,
        applied,
        fleet.health,
    )
