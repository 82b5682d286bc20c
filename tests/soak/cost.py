"""Cost recomputed from the raw events, independently of the projections, and held to the read model.

Called by the soak's run with the log's history (``tests.soak.history``) and the usage rows of the
read model (``ReadModels.usage_hours``, what ``fedsched gov report`` sums). Pure.

The rule the projections follow (``projections.stages.jobs``, ``nodes`` and ``clusters``), written
again from the events alone: a run holds, from its ``JobPlaced`` (the envelope's time) to the first
event that ended it, the milli-GPU of its replicas' GPUs times the share of each; its GPU model is the
first GPU's of the node of its first replica; the time is cut at each hour and each piece costs the
cluster's rate for that model (``ClusterRegistered.gpu_rates``, micro-units per GPU-hour) times its
milli-GPU-milliseconds over 1000 x 3,600,000, rounded down. Buckets are tenant x cluster x model x hour.
GPU time only: the read model's NPU rows (``kind`` "npu") are not recomputed here and not compared.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from projections.readmodel.rows.typed import UsageHour
from tests.soak.history import History

HOUR_MS = 3_600_000
Bucket = tuple[str, str, str, int]  # tenant, cluster, GPU model, hour


def recompute(history: History) -> dict[Bucket, tuple[int, int]]:
    """Bucket -> (allocated milli-GPU-ms, cost in micro-units)."""
    out: dict[Bucket, list[int]] = defaultdict(lambda: [0, 0])
    for (job, run), placed in history.placements.items():
        ends = history.run_ends.get((job, run))
        if not ends or not placed[0].gpu_milli:
            continue
        placement = placed[0]
        end_ms = min(seen.time_ms for seen in ends)
        tenant = history.tenant_of.get(job, ("", ""))[0] or "unknown"
        model = history.node_model.get((placement.cluster, placement.first_node), "")
        rate = history.rates.get(placement.cluster, {}).get(model, 0)
        start = placement.seen.time_ms
        while start < end_ms:
            hour = start - start % HOUR_MS
            stop = min(end_ms, hour + HOUR_MS)
            milli_ms = placement.gpu_milli * (stop - start)
            bucket = out[(tenant, placement.cluster, model or "none", hour)]
            bucket[0] += milli_ms
            bucket[1] += rate * milli_ms // (1000 * HOUR_MS)
            start = stop
    return {key: (allocated, cost) for key, (allocated, cost) in out.items()}


def differences(history: History, rows: Sequence[UsageHour]) -> tuple[list[str], int, int]:
    """Each bucket where the read model differs from the recomputation; and the two totals of cost."""
    expected = recompute(history)
    live: dict[Bucket, tuple[int, int]] = {
        (str(r.tenant), str(r.cluster), r.gpu_model, r.hour_ms): (r.allocated_milli_ms, r.cost_micro)
        for r in rows
        if r.kind == "gpu"
    }
    out = []
    for key in sorted(set(expected) | set(live)):
        want, have = expected.get(key, (0, 0)), live.get(key, (0, 0))
        if want != have:
            tenant, cluster, model, hour = key
            out.append(
                f"{tenant}/{cluster}/{model} hour {hour}: read model allocated {have[0]} milli-GPU-ms costing"
                f" {have[1]}, the events {want[0]} costing {want[1]}"
            )
    return out, sum(c for _, c in expected.values()), sum(c for _, c in live.values())
