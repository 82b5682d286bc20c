"""Why one cluster over the next: the federation term that put the winner ahead, in words.

Called by the placement step (``job_steps``) when it explains a placement; reads the two best
``ClusterScore``s and the clusters' profiles. Pure. The term named is the one where the winner gained
the most weighted points over the runner-up (on equal gains, the earlier term in the score's order),
so "sim-2 over sim-1: stability 980 vs 610" names what actually decided, not every difference.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from events.catalog.jobs import JobKind
from services.scheduler.core.policy.federation import SCALE, ClusterScore
from services.scheduler.core.policy.model import Cluster, ClusterId

_KIND_FIT = {
    JobKind.TRAINING: "training (a healthy node with 8 GPUs or a fast interconnect)",
    JobKind.FINE_TUNE: "training (a healthy node with 8 GPUs or a fast interconnect)",
    JobKind.INFERENCE: "serving (a healthy node that seldom fails)",
}


def why_first(
    ranked: list[ClusterScore],
    profiles: Mapping[ClusterId, Cluster],
    kind: JobKind,
    has_npus: Callable[[ClusterId], bool] = lambda _: False,
) -> str:
    """The words "<winner> over <runner-up>: <what decided>", or "" with no runner-up or no term gained.
    ``has_npus``: whether a cluster has NPUs, whose failures its profile counts with its GPUs'."""
    if len(ranked) < 2 or ranked[1].total == ranked[0].total:  # a tie: the caller says what broke it
        return ""
    first, second = ranked[0], ranked[1]
    mine, theirs = first.terms(), second.terms()
    names = list(mine)
    gain, name = max(((theirs[n] - mine[n], n) for n in names), key=lambda g: (g[0], -names.index(g[1])))
    if gain <= 0:
        return ""
    words = _words(name, first, second, profiles, kind, has_npus)
    return f"{first.cluster} over {second.cluster}: {words}"


def _words(
    name: str,
    a: ClusterScore,
    b: ClusterScore,
    profiles: Mapping[ClusterId, Cluster],
    kind: JobKind,
    has_npus: Callable[[ClusterId], bool],
) -> str:
    if name == "fit":
        return f"a better node fit (placement cost {a.placement_cost} vs {b.placement_cost})"
    if name == "locality":
        return f"data locality ({a.datasets_missing} vs {b.datasets_missing} of the job's datasets missing)"
    if name == "congestion":
        return f"congestion {a.congestion} vs {b.congestion} (pending demand for its GPUs against its free ones)"
    if name == "hot_spot":
        return f"hot-spot pressure {a.hot_spot} vs {b.hot_spot} on the GPU model it would use"
    if name == "health":
        if b.unfit:
            return f"no node of {b.cluster} suits {_KIND_FIT.get(kind, kind.value)}"
        devices = "GPU and NPU" if has_npus(b.cluster) else "GPU"
        return f"stability {SCALE - a.health} vs {SCALE - b.health}{_failures(profiles.get(b.cluster), devices)}"
    return f"cost {_two_places(a.price_milli)} vs {_two_places(b.price_milli)} per GPU-hour of the model it would use"


def _failures(profile: Cluster | None, devices: str) -> str:
    """Its failures in words: ``devices`` is "GPU" or, for a cluster with NPUs, "GPU and NPU"."""
    if profile is not None and profile.recent_failures:
        count = profile.recent_failures
        return f" ({count} {devices} failure{'s' if count > 1 else ''} in the last day)"
    rate = profile.failures_per_kgpu_hour_milli if profile is not None else 0
    if not rate:
        return " (its GPUs' health)" if devices == "GPU" else " (its GPUs' and NPUs' health)"
    hours = "GPU-hours" if devices == "GPU" else "device-hours"
    return f" ({devices} failures in the last day: {_two_places(rate)} per 1,000 {hours})"


def _two_places(milli: int) -> str:
    return f"{milli // 1000}.{milli % 1000 // 10:02d}"


__all__ = ["why_first"]
