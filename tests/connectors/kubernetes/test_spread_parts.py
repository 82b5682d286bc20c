"""A spread inference service's part in a Kubernetes cluster, in the pure parts: the part's pods say how
many replicas the part holds here (its replica numbers need not start at 0), so its pods' lifecycle is the
part's, naming this cluster; the job book keeps such a job through the end of a part and forgets it only
when the scheduler closes its run for good; jobs that do not spread read as before."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.kubernetes import lifecycle, names, pods
from connectors.kubernetes.jobbook import JobBook
from connectors.kubernetes.lifecycle import Transition
from events.catalog.base import Event
from events.catalog.decisions import CandidateScore, JobReplicasAdded, JobRunClosed, ReplicaPlacement, RunPartEnd
from events.catalog.jobs import (
    InferenceSpec,
    JobCancelled,
    JobFailed,
    JobKind,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
    RunEnd,
)
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, CycleId, JobId, NodeId
from events.log.memory import MemoryLog
from events.wire.envelope import parse_time

from .builders import a_job, container_status, pod_status, running, terminated

pytestmark = pytest.mark.timeout(30)

HERE, THERE = ClusterId("k8s-b"), ClusterId("k8s-a")
NOW = parse_time("2026-12-02T13:05:00Z")
JOB = JobId("svc")


def service(spread_clusters: int = 2) -> JobSubmitted:
    inference = InferenceSpec(spread_clusters=spread_clusters)
    return a_job(JOB, replicas=4, kind=JobKind.INFERENCE, inference=inference)


def added(*numbers: int, cluster: ClusterId = HERE, running: int = 4) -> JobReplicasAdded:
    return JobReplicasAdded(
        job_id=JOB,
        cycle_id=CycleId("cycle-2"),
        cluster=cluster,
        run=1,
        replicas=tuple(
            ReplicaPlacement(replica=r, node=NodeId(f"node-{r}"), gpu_indices=(0,), gpu_milli_each=1000)
            for r in numbers
        ),
        running_replicas=running,
        chosen=CandidateScore(cluster=cluster, total=0),
        explanation="a part in another cluster",
    )


def part_pods(part_replicas: int | None, *numbers: int) -> list[dict[str, Any]]:
    return pods.render_pods(added(*numbers), service(), pods.RenderOptions(HERE), part_replicas)


def outcomes(pods_: list[dict[str, Any]], status: dict[str, Any]) -> list[Transition]:
    replicas = max(ident.replicas for p in pods_ if (ident := lifecycle.identify(p)) is not None)
    states = [lifecycle.replica_state({**p, "status": status}, int(p["metadata"]["labels"][names.LABEL_REPLICA]),
                                      NOW, 30_000) for p in pods_]  # fmt: skip
    return [o.transition for o in lifecycle.decide(states, replicas, frozenset())]


def test_a_parts_pods_count_the_replicas_of_the_part_here() -> None:
    made = part_pods(2, 2, 3)
    assert [p["metadata"]["annotations"][names.ANN_PART_REPLICAS] for p in made] == ["2", "2"]
    assert [p["metadata"]["annotations"][names.ANN_REPLICAS] for p in made] == ["4", "4"]  # the run's, all clusters
    assert [p["metadata"]["labels"][names.LABEL_RUN] for p in made] == ["1", "1"]
    assert {lifecycle.identify(p).replicas for p in made} == {2}  # type: ignore[union-attr]


def test_a_part_holding_replicas_2_and_3_starts_and_succeeds_with_them() -> None:
    made = part_pods(2, 2, 3)
    assert outcomes(made, pod_status("Running", container_status(**running()))) == [Transition.STARTED]
    done = outcomes(made, pod_status("Succeeded", container_status(**terminated(0))))
    assert done == [Transition.STARTED, Transition.SUCCEEDED]
    event = lifecycle.to_event(lifecycle.Outcome(Transition.SUCCEEDED), lifecycle.RunKey(JOB, 1), HERE, 2)
    assert isinstance(event, JobSucceeded) and (event.cluster, event.run) == (HERE, 1)
    # Counted by the run's replicas instead (all clusters'), the part would never have started:
    assert outcomes(part_pods(None, 2, 3), pod_status("Running", container_status(**running()))) == []


def test_pods_of_a_job_that_does_not_spread_carry_no_part_count() -> None:
    made = pods.render_pods(added(2, 3), service(1), pods.RenderOptions(HERE))
    assert all(names.ANN_PART_REPLICAS not in p["metadata"]["annotations"] for p in made)


# -- the job book ------------------------------------------------------------------------------------


def book_after(*events: Event) -> JobBook:
    book = JobBook(MemoryLog(), HERE)  # type: ignore[arg-type]
    for event in events:
        book.apply(event)
    return book


def closed(outcome: RunEnd, reason: ReasonCode | None = None) -> JobRunClosed:
    return JobRunClosed(
        job_id=JOB, cycle_id=CycleId("cycle-9"), run=1, cluster=HERE, outcome=outcome, reason=reason,
        parts=(RunPartEnd(cluster=THERE, outcome=RunEnd.SUCCEEDED), RunPartEnd(cluster=HERE, outcome=outcome,
                                                                              reason=reason)),
        message="both parts ended",
    )  # fmt: skip


def test_the_end_of_a_part_keeps_a_spread_job_and_marks_the_part_here_ended() -> None:
    ended_here = JobSucceeded(job_id=JOB, cluster=HERE, run=1)
    ended_there = JobCancelled(job_id=JOB, cluster=THERE, run=1, requester=None)
    book = book_after(service(), JobStarted(job_id=JOB, cluster=HERE, run=1), ended_here, ended_there)
    entry = book.entry(JOB)
    assert entry is not None and entry.submitted is not None
    assert book.run_ended(JOB, 1)  # the part here: a late copy of its addition must not open it again
    assert book.spreads(JOB)


def test_the_run_closed_for_good_ends_a_spread_job_and_a_failure_awaiting_its_verdict_does_not() -> None:
    book = book_after(service(), JobSucceeded(job_id=JOB, cluster=HERE, run=1))
    assert book.apply(closed(RunEnd.SUCCEEDED)) and book.entry(JOB) is None
    waiting = book_after(service(), JobFailed(job_id=JOB, cluster=HERE, run=1, reason=ReasonCode.NODE_FAILURE))
    assert not waiting.apply(closed(RunEnd.FAILED, ReasonCode.NODE_FAILURE))
    assert waiting.entry(JOB) is not None  # the retry's placement needs the submission


def test_a_job_that_does_not_spread_ends_with_its_run_as_before() -> None:
    book = book_after(service(1))
    assert book.apply(JobSucceeded(job_id=JOB, cluster=HERE, run=1)) and book.entry(JOB) is None
