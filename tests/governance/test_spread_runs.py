"""A run spread over clusters (an inference service with ``spread_clusters`` 2) in governance's state and
rules: each part holds GPU time from its opening to its own end and nothing after; the run ends with the
scheduler's close and not before; the budgets count every part; idle and lease judgements are per part and
name the part's cluster; any interleaving of the jobs and decisions topics, with repeats, gives the same
figures."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from events.catalog.base import Event
from events.catalog.budget_windows import Window
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
from events.catalog.inventory import JobUsage, NodeUsageReported
from events.catalog.jobs import (
    InferenceSpec,
    JobCancelled,
    JobFailed,
    JobKind,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    RunEnd,
)
from events.catalog.lifecycle import JobStatus
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, CycleId, JobId, NodeId, Resources, TenantId
from services.governance.core.config import GovConfig, IdleRule
from services.governance.core.state import GovState

from .builders import MIN, T0, History, types

pytestmark = pytest.mark.timeout(60)

SIM1, SIM2 = ClusterId("sim-1"), ClusterId("sim-2")
SVC = JobId("svc")
WHOLE_DAY = Window(T0 - 60 * MIN, T0 + 24 * 60 * MIN, "day")
IDLE = GovConfig(idle=(IdleRule(kind="inference", idle_after_ms=20 * MIN, grace_ms=10 * MIN),))


def submitted(spread: int = 2, *, gang: bool | None = None) -> JobSubmitted:
    return JobSubmitted(
        job_id=SVC,
        name="svc",
        tenant=TenantId("team-a"),
        kind=JobKind.INFERENCE,
        gang=gang,
        replicas=4,
        resources=Resources(gpus=1),
        inference=InferenceSpec(min_replicas=2, spread_clusters=spread),
    )


def replicas(first: int, node: str, count: int = 2, *, spread_nodes: bool = False) -> tuple[ReplicaPlacement, ...]:
    """``count`` replicas of 1 GPU on ``node`` (with ``spread_nodes``: on ``node`` + "a", + "b", ...)."""
    return tuple(
        ReplicaPlacement(
            replica=first + i,
            node=NodeId(node + "ab"[i] if spread_nodes else node),
            gpu_indices=(i,),
            gpu_milli_each=1000,
        )
        for i in range(count)
    )


def placed(cluster: ClusterId = SIM1, node: str = "n1") -> JobPlaced:
    return JobPlaced(
        job_id=SVC,
        cycle_id=CycleId("c1"),
        cluster=cluster,
        run=1,
        replicas=replicas(0, node),
        chosen=CandidateScore(cluster=cluster, total=0),
        explanation="placed",
    )


def added(cluster: ClusterId, first: int, node: str, count: int = 2) -> JobReplicasAdded:
    return JobReplicasAdded(
        job_id=SVC,
        cycle_id=CycleId(f"c{first}"),
        cluster=cluster,
        run=1,
        replicas=replicas(first, node, count),
        running_replicas=first + count,
        chosen=CandidateScore(cluster=cluster, total=0),
        explanation="spread",
    )


def closed(outcome: RunEnd = RunEnd.FAILED, last: ClusterId = SIM2) -> JobRunClosed:
    reason = ReasonCode.NODE_FAILURE if outcome is RunEnd.FAILED else None
    first = SIM1 if last == SIM2 else SIM2
    return JobRunClosed(
        job_id=SVC,
        cycle_id=CycleId("c9"),
        run=1,
        cluster=last,
        outcome=outcome,
        reason=reason,
        node=NodeId("m1") if reason else None,
        parts=(
            RunPartEnd(cluster=first, outcome=RunEnd.PREEMPTED),
            RunPartEnd(cluster=last, outcome=outcome, reason=reason),
        ),
        message="2 replicas in sim-1 (preempted), then 2 in sim-2",
    )


def node_failed(cluster: ClusterId = SIM2, node: str = "m1") -> JobFailed:
    return JobFailed(job_id=SVC, cluster=cluster, run=1, reason=ReasonCode.NODE_FAILURE, node=NodeId(node))


def story() -> list[tuple[str, Event, float]]:
    """(topic, event, minute): the service placed in sim-1 at 1, spread to sim-2 at 10; sim-1's part
    preempted at 30, sim-2's failed at 50 (its node), the run closed at 51 and a retry scheduled."""
    retry = JobRetryScheduled(
        job_id=SVC,
        cycle_id=CycleId("c10"),
        run=1,
        cluster=SIM2,
        node=NodeId("m1"),
        failure=ReasonCode.NODE_FAILURE,
        kind=FailureKind.INFRASTRUCTURE,
        allowed=3,
        attempt=1,
        not_before_ms=T0 + 60 * MIN,
        message="retried",
    )
    return [
        ("jobs", submitted(), 0),
        ("decisions", placed(), 1),
        ("jobs", JobStarted(job_id=SVC, cluster=SIM1, run=1), 2),
        ("decisions", added(SIM2, 2, "m1"), 10),
        ("jobs", JobStarted(job_id=SVC, cluster=SIM2, run=1), 11),
        ("jobs", JobPreempted(job_id=SVC, cluster=SIM1, run=1), 30),
        ("jobs", node_failed(), 50),
        ("decisions", closed(), 51),
        ("decisions", retry, 52),
    ]


