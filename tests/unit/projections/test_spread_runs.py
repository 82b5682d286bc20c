"""A spread inference service's run (``inference.spread_clusters`` above 1) in the read side: its replicas
live in parts, one per cluster; a part's end releases only that part's replicas and leaves the job's
status; the scheduler's ``JobRunClosed`` ends the run as its last part did. Whatever order the jobs and
decisions topics are read in, and with any event appended again, the views, rows and published usage are
those of the story folded in event-time order."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from events.catalog.base import Event
from events.catalog.decisions import (
    CandidateScore,
    FailureKind,
    JobPlaced,
    JobReplicasAdded,
    JobRetryScheduled,
    JobRunClosed,
    ReplicaPlacement,
    RunPartEnd,
)
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuRate
from events.catalog.jobs import (
    InferenceSpec,
    JobCancelled,
    JobFailed,
    JobKind,
    JobPreempted,
    JobStarted,
    JobSucceeded,
    RunEnd,
)
from events.catalog.reasons import ReasonCode
from events.catalog.topics import DECISIONS, JOBS
from events.wire.envelope import Envelope
from projections.readmodel.rows.entities import TABLES
from projections.stages.clusters import usage_key
from projections.stages.core import Applied, Output, Position, evolve
from projections.stages.jobs import JobView, RunPart
from projections.stages.nodes import allocated_by_gpu
from projections.stages.topology import MemoryStore, Processed, Topology
from tests.unit.projections.builders import Fold, a_job, a_node

pytestmark = pytest.mark.timeout(120)

T = 1_000_000  # the builders' time zero, in ms


def a_service(spread: int = 2) -> Event:
    """j1: an inference service of 4 replicas of 1 GPU, spread over ``spread`` clusters."""
    job = a_job(gpus=1)
    inference = InferenceSpec(min_replicas=1, spread_clusters=spread)
    return job.model_copy(update={"replicas": 4, "kind": JobKind.INFERENCE, "inference": inference})


def replicas(first: int, gpus: tuple[int, ...]) -> tuple[ReplicaPlacement, ...]:
    return tuple(
        ReplicaPlacement(replica=first + i, node="n1", gpu_indices=(g,), gpu_milli_each=1000)
        for i, g in enumerate(gpus)
    )


def placed_in(cluster: str, run: int = 1) -> JobPlaced:
    return JobPlaced(
        job_id="j1",
        cycle_id=f"cycle-p{run}",
        cluster=cluster,
        run=run,
        replicas=replicas(0, (0, 1)),
        chosen=CandidateScore(cluster=cluster, node="n1", total=0),
        explanation=f"2 replicas in {cluster}",
    )


def added_in(cluster: str, first: int = 2, run: int = 1) -> JobReplicasAdded:
    return JobReplicasAdded(
        job_id="j1",
        cycle_id=f"cycle-a{first}",
        cluster=cluster,
        run=run,
        replicas=replicas(first, (0, 1)),
        running_replicas=first + 2,
        chosen=CandidateScore(cluster=cluster, node="n1", total=0),
        explanation=f"opened the run's part in {cluster}: 2 replicas",
    )


def closed(outcome: RunEnd, last: str = "c1", reason: ReasonCode | None = None, run: int = 1) -> JobRunClosed:
    first = "c2" if last == "c1" else "c1"
    parts = (
        RunPartEnd(cluster=first, outcome=RunEnd.FAILED, reason=ReasonCode.NODE_FAILURE),
        RunPartEnd(cluster=last, outcome=outcome, reason=reason),
    )
    return JobRunClosed(
        job_id="j1",
        cycle_id="cycle-close",
        run=run,
        cluster=last,
        outcome=outcome,
        reason=reason,
        parts=parts,
        message=f"2 replicas in c1 and 2 in c2; {first}'s part failed, then {last}'s {outcome.value}",
    )


def c2_failed(run: int = 1) -> JobFailed:
    return JobFailed(job_id="j1", cluster="c2", run=run, reason=ReasonCode.NODE_FAILURE, node="n1")


def fleet() -> Fold:
    fold = Fold()
    for cluster in ("c1", "c2"):
        rates = (GpuRate(model="A100", micro_per_gpu_hour=2_000_000),)
        registered = ClusterRegistered(
            cluster=cluster, kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR", gpu_rates=rates
        )
        fold.feed(registered)
        fold.feed(a_node(cluster=cluster, node="n1", gpus=8))  # the same node name in both clusters
    return fold


def running_in_two_clusters() -> Fold:
    """j1 runs 2 replicas on c1/n1 (from 1 s) and 2 on c2/n1 (from 10 s)."""
    fold = fleet()
    fold.feed(a_service())
    fold.feed(placed_in("c1"), at_s=1)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=2)
    fold.feed(added_in("c2"), at_s=10)
    fold.feed(JobStarted(job_id="j1", cluster="c2"), at_s=11)
    return fold


def job(fold: Fold) -> JobView:
    view = fold.get("jobs", "j1")
    assert isinstance(view, JobView)
    return view


def test_a_run_opens_a_part_in_each_cluster_its_replicas_are_added_in() -> None:
    fold = running_in_two_clusters()
    view = job(fold)
    assert (view.status, view.cluster, view.clusters) == ("running", "c1", ("c1", "c2"))
    assert [(p.cluster, p.replicas, p.opened_ms, p.ended) for p in view.parts] == [
        ("c1", 2, T + 1000, ""),
        ("c2", 2, T + 10_000, ""),
    ]
    assert [s.cluster for s in view.placement] == ["c1", "c1", "c2", "c2"]
    assert view.timeline[-1].message == "c2's part started"
    for cluster in ("c1", "c2"):
        assert allocated_by_gpu(fold.get("nodes", f"{cluster}/n1")) == {0: 1000, 1: 1000}
    quota = fold.get("quota", "team-a/default")
    assert quota.totals.gpu_milli == 4000  # two parts on nodes named alike: two holdings, not one
    assert sorted(key for key, _ in quota.holdings.items()) == ["j1@c1/n1", "j1@c2/n1"]


def test_a_part_end_releases_only_its_replicas_and_leaves_the_status() -> None:
    fold = running_in_two_clusters()
    fold.feed(c2_failed(), at_s=100)
    view = job(fold)
    assert (view.status, view.run, view.cluster, view.clusters) == ("running", 1, "c1", ("c1",))
    assert [s.cluster for s in view.placement] == ["c1", "c1"]
    assert view.parts[1] == RunPart("c2", 2, T + 10_000, "failed", "NodeFailure", T + 100_000)
    entry = view.timeline[-1]
    assert (entry.status, entry.event, entry.reason) == ("running", "JobFailed", "NodeFailure")
    assert entry.message == "c2's part failed: the node failed while the job ran (node n1); the service runs on in c1"
    assert fold.get("nodes", "c2/n1").allocations == ()
    assert allocated_by_gpu(fold.get("nodes", "c1/n1")) == {0: 1000, 1: 1000}
    assert fold.get("quota", "team-a/default").totals.gpu_milli == 2000
    # c2's part held 2 GPUs from its opening (10 s) to its end (100 s); c1's time is not counted yet.
    c2 = fold.get("usage", usage_key("team-a", "c2", "A100", 0))
    assert c2.allocated_milli_ms == 2000 * 90_000
    assert fold.store.tables.get("usage", {}).get(usage_key("team-a", "c1", "A100", 0)) is None


def test_a_part_end_read_again_changes_nothing() -> None:
    fold = running_in_two_clusters()
    fold.feed(c2_failed(), at_s=100, event_id="c2-end")
    before = evolve(job(fold), applied=Applied())
    fold.feed(c2_failed(), at_s=100, event_id="c2-end")
    fold.feed(c2_failed(), at_s=101, event_id="c2-end-republished")  # a connector re-publishing it
    assert evolve(job(fold), applied=Applied()) == before


@pytest.mark.parametrize(
    ("outcome", "reason", "status", "then"),
    [
        (RunEnd.PREEMPTED, None, "queued", "requeued"),
        (RunEnd.FAILED, ReasonCode.NODE_FAILURE, "queued", "awaits its verdict"),
        (RunEnd.CANCELLED, None, "cancelled", "final"),
        (RunEnd.SUCCEEDED, None, "succeeded", "final"),
    ],
)
def test_the_close_ends_the_run_as_its_last_part_did(
    outcome: RunEnd, reason: ReasonCode | None, status: str, then: str
) -> None:
    fold = running_in_two_clusters()
    fold.feed(c2_failed(), at_s=100)
    ends = {
        RunEnd.PREEMPTED: JobPreempted(job_id="j1", cluster="c1"),
        RunEnd.FAILED: JobFailed(job_id="j1", cluster="c1", reason=ReasonCode.NODE_FAILURE),
        RunEnd.CANCELLED: JobCancelled(job_id="j1", cluster="c1", run=1),
        RunEnd.SUCCEEDED: JobSucceeded(job_id="j1", cluster="c1"),
    }
    fold.feed(ends[outcome], at_s=200)
    assert job(fold).status == "running"  # the last part's end does not end the run: the close does
    assert fold.get("nodes", "c1/n1").allocations == ()
    fold.feed(closed(outcome, reason=reason), at_s=201)
    view = job(fold)
    assert view.status == status
    assert view.timeline[-1].event == "JobRunClosed" and view.timeline[-1].message.startswith("2 replicas in c1")
    assert view.last_reason == (reason.value if reason else outcome.value.capitalize())
    assert [p.ended for p in view.parts] == [outcome.value, "failed"]  # in the order they opened
    assert view.placement == () and view.clusters == ()
    if then == "requeued":
        assert (view.preemptions, view.cluster, view.ended_ms) == (1, None, None)
    elif then == "final":
        assert (view.cluster, view.ended_ms) == ("c1", T + 201_000)
    else:
        assert (view.preemptions, view.cluster, view.retries) == (0, None, 0)
        retry = JobRetryScheduled(
            job_id="j1",
            cycle_id="cycle-retry",
            run=1,
            cluster="c1",
            node="n1",
            failure=ReasonCode.NODE_FAILURE,
            kind=FailureKind.INFRASTRUCTURE,
            allowed=3,
            attempt=1,
            not_before_ms=T + 300_000,
            message="retry 1 of 3 after node n1 failed",
        )
        fold.feed(retry, at_s=202)
        assert (job(fold).status, job(fold).retries) == ("queued", 1)
    # Every GPU of both parts was counted once: c2's from 10 s to 100 s, c1's from 1 s to 200 s.
    c1 = fold.get("usage", usage_key("team-a", "c1", "A100", 0))
    c2 = fold.get("usage", usage_key("team-a", "c2", "A100", 0))
    assert (c1.allocated_milli_ms, c2.allocated_milli_ms) == (2000 * 199_000, 2000 * 90_000)


def test_a_close_before_the_last_parts_end_in_job_order_ends_the_run_and_the_late_end_changes_nothing() -> None:
    fold = running_in_two_clusters()
    fold.feed(c2_failed(), at_s=100)
    fold.feed(closed(RunEnd.PREEMPTED), at_s=150)  # the scheduler's clock ahead of c1's connector
    fold.feed(JobPreempted(job_id="j1", cluster="c1"), at_s=200)
    view = job(fold)
    assert (view.status, view.preemptions) == ("queued", 1)
    assert fold.get("nodes", "c1/n1").allocations == ()
    assert fold.get("quota", "team-a/default").totals.gpu_milli == 0


def test_a_job_that_does_not_spread_ends_its_run_with_its_first_end() -> None:
    fold = fleet()
    fold.feed(a_service(spread=1))
    fold.feed(placed_in("c1"), at_s=1)
    fold.feed(JobFailed(job_id="j1", cluster="c1", reason=ReasonCode.NON_ZERO_EXIT), at_s=5)
    view = job(fold)
    assert (view.status, view.parts, view.placement, view.ended_ms) == ("failed", (), (), T + 5000)
    assert fold.get("nodes", "c1/n1").allocations == ()
    assert sorted(key for key, _ in fold.get("quota", "team-a/default").holdings.items()) == []


# -- every interleaving of the two topics, and duplicates ---------------------------------------------------

STORY: list[tuple[int, Event]] = [
    (0, a_service()),
    (1, placed_in("c1")),
    (2, JobStarted(job_id="j1", cluster="c1")),
    (10, added_in("c2")),
    (11, JobStarted(job_id="j1", cluster="c2")),
    (100, c2_failed()),
    (200, JobPreempted(job_id="j1", cluster="c1")),
    (201, closed(RunEnd.PREEMPTED)),
    (300, placed_in("c2", run=2)),
]
"""Event time (s) and event: run 1 opens in c1 and c2, c2's part fails, c1's is preempted, the scheduler
closes the run, and places run 2 in c2."""

Record = tuple[Position, int, Event, str]


def _records(story: list[tuple[int, Event]]) -> tuple[list[Record], list[Record]]:
    """The story's jobs-topic and decisions-topic records, each list in its partition's order."""
    jobs: list[Record] = []
    decisions: list[Record] = []
    for at, event in story:
        into = jobs if event.topic == JOBS.name else decisions
        assert event.topic in (JOBS.name, DECISIONS.name)
        into.append((Position(event.topic, 0, len(into)), T + at * 1000, event, f"{event.topic}-{len(into)}"))
    return jobs, decisions


def _fold(order: list[Record]) -> tuple[MemoryStore, list[Output]]:
    topology, store, processed = Topology(), MemoryStore(), Processed()
    setup: list[Event] = []
    for cluster in ("c1", "c2"):
        rates = (GpuRate(model="A100", micro_per_gpu_hour=2_000_000),)
        setup.append(
            ClusterRegistered(
                cluster=cluster, kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR", gpu_rates=rates
            )
        )
        setup.append(a_node(cluster=cluster, node="n1", gpus=8))
    for offset, event in enumerate(setup):
        envelope = Envelope(id=f"setup-{offset}", time_ms=0, data=event)
        topology.process(store, envelope, Position("setup", 0, offset), processed)
    for position, at, event, event_id in order:
        topology.process(store, Envelope(id=event_id, time_ms=at, data=event), position, processed)
    return store, processed.outputs


def _state(store: MemoryStore, outputs: list[Output]) -> tuple[Any, ...]:
    views = {key: evolve(view, applied=Applied()) for key, view in store.tables.get("jobs", {}).items()}
    rows = {
        stage: sorted(row for key, entity in entities.items() for row in TABLES[stage].rows(key, entity))
        for stage, entities in sorted(store.tables.items())
        if stage in TABLES
    }
    last: dict[str, tuple[int, str]] = {}
    for out in outputs:
        entity, _, version = out.id.rpartition(":v")
        if int(version) >= last.get(entity, (0, ""))[0]:
            last[entity] = (int(version), out.event.model_dump_json())
    return views, rows, dict(sorted(last.items()))


def _interleavings(jobs: list[Record], decisions: list[Record]) -> list[list[Record]]:
    """Every merge of the two partitions that keeps each one's order."""
    total = len(jobs) + len(decisions)
    out = []
    for picks in itertools.combinations(range(total), len(decisions)):
        chosen, order = set(picks), []
        j = d = 0
        for index in range(total):
            if index in chosen:
                order.append(decisions[d])
                d += 1
            else:
                order.append(jobs[j])
                j += 1
        out.append(order)
    return out


