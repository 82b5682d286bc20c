"""A run spread over two clusters, downstream of the job stage: each part's time is priced at its own
cluster's rate for its node's model, and a queue holds and gives back each part on its own, even where the
two clusters name a node alike (the quota stage kept one hold per job and node name, so sim-2's n1
replaced sim-1's n1, and the second release found its part released already and its GPU time lost).

The deltas fed are those the job stage emits for a run's part on one node (``projections.stages.jobs``:
``QueueAllocation`` held at the part's opening, released with its ``UsageInterval`` at its end), routed to
the node stage under ``cluster/node`` as the job stage routes them."""

from __future__ import annotations

from collections import deque

import pytest

from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuRate
from projections.stages.clusters import usage_key
from projections.stages.core import Delta, Input, Routed
from projections.stages.deltas import QueueAllocation, UsageInterval
from tests.unit.projections.builders import Fold, a_job, a_node

pytestmark = pytest.mark.timeout(30)

HOUR_MS = 3_600_000
T = 1_000_000  # the builders' epoch: at_s 0
QUEUE = "team-a/default"


def route(fold: Fold, key: str, delta: Delta, at_s: int) -> None:
    """``delta`` to the node stage's ``key``, and what it routes on, as the topology carries a delta."""
    queue: deque[tuple[str, Input]] = deque([("nodes", Input(key, T + at_s * 1000, None, delta, f"d{at_s}"))])
    while queue:
        name, item = queue.popleft()
        stage = fold.topology.stages[name]
        after, emitted = stage.reduce(fold.store.get(name, item.key), item)
        fold.store.put(name, item.key, after)
        for out in emitted:
            if isinstance(out, Routed):
                queue.append((out.stage, Input(out.key, item.time_ms, None, out.delta, item.envelope_id)))


def two_clusters() -> Fold:
    """sim-1 prices an A100-hour at 2.00, sim-2 at 3.00; each has a node n1 of 8 A100s."""
    fold = Fold()
    for cluster, rate in (("sim-1", 2_000_000), ("sim-2", 3_000_000)):
        rates = (GpuRate(model="A100", micro_per_gpu_hour=rate),)
        registered = ClusterRegistered(
            cluster=cluster, kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR", gpu_rates=rates
        )
        fold.feed(registered)
        fold.feed(a_node(cluster=cluster, node="n1", gpus=8, model="A100"))
    fold.feed(a_job(gpus=1).model_copy(update={"replicas": 4}))
    return fold


def hold(cluster: str, held: bool, since_s: int, at_s: int) -> QueueAllocation:
    """The part's 2 replicas (1 GPU each) on ``cluster``/n1."""
    return QueueAllocation(
        "j1", 1, held, QUEUE, cluster, 8000, 16384, 2000, None, T + since_s * 1000, T + at_s * 1000, part="n1"
    )


def interval(cluster: str, start_s: int, end_s: int) -> UsageInterval:
    return UsageInterval("j1", 1, "team-a", "", cluster, "", 2000, T + start_s * 1000, T + end_s * 1000, part="n1")


def spread_run(fold: Fold) -> None:
    """Part sim-1 from 0 to 1,800 s; part sim-2 from 600 s to 2,400 s (both in hour 0)."""
    route(fold, "sim-1/n1", hold("sim-1", True, 0, 0), 0)
    route(fold, "sim-2/n1", hold("sim-2", True, 600, 600), 600)
    route(fold, "sim-1/n1", hold("sim-1", False, 0, 1800), 1800)
    route(fold, "sim-1/n1", interval("sim-1", 0, 1800), 1800)
    route(fold, "sim-2/n1", hold("sim-2", False, 600, 2400), 2400)
    route(fold, "sim-2/n1", interval("sim-2", 600, 2400), 2400)


def test_each_part_is_priced_at_its_own_clusters_rate() -> None:
    fold = two_clusters()
    spread_run(fold)
    half_hour = 2000 * 1_800_000  # 2 GPUs for 30 minutes: one GPU-hour
    sim1 = fold.get("usage", usage_key("team-a", "sim-1", "A100", 0))
    sim2 = fold.get("usage", usage_key("team-a", "sim-2", "A100", 0))
    assert (sim1.allocated_milli_ms, sim1.cost_micro) == (half_hour, 2_000_000)
    assert (sim2.allocated_milli_ms, sim2.cost_micro) == (half_hour, 3_000_000)


def test_a_queue_holds_each_part_and_counts_each_parts_time_when_it_ends() -> None:
    fold = two_clusters()
    route(fold, "sim-1/n1", hold("sim-1", True, 0, 0), 0)
    route(fold, "sim-2/n1", hold("sim-2", True, 600, 600), 600)
    queue = fold.get("quota", QUEUE)
    assert queue.totals.gpu_milli == 4000  # both parts: 2 GPUs in each cluster
    route(fold, "sim-1/n1", hold("sim-1", False, 0, 1800), 1800)
    queue = fold.get("quota", QUEUE)
    assert queue.totals.gpu_milli == 2000  # sim-1's part gave its hold back; sim-2's holds on
    route(fold, "sim-2/n1", hold("sim-2", False, 600, 2400), 2400)
    queue = fold.get("quota", QUEUE)
    assert queue.totals.gpu_milli == 0
    assert queue.gpu_milli_ms_consumed == 2 * 2000 * 1_800_000  # both parts' time, not one


def test_a_parts_release_delivered_again_counts_once() -> None:
    fold = two_clusters()
    spread_run(fold)
    route(fold, "sim-1/n1", hold("sim-1", False, 0, 1800), 2500)
    route(fold, "sim-2/n1", interval("sim-2", 600, 2400), 2500)
    assert fold.get("quota", QUEUE).gpu_milli_ms_consumed == 2 * 2000 * 1_800_000
    sim2 = fold.get("usage", usage_key("team-a", "sim-2", "A100", 0))
    assert sim2.cost_micro == 3_000_000