def history_of(facts: list[tuple[str, Event, float]]) -> History:
    history = History()
    for _, event, minute in facts:
        history.add(event, at=minute)
    return history


def figures(state: GovState) -> dict[str, Any]:
    """What governance knows of the service's run, as figures: each part's held time, the run's end."""
    facts = state.jobs["svc"]
    run = facts.runs[1]
    return {
        "held": state.held.within(("team-a",), WHOLE_DAY),
        "parts": {
            cluster: (part.placed_ms, part.started_ms, part.ended_ms, part.ended_how, part.gpu_milli, part.nodes)
            for cluster, part in run.parts.items()
        },
        "run": (run.placed_ms, run.started_ms, run.ended_ms, run.ended_how, run.fail_reason, run.closed_in),
        "terminal": facts.terminal,
        "suspects": state.node_failures.of_job.get("svc", ()),
        "crash": state.workload_failures.of_job.get("svc", ()),
    }


def at(minute: float) -> int:
    return T0 + int(minute * MIN)


def test_each_part_holds_from_its_opening_to_its_own_end() -> None:
    state = history_of(story()).state()
    run = state.jobs["svc"].runs[1]
    assert list(run.parts) == ["sim-1", "sim-2"]
    sim1, sim2 = run.parts["sim-1"], run.parts["sim-2"]
    assert (sim1.placed_ms, sim1.ended_ms, sim1.ended_how) == (at(1), at(30), RunEnd.PREEMPTED)
    assert (sim2.placed_ms, sim2.ended_ms, sim2.ended_how) == (at(10), at(50), RunEnd.FAILED)
    assert (sim1.nodes, sim2.nodes) == (("n1",), ("m1",))
    # 2 GPUs for 29 minutes in sim-1, 2 GPUs for 40 in sim-2: not 4 GPUs for the run's 50.
    assert state.held.within(("team-a",), WHOLE_DAY) == 2000 * 29 * MIN + 2000 * 40 * MIN
    assert run.gpu_milli == 0 and run.replicas == 4  # the run's holdings are its parts'


def test_a_parts_end_stops_its_time_alone_and_the_run_lives_on() -> None:
    facts = story()[:6]  # up to sim-1's preemption
    history = history_of(facts).tick(40)
    state = history.state()
    job = state.jobs["svc"]
    run = job.runs[1]
    assert run.live and job.terminal is None and job.live_run() is run
    assert run.parts["sim-1"].ended_ms == at(30) and run.parts["sim-2"].live
    assert state.held.within(("team-a",), WHOLE_DAY) == 2000 * 29 * MIN  # sim-1's, ended
    assert "svc" in state.active
    # A budget counts the ended part's time and the live part's until now.
    from services.governance.core.budgets import _live

    assert _live(state, ("team-a",), WHOLE_DAY) == 2000 * 30 * MIN


def _state(facts: list[tuple[str, Event, float]], *, keep: bool = True) -> GovState:
    """The facts folded, every job's facts kept (a settled job's are dropped otherwise)."""
    state = GovState(keep_settled=keep)
    for envelope in history_of(facts).envelopes:
        state.fold(envelope)
    return state


def both_parts_ended(second: Event) -> list[tuple[str, Event, float]]:
    return [*story()[:6], ("jobs", second, 50)]


def test_no_part_end_ends_the_run_only_the_close_does() -> None:
    state = _state(both_parts_ended(node_failed()))
    job = state.jobs["svc"]
    assert job.runs[1].live and job.terminal is None and not job.runs[1].holding()
    preempted = JobPreempted(job_id=SVC, cluster=SIM2, run=1)
    state = _state([*both_parts_ended(preempted), ("decisions", closed(RunEnd.PREEMPTED), 51)])
    job = state.jobs["svc"]
    assert job.runs[1].ended_how is RunEnd.PREEMPTED and job.runs[1].ended_ms == at(51)
    assert job.terminal is None and job.pending()  # preempted: queued again, a new run later
    cancelled = [*both_parts_ended(preempted), ("decisions", closed(RunEnd.CANCELLED), 51)]
    assert _state(cancelled).jobs["svc"].terminal is JobStatus.CANCELLED
    settled = GovState()
    for envelope in history_of(cancelled).envelopes:
        settled.fold(envelope)
    assert "svc" in settled.settled and "svc" not in settled.active