def test_every_interleaving_of_the_topics_gives_the_view_rows_and_usage_of_event_time_order() -> None:
    jobs, decisions = _records(STORY)
    reference = _state(*_fold(sorted([*jobs, *decisions], key=lambda r: r[1])))
    view = reference[0]["j1"]
    assert (view.status, view.run, view.runs, view.clusters) == ("placed", 2, 2, ("c2",))
    assert [(p.cluster, p.replicas) for p in view.parts] == [("c2", 2)]  # run 2's: run 1's closed
    orders = _interleavings(jobs, decisions)
    assert len(orders) == 126
    for order in orders:
        assert _state(*_fold(order)) == reference, [r[3] for r in order]


def test_a_part_end_read_before_the_addition_that_opened_its_part_waits_for_it() -> None:
    """c2's report sorts before the addition that opened c2's part in job order (its connector's clock
    behind the scheduler's): it is applied when the addition is."""
    story = [(at, event) for at, event in STORY[:6]]
    story[5] = (5, c2_failed())  # stamped before the addition at 10 s
    story[4] = (4, JobStarted(job_id="j1", cluster="c2"))
    jobs, decisions = _records(story)
    reference = _state(*_fold(sorted([*jobs, *decisions], key=lambda r: r[1])))
    view = reference[0]["j1"]
    assert (view.status, view.clusters) == ("running", ("c1",))
    assert view.parts[1].cluster == "c2" and view.parts[1].ended == "failed"
    assert reference[1]["nodes"] == _state(*_fold([*jobs[:1], *decisions, *jobs[1:]]))[1]["nodes"]
    for order in _interleavings(jobs, decisions):
        assert _state(*_fold(order)) == reference, [r[3] for r in order]


