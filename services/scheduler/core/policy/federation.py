"""Federation: which cluster a job goes to, once its feasibility per cluster is known.

Called by the cycle (for every job) and by the simulator (``--clusters K``). Each candidate cluster gets
six terms, each an integer in 0..1000 where lower is better, weighted by the policy configuration:
fit (the placement cost of the node policy, normalised across the candidates), data locality (share of
the job's datasets missing there), congestion (the cluster's own pending demand against its free GPUs,
from its profile), hot-spot pressure on the GPU model the job would use there, health (1000 - stability,
the cluster's nodes' failure history decayed; 1000 where no node suits the job's kind: training or
inference) and cost (the price of a GPU-hour of the model the job would use there, normalised). Ties go
to the cluster id. ``federation_why`` says in words which term put the winner ahead of the runner-up.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from services.scheduler.core.policy.fleet import Demand
from services.scheduler.core.policy.model import Cluster, ClusterId, ClusterWeights, Job, NodePolicy
from services.scheduler.core.policy.placer import INF, Choice, Placer

SCALE = 1000


@dataclass(frozen=True, slots=True)
class ClusterScore:
    cluster: ClusterId
    fit: int
    locality: int
    congestion: int
    hot_spot: int
    health: int
    cost: int
    placement_cost: int  # the node policy's raw cost (sum over replicas): breaks ties, not in ``total``
    weights: ClusterWeights
    price_milli: int = 0
    """What a GPU-hour of the model the job would use costs there (before normalising), for explanations."""
    unfit: bool = False
    """No node there suits the job's kind (its health term is then the worst)."""
    datasets_missing: int = 0
    """How many of the job's datasets the cluster does not hold."""
    total: int = field(init=False)
    """The weighted sum of the six terms (lower wins): the sum of ``terms``."""

    def __post_init__(self) -> None:
        w = self.weights  # ``terms`` summed, without building it: this runs for every candidate of every job
        total = w.fit * self.fit + w.locality * self.locality + w.congestion * self.congestion
        total += w.hot_spot * self.hot_spot + w.health * self.health + w.cost * self.cost
        object.__setattr__(self, "total", total)

    def terms(self) -> dict[str, int]:
        """Each term's points in ``total``, its 0..1000 value times its weight: they add up to ``total``, so
        an explanation that shows them shows where the score came from."""
        w = self.weights
        return {
            "fit": w.fit * self.fit,
            "locality": w.locality * self.locality,
            "congestion": w.congestion * self.congestion,
            "hot_spot": w.hot_spot * self.hot_spot,
            "health": w.health * self.health,
            "cost": w.cost * self.cost,
        }

    def breakdown(self) -> dict[str, int]:
        return {"total": self.total, **self.terms()}


def _normalise(values: Sequence[int]) -> list[int]:
    lo, hi = min(values), max(values)
    if hi == lo:
        return [0 for _ in values]
    return [(v - lo) * SCALE // (hi - lo) for v in values]


def score_clusters(
    candidates: Sequence[tuple[ClusterId, int, int]],
    profiles: Mapping[ClusterId, Cluster],
    datasets: Sequence[str],
    weights: ClusterWeights,
    *,
    job: Job | None = None,
    models: Mapping[ClusterId, tuple[str, ...]] | None = None,
) -> list[ClusterScore]:
    """Rank candidate clusters, best first. A candidate is (cluster, placement cost, hot pressure 0..1000).

    ``models``: per candidate, the GPU models the job would use there (none: a CPU-only job, which pays
    for no GPU-hour); without it, each cluster's flat price counts. ``job`` picks the fit (training or
    inference) the health term reads (``Cluster.fit_for``); without it, no fit is read.
    """
    if not candidates:
        return []
    ordered = sorted(candidates, key=_FIRST)
    fits = _normalise([c[1] for c in ordered])
    found = [profiles.get(c[0], _UNKNOWN) for c in ordered]
    if models is None:
        raw_prices = [prof.cost_milli_per_gpu_hour for prof in found]
    else:
        raw_prices = [_price(prof, models.get(c[0], ())) for prof, c in zip(found, ordered, strict=True)]
    prices = _normalise(raw_prices)
    wanted = sorted(set(datasets)) if datasets else []
    out = []
    for (cid, raw, hot), prof, fit, price, paid in zip(ordered, found, fits, prices, raw_prices, strict=True):
        missing = len(set(wanted) - set(prof.datasets)) if wanted else 0
        locality = (SCALE * missing // len(wanted)) if wanted else 0
        congestion = max(0, min(SCALE, prof.congestion_milli))
        unfit = job is not None and not prof.fit_for(job)
        health = SCALE if unfit else SCALE - max(0, min(SCALE, prof.stability_milli))
        hot = max(0, min(SCALE, hot))
        score = ClusterScore(cid, fit, locality, congestion, hot, health, price, raw, weights, paid, unfit, missing)
        out.append(score)
    out.sort(key=_RANK)
    return out


_UNKNOWN = Cluster(cluster_id=ClusterId(""))
"""The profile of a cluster with none: nothing known against it (only its fields are read)."""
_FIRST = operator.itemgetter(0)
_RANK = operator.attrgetter("total", "placement_cost", "cluster")


def _price(profile: Cluster, models: tuple[str, ...]) -> int:
    """A GPU-hour's price there: of the dearest model the job would use (none, a CPU-only job: 0)."""
    return max((profile.rate_of(model) for model in models), default=0)


def choose_replica_across_clusters(
    placer: Placer,
    demand: Demand,
    profiles: Mapping[ClusterId, Cluster],
    weights: ClusterWeights,
    datasets: Sequence[str] = (),
) -> tuple[Choice, list[ClusterScore]] | None:
    """The simulator's and the cycle's path for one single replica: best node per cluster, then federation.

    One ``minimum.reduceat`` over the cached keys gives every cluster's best placement cost at once; only
    the winning cluster is then searched for its node.
    """
    fs = placer.fleet
    if len(fs.clusters) == 1 or placer.policy is NodePolicy.RANDOM:
        c = placer.choose(demand)
        return None if c is None else (c, [])
    keys = placer.keys(demand)
    starts = np.array([lo for lo, _ in fs.cluster_range], dtype=np.int64)
    mins = np.minimum.reduceat(keys, starts)
    n = fs.size
    cands = [(cid, int(m) // n, 0) for cid, m in zip(fs.clusters, mins.tolist(), strict=True) if m < INF]
    if not cands:
        return None
    ranked = score_clusters(cands, profiles, datasets, weights)
    ci = fs.clusters.index(ranked[0].cluster)
    lo, hi = fs.cluster_range[ci]
    c = placer.choose(demand, lo, hi)
    return None if c is None else (c, ranked)


__all__ = ["ClusterScore", "choose_replica_across_clusters", "score_clusters"]