def test_a_part_whose_end_is_read_after_the_close_holds_on_until_it_is() -> None:
    facts = [*story()[:5], ("decisions", closed(RunEnd.CANCELLED, last=SIM1), 51)]
    state = _state(facts)
    job = state.jobs["svc"]
    assert job.terminal is JobStatus.CANCELLED and job.runs[1].holding() and "svc" in state.active
    facts.append(("jobs", JobPreempted(job_id=SVC, cluster=SIM2, run=1), 49))
    facts.append(("jobs", JobCancelled(job_id=SVC, cluster=SIM1, run=1), 50))
    state = _state(facts)
    assert not state.jobs["svc"].runs[1].holding() and "svc" not in state.active
    assert state.held.within(("team-a",), WHOLE_DAY) == 2000 * 49 * MIN + 2000 * 39 * MIN


def test_a_failed_close_awaits_the_verdict_and_counts_one_failed_run_and_each_failed_part() -> None:
    facts = story()[:8]
    state = _state(facts)
    assert state.jobs["svc"].terminal is None  # a node failure: the scheduler's verdict decides
    run = state.jobs["svc"].runs[1]
    assert (run.ended_ms, run.ended_how, run.fail_reason, run.closed_in) == (
        at(51),
        RunEnd.FAILED,
        "NodeFailure",
        "sim-2",
    )
    found = figures(state)
    assert [entry[3:5] for _, entry in found["crash"]] == [("sim-2", "m1")]  # one failed run
    assert [key for key, _ in found["suspects"]] == [("sim-2", "m1")]  # its failed part's node


def interleavings(facts: list[tuple[str, Event, float]]) -> list[list[tuple[str, Event, float]]]:
    """Every merge of the jobs and the decisions topics' records, each topic's own order kept."""
    jobs = [f for f in facts if f[0] == "jobs"]
    decisions = [f for f in facts if f[0] == "decisions"]
    merges = []
    for slots in itertools.combinations(range(len(facts)), len(jobs)):
        merged, j, d = [], iter(jobs), iter(decisions)
        for i in range(len(facts)):
            merged.append(next(j) if i in slots else next(d))
        merges.append(merged)
    return merges


def test_every_interleaving_of_the_two_topics_and_repeats_gives_the_same_figures() -> None:
    facts = story()
    expected = figures(_state(facts))
    merges = interleavings(facts)
    assert len(merges) == 126
    for merged in merges:
        assert figures(_state(merged)) == expected, [type(f[1]).__name__ for f in merged]
        again = [*merged, *merged[::2]]  # repeats at later offsets
        assert figures(_state(again)) == expected


def test_without_the_submission_read_first_the_run_is_split_from_its_own_times() -> None:
    """The decisions topic read ahead of the jobs topic, after a usage report that moved the log's clock
    on: the run is placed and grown before the reader knows the job spreads; its first part still counts
    from the placement's own time, the addition from its own."""
    facts = story()
    report = NodeUsageReported(cluster=SIM1, node=NodeId("other"), window_ms=MIN)
    reordered = [("inventory", report, 12), facts[1], facts[3], facts[0], facts[2], *facts[4:]]
    assert figures(_state(reordered)) == figures(_state(facts))


def test_a_part_end_read_before_the_addition_that_opened_it_waits_for_it() -> None:
    facts = story()
    early = [facts[0], facts[1], facts[2], facts[4], facts[5], facts[6], facts[3], facts[7]]
    state = _state(early)
    assert figures(state) == figures(_state(facts[:8]))
    assert not state.jobs["svc"].early


def test_a_job_that_does_not_spread_reads_a_run_end_as_the_runs_end() -> None:
    one = [("jobs", submitted(spread=1), 0), ("decisions", placed(), 1), ("jobs", node_failed(SIM1, "n1"), 30)]
    state = _state(one)
    run = state.jobs["svc"].runs[1]
    assert not run.parts and (run.ended_ms, run.ended_how) == (at(30), RunEnd.FAILED)
    assert state.held.within(("team-a",), WHOLE_DAY) == 2000 * 29 * MIN


def usage(cluster: ClusterId, node: str, pct: int) -> NodeUsageReported:
    return NodeUsageReported(
        cluster=cluster,
        node=NodeId(node),
        window_ms=5 * MIN,
        jobs=(JobUsage(job_id=SVC, utilisation_pct=pct, run=1),),
    )


def spread_and_running() -> History:
    history = history_of(story()[:5])
    for step in range(12):  # sim-1 busy, sim-2 idle, for an hour
        minute = 15 + step * 5
        history.add(usage(SIM1, "n1", 80), at=minute).add(usage(SIM2, "m1", 1), at=minute)
    return history


