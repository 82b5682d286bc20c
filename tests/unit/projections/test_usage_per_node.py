"""A run's time is counted node by node: its replicas on a node of another GPU model are that model's time
and priced at that model's rate, and its replicas on two nodes of one model both count. (The job view
used to hand a run's whole interval to its first replica's node, so a 2-replica run over an A100 and a T4
node was two A100s at the A100 rate, and the report showed T4 time used but never allocated.)"""

from __future__ import annotations

import pytest

from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuRate
from events.catalog.jobs import JobStarted, JobSucceeded
from projections.stages.clusters import usage_key
from tests.unit.projections.builders import Fold, a_job, a_node

pytestmark = pytest.mark.timeout(30)

HOUR_MS = 3_600_000


def run_over(*nodes: str) -> Fold:
    """j1, 1 GPU per replica, one replica on each of ``nodes`` of c1, for half an hour in hour 0."""
    fold = Fold()
    rates = (GpuRate(model="A100", micro_per_gpu_hour=2_000_000), GpuRate(model="T4", micro_per_gpu_hour=400_000))
    fold.feed(
        ClusterRegistered(
            cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR", gpu_rates=rates
        )
    )
    fold.feed(a_node(node="a1", gpus=8, model="A100"))
    fold.feed(a_node(node="a2", gpus=8, model="A100"))
    fold.feed(a_node(node="t1", gpus=4, model="T4"))
    fold.feed(a_job(gpus=1).model_copy(update={"replicas": len(nodes)}))
    fold.feed(
        JobPlaced(
            job_id="j1",
            cycle_id="cycle-1",
            cluster="c1",
            run=1,
            replicas=tuple(
                ReplicaPlacement(replica=i, node=node, gpu_indices=(0,), gpu_milli_each=1000)
                for i, node in enumerate(nodes)
            ),
            chosen=CandidateScore(cluster="c1", node=nodes[0], total=0),
            explanation="test",
        )
    )
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=1)
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=1800)
    return fold


def bucket(fold: Fold, model: str) -> tuple[int, int]:
    found = fold.get("usage", usage_key("team-a", "c1", model, 0))
    return (0, 0) if found is None else (found.allocated_milli_ms, found.cost_micro)


def test_replicas_on_nodes_of_two_models_are_each_models_time_at_its_rate() -> None:
    fold = run_over("a1", "t1")
    half_hour = 1000 * 1_800_000
    assert bucket(fold, "A100") == (half_hour, 1_000_000)  # half an A100-hour at 2.00
    assert bucket(fold, "T4") == (half_hour, 200_000)  # half a T4-hour at 0.40, not at the A100 rate


def test_replicas_on_two_nodes_of_one_model_both_count() -> None:
    fold = run_over("a1", "a2")
    assert bucket(fold, "A100") == (2 * 1000 * 1_800_000, 2_000_000)
    assert bucket(fold, "T4") == (0, 0)


def test_a_queue_holds_a_run_over_two_models_under_each_model_and_gives_it_all_back() -> None:
    from projections.stages.quota import running_jobs

    fold = Fold()
    fold.feed(a_node(node="a1", gpus=8, model="A100"))
    fold.feed(a_node(node="t1", gpus=4, model="T4"))
    fold.feed(a_job(gpus=1).model_copy(update={"replicas": 2}))
    fold.feed(
        JobPlaced(
            job_id="j1",
            cycle_id="cycle-1",
            cluster="c1",
            run=1,
            replicas=(
                ReplicaPlacement(replica=0, node="a1", gpu_indices=(0,), gpu_milli_each=1000),
                ReplicaPlacement(replica=1, node="t1", gpu_indices=(2,), gpu_milli_each=1000),
            ),
            chosen=CandidateScore(cluster="c1", node="a1", total=0),
            explanation="test",
        )
    )
    queue = fold.get("quota", "team-a/default")
    by_model = {model: milli for model, (milli, _) in dict(queue.totals.gpu_by_model).items()}
    assert by_model == {"A100": 1000, "T4": 1000}  # was {"A100": 2000}
    assert queue.totals.gpu_milli == 2000 and running_jobs(queue) == 1
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=1)
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=3600)
    queue = fold.get("quota", "team-a/default")
    assert queue.totals.gpu_milli == 0 and not dict(queue.totals.gpu_by_model) and running_jobs(queue) == 0
    assert queue.gpu_milli_ms_consumed == 2 * 1000 * 3_600_000