@pytest.mark.parametrize("repeated", range(1, len(STORY)))
def test_any_event_of_the_story_appended_again_changes_nothing(repeated: int) -> None:
    jobs, decisions = _records(STORY)
    reference = _state(*_fold(sorted([*jobs, *decisions], key=lambda r: r[1])))
    again = next(r for r in (*jobs, *decisions) if r[2] is STORY[repeated][1])
    topic_records = jobs if again[0].topic == JOBS.name else decisions
    copy = (Position(again[0].topic, 0, len(topic_records)), again[1], again[2], again[3])
    order = [*sorted([*jobs, *decisions], key=lambda r: r[1]), copy]
    views, rows, outputs = _state(*_fold(order))
    assert (views, rows, outputs) == reference


def test_requests_to_stop_two_parts_are_two_steps_and_each_is_taken_once() -> None:
    from events.catalog.decisions import JobPreemptionRequested

    def stop(cluster: str) -> JobPreemptionRequested:
        return JobPreemptionRequested(
            job_id="j1",
            cycle_id=f"cycle-stop-{cluster}",
            cluster=cluster,
            run=1,
            rule="priority",
            grace_period_s=30,
            message=f"make room in {cluster}",
        )

    fold = running_in_two_clusters()
    fold.feed(stop("c1"), at_s=50, event_id="stop-c1")
    fold.feed(stop("c2"), at_s=51, event_id="stop-c2")
    fold.feed(stop("c1"), at_s=52, event_id="stop-c1-again")  # the scheduler's repeat after a restart
    asked = [e.message for e in job(fold).timeline if e.event == "JobPreemptionRequested"]
    assert asked == ["make room in c1", "make room in c2"]
    assert job(fold).status == "running"
