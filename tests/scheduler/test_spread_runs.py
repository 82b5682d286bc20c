"""Spread inference services (``inference.spread_clusters``): a run whose replicas live in several
clusters, at most ceil(replicas / k) in any one, opened by its ``JobPlaced`` and by ``JobReplicasAdded``
naming other clusters; a part's end releases only that cluster's replicas; the scheduler closes the run
(``JobRunClosed``) once every part it opened has ended. Through the scheduler's state, the pure core and
the events it publishes, the way the service runs a cycle (``decide``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from events.catalog.base import Event
from events.catalog.decisions import (
    JobPlaced,
    JobPreemptionRequested,
    JobReplicasAdded,
    JobRetryScheduled,
    JobRunClosed,
)
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuDevice, NodeObserved
from events.catalog.jobs import (
    InferenceSpec,
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobKind,
    JobPreempted,
    JobSubmitted,
    PriorityClass,
    RunEnd,
)
from events.catalog.reasons import ReasonCode
from services.scheduler.core.policy import AddReplicas, schedule
from tests.scheduler.builders import a_job, a_node, running, snapshot
from tests.scheduler.test_elastic_runs import Log, of, submitted

pytestmark = pytest.mark.timeout(30)


def clusters(*sizes: int) -> tuple[Event, ...]:
    """Clusters c1, c2, ... with one node of ``size`` A100s each."""
    out: list[Event] = []
    for i, gpus in enumerate(sizes, start=1):
        cid = f"c{i}"
        out.append(ClusterRegistered(cluster=cid, kind=ClusterKind.SIMULATED, site=cid, region="eu", currency="EUR"))
        out.append(
            NodeObserved(
                cluster=cid, node="n", generation=1, cpu_milli=64_000, memory_mib=512_000,
                gpus=tuple(GpuDevice(index=g, model="A100", memory_mib=81_920) for g in range(gpus)),
            )
        )  # fmt: skip
    return tuple(out)


def service(job: str = "svc", replicas: int = 4, spread: int = 2, least: int = 1, **more: object) -> JobSubmitted:
    return submitted(
        job,
        replicas,
        kind=JobKind.INFERENCE,
        inference=InferenceSpec(min_replicas=least, spread_clusters=spread),
        **more,
    )


def where(events: list[Event], job: str) -> dict[str, list[int]]:
    """Cluster -> replica numbers the events placed or added for ``job``."""
    out: dict[str, list[int]] = {}
    for e in events:
        if isinstance(e, JobPlaced | JobReplicasAdded) and e.job_id == job:
            out.setdefault(e.cluster, []).extend(r.replica for r in e.replicas)
    return out


def test_a_service_spread_over_two_clusters_holds_at_most_half_its_replicas_in_each():
    log = Log(*clusters(8, 8), service(replicas=4, spread=2))
    first = log.cycle()
    (placed,) = of(first, JobPlaced, "svc")
    assert isinstance(placed, JobPlaced) and len(placed.replicas) == 2  # the cap, though 4 fit in c1
    assert "at most 2 in any one" in placed.explanation
    second = log.cycle()
    (added,) = of(second, JobReplicasAdded, "svc")
    assert isinstance(added, JobReplicasAdded)
    assert added.cluster != placed.cluster and [r.replica for r in added.replicas] == [2, 3]
    assert added.running_replicas == 4 and "opens a part in" in added.explanation
    assert "all 4 replicas run now, in c1, c2" in added.explanation
    assert log.cycle() == []  # whole: nothing more
    parts = sorted((r.cluster, r.job.replicas) for r in log.state.snapshot(log.now).running)
    assert parts == [("c1", 2), ("c2", 2)]  # one running entry per part, where it is


def test_a_third_cluster_is_not_used_when_two_are_asked_and_the_cap_rounds_up():
    log = Log(*clusters(8, 8, 8), service(replicas=5, spread=2))
    events = [*log.cycle(), *log.cycle(), *log.cycle()]
    assert sorted(len(v) for v in where(events, "svc").values()) == [2, 3]  # ceil(5 / 2) = 3 in one at most
    assert len(where(events, "svc")) == 2


def test_a_part_that_ends_releases_only_its_cluster_and_the_service_is_topped_up_elsewhere():
    log = Log(*clusters(8, 8, 8), service(replicas=4, spread=2))
    events = [*log.cycle(), *log.cycle()]
    held = where(events, "svc")
    assert len(held) == 2
    lost, kept = sorted(held)
    log.add(JobFailed(job_id="svc", cluster=lost, run=1, reason=ReasonCode.NODE_FAILURE, node="n"))
    after = log.cycle()
    assert not of(after, JobRunClosed, "svc") and not of(after, JobRetryScheduled, "svc")  # the run lives on
    (added,) = of(after, JobReplicasAdded, "svc")
    assert isinstance(added, JobReplicasAdded)
    assert added.cluster not in (lost, kept)  # never reopened where its part ended; the third cluster
    assert [r.replica for r in added.replicas] == [4, 5] and added.running_replicas == 4
    running = {r.cluster for r in log.state.snapshot(log.now).running if r.job.job_id == "svc"}
    assert running == {kept, added.cluster}


def test_the_run_closes_once_every_part_ended_as_its_last_part_did_and_a_failure_is_judged_then():
    log = Log(*clusters(8, 8), service(replicas=4, spread=2))
    held = where([*log.cycle(), *log.cycle()], "svc")
    a, b = sorted(held)
    log.add(JobPreempted(job_id="svc", cluster=a, run=1))
    assert not of(log.cycle(), JobRunClosed, "svc")
    log.add(JobFailed(job_id="svc", cluster=b, run=1, reason=ReasonCode.NODE_FAILURE, node="n"))
    events = log.cycle()
    (closed,) = of(events, JobRunClosed, "svc")
    assert isinstance(closed, JobRunClosed)
    assert (closed.outcome, closed.reason, closed.cluster, closed.node) == (
        RunEnd.FAILED,
        ReasonCode.NODE_FAILURE,
        b,
        "n",
    )
    assert [(p.cluster, p.outcome) for p in closed.parts] == [(a, RunEnd.PREEMPTED), (b, RunEnd.FAILED)]
    assert "2 in c1" in closed.message and "2 in c2" in closed.message
    (retry,) = of(log.cycle(), JobRetryScheduled, "svc")  # the infrastructure failure: retried as any run
    assert retry.run == 1  # type: ignore[attr-defined]
    assert of(log.cycle(), JobRunClosed, "svc") == []  # closed once


def test_a_preempted_last_part_sends_the_service_back_to_the_queue_for_a_new_run():
    log = Log(*clusters(8, 8), service(replicas=4, spread=2))
    held = where([*log.cycle(), *log.cycle()], "svc")
    for cluster in sorted(held):
        log.add(JobPreempted(job_id="svc", cluster=cluster, run=1))
    events = log.cycle()
    (closed,) = of(events, JobRunClosed, "svc")
    assert closed.outcome is RunEnd.PREEMPTED  # type: ignore[attr-defined]
    again = [*events, *log.cycle()]
    (placed,) = of(again, JobPlaced, "svc")
    assert placed.run == 2  # type: ignore[attr-defined]


def test_a_cancelled_service_closes_cancelled_when_its_parts_have_stopped():
    log = Log(*clusters(8, 8), service(replicas=4, spread=2))
    held = where([*log.cycle(), *log.cycle()], "svc")
    log.add(JobCancelRequested(job_id="svc", requester="u"))
    assert not of(log.cycle(), JobCancelled, "svc")  # its parts are running: their clusters stop them
    for cluster in sorted(held):
        log.add(JobCancelled(job_id="svc", cluster=cluster, run=1))
    events = log.cycle()
    (closed,) = of(events, JobRunClosed, "svc")
    assert closed.outcome is RunEnd.CANCELLED  # type: ignore[attr-defined]
    assert not of(events, JobCancelled, "svc")  # no second "cancelled while waiting" for it
    assert log.state.jobs["svc"].terminal == "cancelled"


def test_preemption_stops_one_part_where_the_room_is_needed_and_the_service_lives_on():
    log = Log(*clusters(4, 4), service(replicas=4, spread=2, priority_class=PriorityClass.BEST_EFFORT))
    held = where([*log.cycle(), *log.cycle()], "svc")
    assert sorted(len(v) for v in held.values()) == [2, 2]
    # Only inference preempts inference: a production service that needs three cards of one node.
    urgent = submitted("urgent", 1, gpus=3, kind=JobKind.INFERENCE, priority_class=PriorityClass.PRODUCTION_INFERENCE)
    log.add(urgent)
    events = log.cycle()
    asked = of(events, JobPreemptionRequested, "svc")
    assert len(asked) == 1  # one part, in the cluster it makes room in
    (stop,) = asked
    assert isinstance(stop, JobPreemptionRequested)
    log.add(JobPreempted(job_id="svc", cluster=stop.cluster, run=1))
    later = [*log.cycle(), *log.cycle()]
    assert of(later, JobPlaced, "urgent")
    assert not of(later, JobRunClosed, "svc")  # its other part still serves
    running = [r for r in log.state.snapshot(log.now).running if r.job.job_id == "svc"]
    assert [r.cluster for r in running] == [c for c in sorted(held) if c != stop.cluster]


def test_a_service_that_does_not_spread_still_grows_only_in_its_own_cluster():
    log = Log(*clusters(2, 8), service(replicas=4, spread=1))
    events = [*log.cycle(), *log.cycle()]
    assert len(where(events, "svc")) == 1


def test_the_held_gpu_time_of_a_spread_run_counts_each_part_until_it_ended():
    log = Log(*clusters(8, 8), service(replicas=2, spread=2))
    held = where([*log.cycle(), *log.cycle()], "svc")
    a, b = sorted(held)
    facts = log.state.jobs["svc"]
    placement = facts.placements[1]
    log.add(JobFailed(job_id="svc", cluster=a, run=1, reason=ReasonCode.NODE_FAILURE))
    a_end = log.now
    log.now += 10_000
    log.add(JobFailed(job_id="svc", cluster=b, run=1, reason=ReasonCode.NODE_FAILURE))
    b_end = log.now
    log.cycle()  # closes it at the cycle's time
    facts = log.state.jobs["svc"]
    start = facts.placed_at[1]
    since_b = placement.where[-1][1]
    expected = 1000 * (a_end - start) + 1000 * (b_end - since_b)
    assert facts.placements[1].gpu_milli_ms(start, facts.ended_at[1], facts.left(1)) == expected


def test_each_part_of_a_spread_run_is_asked_to_stop_on_its_own():
    log = Log(*clusters(8, 8), service(replicas=4, spread=2))
    held = sorted(where([*log.cycle(), *log.cycle()], "svc"))
    stopping = {}
    for cluster in held:
        log.add(JobPreemptionRequested(job_id="svc", cycle_id="c-x", cluster=cluster, run=1, preemptor="p", rule="r"))
        stopping = {r.cluster: r.stopping for r in log.state.snapshot(log.now).running if r.job.job_id == "svc"}
        assert stopping[cluster]  # the second request, for another part, is not taken for a repeat
    assert stopping == dict.fromkeys(held, True)
    assert log.state.growing_count() == 0  # a run being stopped is not topped up


def test_a_run_grown_whole_as_the_simulations_do_still_keeps_the_per_cluster_cap():
    # The timed simulator and audit whatif keep a run as one RunningJob (no parts): its replicas'
    # nodes say where they are.
    svc = replace(a_job("svc").gpus(1).replicas(2, gang=False).build(), kind=JobKind.INFERENCE, spread_clusters=2)
    run = replace(running(svc, "cluster-a", ("a1", (0,), 1000), ("a1", (1,), 1000)), replicas_asked=4)
    nodes = [
        a_node("a1").cluster("cluster-a").gpus(8, free=(0, 0, *(1000,) * 6)).build(),
        a_node("b1").cluster("cluster-b").gpus(8).build(),
    ]
    (add,) = [d for d in schedule(snapshot(nodes, [], [run])).decisions if isinstance(d, AddReplicas)]
    assert add.cluster == "cluster-b" and len(add.replicas) == 2  # cluster-a holds its 2 of 4 already