def test_an_idle_part_is_warned_and_reclaimed_alone_naming_its_cluster() -> None:
    outputs = spread_and_running().evaluate(IDLE)
    assert types(outputs) == ["JobIdleWarning", "JobReclaimRequested", "GovernanceFinding"]
    warning, reclaim, finding = (o.event for o in outputs)
    assert warning.cluster == reclaim.cluster == finding.cluster == SIM2  # type: ignore[attr-defined]
    assert reclaim.run == 1 and reclaim.figures.reclaimed_milli == 2000  # type: ignore[attr-defined]
    assert reclaim.message.startswith("its part in sim-2: 2 GPUs idle")  # type: ignore[attr-defined]
    assert finding.node == "m1"  # type: ignore[attr-defined]
    since = at(11)  # sim-2's part started at 11 and never was busy
    assert [o.id for o in outputs] == [
        f"gov:idle-warn:svc:1:sim-2:{since}",
        "gov:idle-reclaim:svc:1:sim-2",
        "gov:finding:idle:svc:1:sim-2",
    ]  # and no cancel: the service lives on in sim-1


def test_once_every_live_part_is_reclaimed_idle_the_job_is_cancelled() -> None:
    history = history_of(story()[:5])
    for step in range(12):
        minute = 15 + step * 5
        history.add(usage(SIM1, "n1", 2), at=minute).add(usage(SIM2, "m1", 1), at=minute)
    outputs = history.evaluate(IDLE)
    kinds = types(outputs)
    assert kinds.count("JobReclaimRequested") == 2 and kinds.count("JobCancelRequested") == 1
    reclaimed = sorted(o.event.cluster for o in outputs if o.event.event_type.endswith("ReclaimRequested"))  # type: ignore[attr-defined]
    assert reclaimed == ["sim-1", "sim-2"]


def test_a_part_whose_node_was_lost_is_released_alone() -> None:
    from events.catalog.inventory import NodeRemoved

    history = history_of(story()[:5])
    history.add(NodeRemoved(cluster=SIM2, node=NodeId("m1"), generation=9, reason=ReasonCode.NODE_LOST), at=20)
    history.tick(20 + 60)
    outputs = [o for o in history.evaluate() if o.id.startswith("gov:lease")]
    assert [o.id for o in outputs] == ["gov:lease:svc:1:sim-2"]
    failed = outputs[0].event
    assert isinstance(failed, JobFailed) and failed.cluster == SIM2 and failed.run == 1
    # Published, it ends that part only: the run lives on in sim-1.
    state = history.then_publish(outputs).state()
    assert state.jobs["svc"].runs[1].live and not state.jobs["svc"].runs[1].parts["sim-2"].live


def gang_over_two_nodes_in_each_cluster() -> History:
    """A gang service: 2 replicas on n1a/n1b in sim-1, 2 on m1a/m1b in sim-2, both parts started."""
    history = History().add(submitted(gang=True), at=0)
    first = placed().model_copy(update={"replicas": replicas(0, "n1", spread_nodes=True)})
    more = added(SIM2, 2, "m1").model_copy(update={"replicas": replicas(2, "m1", spread_nodes=True)})
    history.add(first, at=1).add(JobStarted(job_id=SVC, cluster=SIM1, run=1), at=2)
    return history.add(more, at=3).add(JobStarted(job_id=SVC, cluster=SIM2, run=1), at=4)


def test_a_straggler_is_found_within_a_part_and_named_by_its_cluster() -> None:
    history = gang_over_two_nodes_in_each_cluster()
    for node, pct in (("n1a", 90), ("n1b", 85), ("m1a", 90), ("m1b", 10)):
        history.add(usage(SIM1 if node.startswith("n") else SIM2, node, pct), at=10)
    found = [o for o in history.evaluate() if o.id.startswith("gov:finding:straggler")]
    assert [o.id for o in found] == ["gov:finding:straggler:svc:1:sim-2"]
    finding = found[0].event
    assert finding.cluster == SIM2 and finding.node == "m1b"  # type: ignore[attr-defined]
    assert "busiest of its part in sim-2 is at 90%" in finding.message  # type: ignore[attr-defined]


def test_parts_are_not_compared_with_each_other() -> None:
    """A part busier than another (more traffic routed to one cluster) is no straggler: each part's nodes
    are even."""
    history = gang_over_two_nodes_in_each_cluster()
    for node, pct in (("n1a", 90), ("n1b", 90), ("m1a", 20), ("m1b", 20)):
        history.add(usage(SIM1 if node.startswith("n") else SIM2, node, pct), at=10)
    assert not [o for o in history.evaluate() if o.id.startswith("gov:finding:straggler")]
