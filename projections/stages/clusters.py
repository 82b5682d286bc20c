"""Clusters as the federation knows them: kind, site, status, GPU rates; keyed by cluster id.

Called by the projection hosts. Pure. Besides the registry, this stage prices GPU time: usage pieces
from the node stage pass through here, get the rate of their GPU model in force when they arrive, are
split at hour boundaries, and go on to the usage stage keyed ``tenant|cluster|model|hour``.

A registration or status report no later than the one in force (by time, then the order read:
``Latest``) changes nothing, so one appended again after a newer one does not bring back the old rates
or status.

Work per run is bounded, whatever its times say: a run is split into at most ``MAX_HOURS_PER_RUN`` hour
pieces, its last hours one each, and whatever came before them in one piece in the hour it started (a run
placed in 1970 and reported ended now would otherwise make half a million buckets). Its GPU time and
cost are whole either way; only how a run longer than that spreads over hours is approximate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

from events.catalog.inventory import ClusterRegistered, ClusterStatusChanged
from events.wire.envelope import Envelope, Latest
from projections.stages.core import Applied, Delta, Emitted, Input, Routed, Silent, evolve, record
from projections.stages.deltas import UsageInterval, UsageSample

STAGE = "clusters"
HOUR_MS = 3_600_000
MAX_HOURS_PER_RUN = 366 * 24
"""The hour pieces one run's GPU time is split into at most: a year of them."""


@record
class ClusterView:
    cluster: str
    registered: bool = False
    kind: str = ""
    display_name: str = ""
    site: str = ""
    region: str = ""
    status: str = "unknown"
    status_reason: str = ""
    currency: str = ""
    rates: tuple[tuple[str, int], ...] = ()  # (GPU model, micro-currency per GPU-hour)
    datasets: tuple[str, ...] = ()
    registered_ms: int = 0
    applied: Applied = field(default_factory=Applied)
    registered_at: Latest = field(default_factory=Latest)
    """The latest ``ClusterRegistered`` applied."""
    status_at: Latest = field(default_factory=Latest)
    """The latest ``ClusterStatusChanged`` applied."""

    def rate(self, model: str) -> int:
        for name, micro in self.rates:
            if name == model:
                return micro
        return 0


@record
class PricedUsage(Delta):
    """GPU (or NPU) time of one tenant, cluster and model within one hour, with its cost."""

    job_id: str
    run: int
    project: str
    allocated_milli_ms: int
    used_milli_ms: int
    cost_micro: int
    currency: str
    sample: bool
    part: str = ""
    """Which part of the run (its node; "" for the whole run): a run's replicas on nodes of one model
    are several parts of one bucket, each counted once."""


def usage_key(tenant: str, cluster: str, model: str, hour_ms: int, kind: str = "gpu") -> str:
    return f"{tenant or 'unknown'}|{cluster}|{kind}|{model or 'none'}|{hour_ms}"


class ClusterStage(Silent[ClusterView]):
    name = STAGE
    event_types = (ClusterRegistered, ClusterStatusChanged)

    def keys(self, envelope: Envelope) -> Sequence[str]:
        data = envelope.data
        if isinstance(data, ClusterRegistered | ClusterStatusChanged):
            return (data.cluster,)
        return ()

    def reduce(self, entity: ClusterView | None, item: Input) -> tuple[ClusterView | None, list[Emitted]]:
        view = entity or ClusterView(cluster=item.key)
        if view.applied.seen(item):
            return entity, []
        data = item.item
        emitted: list[Emitted] = []
        if isinstance(data, ClusterRegistered):
            stamp = view.registered_at.after(item.time_ms, item.envelope_id)
            if stamp is None:
                return entity, []
            view = evolve(
                view,
                registered_at=stamp,
                registered=True,
                kind=data.kind.value,
                display_name=data.display_name,
                site=data.site,
                region=data.region,
                currency=data.currency,
                rates=tuple(sorted((r.model, r.micro_per_gpu_hour) for r in data.gpu_rates)),
                datasets=tuple(sorted(data.datasets)),
                registered_ms=view.registered_ms or item.time_ms,
                status="reachable" if view.status == "unknown" else view.status,
            )
        elif isinstance(data, ClusterStatusChanged):
            stamp = view.status_at.after(item.time_ms, item.envelope_id)
            if stamp is None:
                return entity, []
            view = evolve(view, status=data.status.value, status_reason=data.reason.value, status_at=stamp)
        elif isinstance(data, UsageInterval):
            emitted = _price_interval(view, data)
        elif isinstance(data, UsageSample):
            emitted = _price_sample(view, data)
        return evolve(view, applied=view.applied.after(item)), emitted


def _price_interval(view: ClusterView, interval: UsageInterval) -> list[Emitted]:
    emitted: list[Emitted] = []
    start = interval.start_ms
    first_hour = start - start % HOUR_MS
    # The start of the run's last MAX_HOURS_PER_RUN - 1 hours: what lies before goes in its first piece.
    last_hours = interval.end_ms - 1 - (interval.end_ms - 1) % HOUR_MS - (MAX_HOURS_PER_RUN - 2) * HOUR_MS
    while start < interval.end_ms:
        hour = start - start % HOUR_MS
        end = min(interval.end_ms, hour + HOUR_MS)
        if hour == first_hour and end < last_hours:
            end = last_hours
        milli_ms = interval.gpu_milli * (end - start)
        milli_ms += sum(milli * max(0, end - max(start, since)) for since, milli in interval.grown)
        piece = PricedUsage(
            interval.job_id,
            interval.run,
            interval.project,
            milli_ms,
            0,
            _cost(view, interval.gpu_model, milli_ms),
            view.currency,
            False,
            interval.part,
        )
        key = usage_key(interval.tenant, view.cluster, interval.gpu_model, hour, interval.kind)
        emitted.append(Routed("usage", key, piece))
        start = end
    return emitted


def _price_sample(view: ClusterView, sample: UsageSample) -> list[Emitted]:
    hour = sample.end_ms - sample.end_ms % HOUR_MS
    used = sample.gpu_milli * sample.utilisation_pct // 100 * sample.window_ms
    piece = PricedUsage(sample.job_id, 0, sample.project, 0, used, 0, view.currency, True)
    return [Routed("usage", usage_key(sample.tenant, view.cluster, sample.gpu_model, hour, sample.kind), piece)]


def _cost(view: ClusterView, model: str, milli_ms: int) -> int:
    # rate is per device-hour of the model (a GPU's or an NPU's: ClusterRegistered.gpu_rates keys both);
    # milli_ms is milli-device x milliseconds: divide by 1000 x 3,600,000.
    return view.rate(model) * milli_ms // (1000 * HOUR_MS)
