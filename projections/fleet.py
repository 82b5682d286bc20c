"""The fleet: per GPU model, capacity, free capacity and pending demand; congestion and hot models;
and per cluster, the roll-up profile the scheduler reads first. One entity, key ``fleet``.

Called by the projection hosts. Pure. Congestion of a model is pending demand over free capacity (in
thousandths; 1000 means the queue would take every free card). A model is hot when its congestion
reaches ``HOT_MILLI``. A job that accepts several models counts against each (it could go to any), and
a job that accepts any model counts against every model, so demand is an upper bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from events.catalog.profiles import GpuModelProfile, Quantities, ResourceProfileUpdated
from events.catalog.types import ClusterId
from events.envelope import Envelope
from projections.core import Applied, Emitted, Input, Output
from projections.deltas import NodeCapacity, PendingDemand

STAGE = "fleet"
HOT_MILLI = 800


@dataclass(frozen=True, slots=True)
class FleetState:
    nodes: tuple[NodeCapacity, ...] = ()
    pending: tuple[PendingDemand, ...] = ()
    versions: tuple[tuple[str, int], ...] = ()  # cluster -> roll-up version
    last_rollups: tuple[ResourceProfileUpdated, ...] = ()
    applied: Applied = field(default_factory=Applied)

    def demand(self, model: str) -> int:
        return sum(p.gpu_milli for p in self.pending if not p.gpu_models or model in p.gpu_models)

    def per_model(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for node in self.nodes:
            for model, capacity, free in node.per_model:
                cap, fr = out.get(model, (0, 0))
                out[model] = (cap + capacity, fr + free)
        return out

    def congestion(self) -> dict[str, int]:
        return {
            model: min(1_000_000, self.demand(model) * 1000 // max(1, free))
            for model, (_, free) in sorted(self.per_model().items())
        }

    def hot_models(self) -> tuple[str, ...]:
        return tuple(model for model, value in self.congestion().items() if value >= HOT_MILLI)


class FleetStage:
    name = STAGE

    def keys(self, envelope: Envelope) -> Sequence[str]:
        return ()

    def reduce(self, entity: FleetState | None, item: Input) -> tuple[FleetState | None, list[Emitted]]:
        fleet = entity or FleetState()
        if fleet.applied.seen(item):
            return entity, []
        delta = item.item
        if isinstance(delta, NodeCapacity):
            others = tuple(n for n in fleet.nodes if (n.cluster, n.node) != (delta.cluster, delta.node))
            nodes = (*others, delta) if delta.present else others
            fleet = replace(fleet, nodes=tuple(sorted(nodes, key=lambda n: (n.cluster, n.node))))
        elif isinstance(delta, PendingDemand):
            rest = tuple(p for p in fleet.pending if p.job_id != delta.job_id)
            pending = (*rest, delta) if delta.pending else rest
            fleet = replace(fleet, pending=tuple(sorted(pending, key=lambda p: p.job_id)))
        fleet = replace(fleet, applied=fleet.applied.after(item))
        return _rollups(fleet, item.time_ms)


def rollup(fleet: FleetState, cluster: str, version: int, now: int) -> ResourceProfileUpdated:
    congestion = fleet.congestion()
    models: dict[str, tuple[int, int]] = {}
    for node in fleet.nodes:
        if node.cluster != cluster:
            continue
        for model, capacity, free in node.per_model:
            cap, fr = models.get(model, (0, 0))
            models[model] = (cap + capacity, fr + free)
    capacity = sum(cap for cap, _ in models.values())
    free = sum(fr for _, fr in models.values())
    worst = max((congestion.get(model, 0) for model in models), default=0)
    hot = tuple(model for model in fleet.hot_models() if model in models)
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
            for model, (cap, fr) in sorted(models.items())
        ),
        health_milli=1000,
        failures_per_kgpu_hour_milli=0,
        congestion_milli=min(1000, worst),
        hot_models=hot,
        fit_training=True,
        fit_inference=True,
        last_seen_ms=now,
    )


def _rollups(fleet: FleetState, now: int) -> tuple[FleetState, list[Emitted]]:
    clusters = sorted({n.cluster for n in fleet.nodes} | {r.cluster for r in fleet.last_rollups})
    versions = dict(fleet.versions)
    previous: dict[str, ResourceProfileUpdated] = {r.cluster: r for r in fleet.last_rollups}
    emitted: list[Emitted] = []
    latest = []
    for cluster in clusters:
        version = versions.get(cluster, 0)
        candidate = rollup(fleet, cluster, version + 1, now)
        old = previous.get(cluster)
        if (
            old is not None
            and candidate.model_copy(update={"version": old.version, "last_seen_ms": old.last_seen_ms}) == old
        ):
            latest.append(old)
            continue
        versions[cluster] = version + 1
        latest.append(candidate)
        emitted.append(Output(candidate, f"profile:{cluster}:v{version + 1}"))
    return replace(fleet, versions=tuple(sorted(versions.items())), last_rollups=tuple(latest)), emitted
