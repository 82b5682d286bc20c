"""A run that grows (``JobReplicasAdded``) in the read side: the job view shows every replica it holds,
its node holds the added replicas' devices, its queue holds what it holds, and its GPU time counts each
added replica from when it was added."""

from __future__ import annotations

import pytest

from events.catalog.decisions import CandidateScore, JobReplicasAdded, ReplicaPlacement
from events.catalog.inventory import ClusterKind, ClusterRegistered, NpuDevice
from events.catalog.jobs import JobStarted, JobSucceeded
from projections.stages.clusters import usage_key
from projections.stages.nodes import allocated_by_gpu
from tests.unit.projections.builders import Fold, a_job, a_node, placed

pytestmark = pytest.mark.timeout(30)

T = 1_000_000  # the builders' time zero, in ms


def added(first: int, *gpus: int, run: int = 1) -> JobReplicasAdded:
    return JobReplicasAdded(
        job_id="j1",
        cycle_id="cycle-2",
        cluster="c1",
        run=run,
        replicas=tuple(
            ReplicaPlacement(replica=first + i, node="n1", gpu_indices=(g,), gpu_milli_each=1000)
            for i, g in enumerate(gpus)
        ),
        running_replicas=first + len(gpus),
        chosen=CandidateScore(cluster="c1", total=0),
        explanation=f"j1 grows in c1: added {len(gpus)} replica(s)",
    )


def started_with_two_of_four() -> Fold:
    fold = Fold()
    fold.feed(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"))
    fold.feed(a_node(gpus=8))
    fold.feed(a_job(gpus=1).model_copy(update={"replicas": 4}))
    two = (
        ReplicaPlacement(replica=0, node="n1", gpu_indices=(0,), gpu_milli_each=1000),
        ReplicaPlacement(replica=1, node="n1", gpu_indices=(1,), gpu_milli_each=1000),
    )
    fold.feed(placed().model_copy(update={"replicas": two}), at_s=1)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=2)
    return fold


def test_the_job_view_node_and_queue_hold_the_added_replicas() -> None:
    fold = started_with_two_of_four()
    assert fold.get("quota", "team-a/default").totals.gpu_milli == 2000  # what it holds, not what it asks
    fold.feed(added(2, 2, 3), at_s=100)
    job = fold.get("jobs", "j1")
    assert (job.status, job.replicas, len(job.placement)) == ("running", 4, 4)
    assert job.timeline[-1].event == "JobReplicasAdded" and "added 2 replica(s)" in job.timeline[-1].message
    assert job.last_decision_type == "JobReplicasAdded"
    node = fold.get("nodes", "c1/n1")
    (held,) = node.allocations
    assert allocated_by_gpu(node) == {0: 1000, 1: 1000, 2: 1000, 3: 1000} and held.cpu_milli == 4 * 4000
    assert fold.get("quota", "team-a/default").totals.gpu_milli == 4000


def test_a_repeated_addition_changes_nothing() -> None:
    fold = started_with_two_of_four()
    fold.feed(added(2, 2, 3), at_s=100, event_id="add-1")
    before = fold.get("jobs", "j1")
    fold.feed(added(2, 2, 3), at_s=100, event_id="add-1")
    assert fold.get("jobs", "j1") == before


def test_the_runs_gpu_time_counts_added_replicas_from_when_they_were_added_and_all_go_at_its_end() -> None:
    fold = started_with_two_of_four()
    fold.feed(added(2, 2, 3), at_s=100)
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=1000)
    assert fold.get("nodes", "c1/n1").allocations == ()
    bucket = fold.get("usage", usage_key("team-a", "c1", "A100", 0))
    assert bucket.allocated_milli_ms == 2000 * (1000 - 1) * 1000 + 2000 * (1000 - 100) * 1000


def test_the_runs_npu_time_counts_added_replicas_from_when_they_were_added() -> None:
    fold = Fold()
    fold.feed(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"))
    npus = tuple(NpuDevice(index=i, model="Ascend910B", memory_mib=65536) for i in range(8))
    fold.feed(a_node(gpus=0).model_copy(update={"npus": npus}))
    asked = a_job(gpus=0)
    fold.feed(asked.model_copy(update={"replicas": 4, "resources": asked.resources.model_copy(update={"npus": 2})}))
    two = tuple(ReplicaPlacement(replica=r, node="n1", npu_indices=(2 * r, 2 * r + 1)) for r in range(2))
    fold.feed(placed().model_copy(update={"replicas": two}), at_s=1)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=2)
    more = tuple(ReplicaPlacement(replica=r, node="n1", npu_indices=(2 * r, 2 * r + 1)) for r in (2, 3))
    fold.feed(added(2, 0, 1).model_copy(update={"replicas": more}), at_s=100)
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=1000)
    bucket = fold.get("usage", usage_key("team-a", "c1", "Ascend910B", 0, "npu"))
    assert bucket.allocated_milli_ms == 4000 * (1000 - 1) * 1000 + 4000 * (1000 - 100) * 1000
    assert fold.store.tables.get("usage", {}).get(usage_key("team-a", "c1", "", 0)) is None  # no GPU time
