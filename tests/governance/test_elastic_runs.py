"""A run that grows (``JobReplicasAdded``) in governance's state: the budgets count each added replica's
GPU time from when it was added (as the scheduler does), once however often the addition is read; the run
holds the added replicas' nodes and GPUs (what a reclaim's figures name)."""

from __future__ import annotations

import pytest

from events.catalog.budget_windows import Window
from events.catalog.decisions import CandidateScore, JobReplicasAdded, ReplicaPlacement
from events.catalog.jobs import JobStarted, JobSucceeded
from events.catalog.types import ClusterId, CycleId, JobId, NodeId
from services.governance.core.state import GovState

from .builders import CLUSTER, MIN, T0, History

pytestmark = pytest.mark.timeout(30)


def added(first: int, count: int) -> JobReplicasAdded:
    return JobReplicasAdded(
        job_id=JobId("array"),
        cycle_id=CycleId("c2"),
        cluster=CLUSTER,
        run=1,
        replicas=tuple(
            ReplicaPlacement(replica=first + i, node=NodeId("n2"), gpu_indices=(i,), gpu_milli_each=1000)
            for i in range(count)
        ),
        running_replicas=first + count,
        chosen=CandidateScore(cluster=ClusterId(CLUSTER), total=0),
        explanation="added",
    )


def folded(history: History) -> GovState:
    state = GovState()
    for envelope in history.envelopes:
        state.fold(envelope)
    return state


def test_an_added_replica_counts_from_when_it_was_added_and_a_repeat_counts_nothing() -> None:
    history = History().submit("array", replicas=4).place("array", at=1, nodes=("n1", "n1"))
    history.add(JobStarted(job_id=JobId("array"), cluster=CLUSTER), at=2)
    history.add(added(2, 2), at=31).add(added(2, 2), at=31)
    state = folded(history)
    run = state.jobs["array"].runs[1]
    assert (run.replicas, run.gpu_milli, run.nodes) == (4, 4000, ("n1", "n2"))
    history.add(JobSucceeded(job_id=JobId("array"), cluster=CLUSTER), at=61)
    state = folded(history)
    window = Window(T0, T0 + 24 * 60 * MIN, "all")
    assert state.held.within(("team-a",), window) == 2000 * 60 * MIN + 2000 * 30 * MIN
