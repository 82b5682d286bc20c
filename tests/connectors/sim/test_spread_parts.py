"""A spread inference service's run has a part in each cluster holding some of its replicas: a
``JobReplicasAdded`` naming a cluster the run was not placed in opens the run's part there. The simulated
cluster checks and starts it as a placement of those replicas, reports its lifecycle naming itself, ends
it on its own (the other cluster's part runs on), stops it on a cancel or on a preemption naming it,
never opens it again once it ended, and rebuilds it from the log after a restart."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.sim import ClusterModel, History, SimConfig
from connectors.sim.reports import Emit
from connectors.sim.restore import read_history
from events.catalog.base import Event
from events.catalog.decisions import JobRunClosed, RunPartEnd
from events.catalog.jobs import JobCancelled, JobFailed, JobPreempted, JobReclaimed, JobStarted, JobSucceeded, RunEnd
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, CycleId, JobId, NodeId
from events.log.memory import MemoryLog

from .builders import (
    SOURCE,
    T0,
    JobBuilder,
    Story,
    a_cluster,
    a_job,
    a_node,
    a_placement,
    cancel_request,
    preemption_request,
    reclaim_request,
    replicas_added,
)

pytestmark = pytest.mark.timeout(30)

CONFIG = SimConfig(fault_rate=0.0, seed=3, start_delay_s=5, stop_delay_s=20, usage_interval_s=300)
END = (JobSucceeded, JobFailed, JobCancelled, JobPreempted, JobReclaimed)


class Federation:
    """Two simulated clusters fed the same inputs, as their connectors read the same log."""

    def __init__(self) -> None:
        self.one = Story(a_cluster(a_node("a-0").gpus(4), name="sim-1"), CONFIG)
        self.two = Story(a_cluster(a_node("b-0").gpus(4), a_node("b-1").gpus(4), name="sim-2"), CONFIG)

    def at(self, seconds: float) -> Federation:
        self.one.at(seconds)
        self.two.at(seconds)
        return self

    def send(self, *events: Event) -> Federation:
        self.one.send(*events)
        self.two.send(*events)
        return self


def service(replicas: int = 4, runtime_s: int | None = 1000) -> JobBuilder:
    return a_job("svc").spread(2).gpus(1).replicas(replicas).runtime(runtime_s)


def spread_over_two(replicas: int = 4) -> Federation:
    """Of ``replicas`` over two clusters, 0 and 1 placed in sim-1 at 0 s; 2 and 3 added in sim-2 at 100 s."""
    fed = Federation().at(0)
    fed.send(service(replicas).submitted(), a_placement("svc").cluster("sim-1").on("a-0", 0).on("a-0", 1).placed())
    return fed.at(100).send(replicas_added("svc", 2, ("b-0", (0,)), ("b-1", (0,)), cluster="sim-2"))


def used(story: Story, node: str) -> list[int]:
    return model_used(story.model, node)


def model_used(model: ClusterModel, node: str) -> list[int]:
    return list(model.nodes[NodeId(node)].gpu_milli)


def lifecycle(story: Story) -> list[Event]:
    kinds = (JobStarted, *END)
    return [e.event for e in story.emitted if isinstance(e.event, kinds)]


def test_an_addition_in_another_cluster_opens_the_runs_part_there_and_reports_it_with_that_cluster() -> None:
    fed = spread_over_two().at(104)
    assert used(fed.two, "b-0")[0] == 1000 and used(fed.two, "b-1")[0] == 1000
    assert not fed.two.events(JobStarted)
    fed.at(2000)
    (started,) = fed.two.events(JobStarted, "svc")
    (ended,) = fed.two.events(JobSucceeded, "svc")
    for emit in (started, ended):
        assert (emit.event.cluster, emit.event.run) == ("sim-2", 1)  # type: ignore[attr-defined]
    assert fed.two.seconds(started) == 105  # the start delay after the addition, as for a placement
    assert fed.two.seconds(ended) == 1105  # the job's runtime after its start
    assert started.causation_id == fed.two.inputs[-1].id  # caused by the addition that opened it
    assert used(fed.two, "b-0")[0] == 0 and used(fed.two, "b-1")[0] == 0
    assert [e.cluster for e in lifecycle(fed.one)] == ["sim-1", "sim-1"]  # type: ignore[attr-defined]
    assert used(fed.one, "a-0") == [0, 0, 0, 0]


def test_a_parts_end_leaves_the_run_running_in_the_other_cluster() -> None:
    fed = spread_over_two().at(200)
    fed.two.emitted += fed.two.model.lose_node(NodeId("b-1"), fed.two.now_ms, 600_000)
    (failed,) = fed.two.events(JobFailed, "svc")
    assert (failed.event.cluster, failed.event.reason) == ("sim-2", ReasonCode.NODE_FAILURE)  # type: ignore[attr-defined]
    assert used(fed.two, "b-0")[0] == 0  # the whole part here stopped, its other replica's GPU too
    fed.at(500)
    assert [type(e) for e in lifecycle(fed.one)] == [JobStarted]  # sim-1's part runs on
    assert used(fed.one, "a-0") == [1000, 1000, 0, 0]


def test_a_part_grows_with_numbers_after_those_it_holds_though_the_other_part_holds_those_between() -> None:
    fed = spread_over_two(replicas=6).at(200)  # at most 3 in one cluster
    fed.send(replicas_added("svc", 4, ("a-0", (2,)), cluster="sim-1"))
    assert used(fed.one, "a-0") == [1000, 1000, 1000, 0]
    fed.at(300).send(replicas_added("svc", 5, ("b-0", (1,)), cluster="sim-2"))
    assert used(fed.two, "b-0")[:2] == [1000, 1000]
    assert not fed.one.events(JobFailed) and not fed.two.events(JobFailed)


def test_a_part_above_the_per_cluster_cap_is_refused_and_says_why() -> None:
    fed = Federation().at(0)
    fed.send(service().submitted())  # 4 replicas over 2 clusters: at most 2 in one
    fed.send(replicas_added("svc", 2, ("b-0", (0,)), ("b-0", (1,)), ("b-1", (0,)), cluster="sim-2"))
    (failed,) = fed.two.events(JobFailed, "svc")
    assert (failed.event.cluster, failed.event.reason) == ("sim-2", ReasonCode.LAUNCH_FAILED)  # type: ignore[attr-defined]
    assert "spreads over 2 clusters, at most 2 of its replicas in one; this cluster would hold 3" in (
        failed.event.message  # type: ignore[attr-defined]
    )
    assert used(fed.two, "b-0") == [0, 0, 0, 0]


def test_a_part_the_cluster_cannot_take_fails_with_that_cluster() -> None:
    fed = Federation().at(0)
    fed.send(service().submitted(), replicas_added("svc", 2, ("b-0", (7,)), cluster="sim-2"))
    (failed,) = fed.two.events(JobFailed, "svc")
    assert failed.event.cluster == "sim-2" and "GPU 7 does not exist" in failed.event.message  # type: ignore[attr-defined]


def test_a_part_that_ended_is_never_opened_again(caplog: pytest.LogCaptureFixture) -> None:
    fed = spread_over_two().at(2000)
    assert fed.two.events(JobSucceeded, "svc")
    before = len(fed.two.emitted)
    with caplog.at_level(logging.DEBUG, logger="fedsched.connector.sim"):
        fed.send(replicas_added("svc", 2, ("b-0", (0,)), ("b-1", (0,)), cluster="sim-2"))  # read again, late
        fed.send(replicas_added("svc", 6, ("b-0", (1,)), cluster="sim-2"))
    fed.at(3000)
    assert [e for e in fed.two.emitted[before:] if "svc" in e.id] == []
    assert used(fed.two, "b-0") == [0, 0, 0, 0]
    assert "event=part_not_reopened cluster=sim-2 job=svc run=1" in caplog.text


def test_a_cancel_stops_the_part() -> None:
    fed = spread_over_two().at(200).send(cancel_request("svc")).at(300)
    (cancelled,) = fed.two.events(JobCancelled, "svc")
    assert (cancelled.event.cluster, cancelled.event.run) == ("sim-2", 1)  # type: ignore[attr-defined]
    assert fed.two.seconds(cancelled) == 220  # after the stop delay, as a run's
    assert used(fed.two, "b-0")[0] == 0
    assert [e.event.cluster for e in fed.one.events(JobCancelled, "svc")] == ["sim-1"]  # type: ignore[attr-defined]


def test_a_part_opened_after_the_cancel_ends_at_once_cancelled() -> None:
    fed = Federation().at(0).send(service().submitted(), cancel_request("svc"))
    fed.send(replicas_added("svc", 2, ("b-0", (0,)), cluster="sim-2"))
    (cancelled,) = fed.two.events(JobCancelled, "svc")
    assert cancelled.event.message == "cancelled before it started"  # type: ignore[attr-defined]
    assert used(fed.two, "b-0") == [0, 0, 0, 0] and not fed.two.events(JobStarted)


def test_a_preemption_naming_this_cluster_stops_the_part_and_one_naming_the_other_does_not() -> None:
    fed = spread_over_two().at(200).send(preemption_request("svc", cluster="sim-1")).at(300)
    assert [type(e) for e in lifecycle(fed.two)] == [JobStarted]
    assert fed.one.events(JobPreempted, "svc")
    fed.send(preemption_request("svc", cluster="sim-2", grace_s=10)).at(400)
    (preempted,) = fed.two.events(JobPreempted, "svc")
    assert (preempted.event.cluster, preempted.event.run) == ("sim-2", 1)  # type: ignore[attr-defined]
    assert fed.two.seconds(preempted) == 310  # the grace period, shorter than the stop delay
    assert used(fed.two, "b-0")[0] == 0


def test_a_reclaim_naming_this_cluster_stops_the_part() -> None:
    fed = spread_over_two().at(200).send(reclaim_request("svc", cluster="sim-2", grace_s=60)).at(300)
    (reclaimed,) = fed.two.events(JobReclaimed, "svc")
    assert (reclaimed.event.cluster, reclaimed.event.run) == ("sim-2", 1)  # type: ignore[attr-defined]
    assert [type(e) for e in lifecycle(fed.one)] == [JobStarted]


def test_an_addition_read_before_the_submission_opens_the_part_once_the_submission_arrives() -> None:
    fed = Federation().at(0)
    fed.two.send(replicas_added("svc", 2, ("b-0", (0,)), cluster="sim-2"))
    assert used(fed.two, "b-0")[0] == 0  # not known yet whether the job spreads
    fed.two.at(50).send(service().submitted()).at(60)
    (started,) = fed.two.events(JobStarted, "svc")
    assert fed.two.seconds(started) == 55 and used(fed.two, "b-0")[0] == 1000


def test_the_run_closed_needs_nothing_from_the_cluster() -> None:
    fed = spread_over_two().at(200)
    before, held = len(fed.two.emitted), used(fed.two, "b-0")
    closed = JobRunClosed(
        job_id=JobId("svc"), cycle_id=CycleId("cycle-9"), run=1, cluster=ClusterId("sim-2"), outcome=RunEnd.SUCCEEDED,
        parts=(RunPartEnd(cluster=ClusterId("sim-2"), outcome=RunEnd.SUCCEEDED),), message="a test close",
    )  # fmt: skip
    fed.two.send(closed)
    assert fed.two.emitted[before:] == [] and used(fed.two, "b-0") == held


def test_an_addition_for_a_run_not_here_of_a_job_that_does_not_spread_waits_for_its_placement() -> None:
    story = Story(a_cluster(a_node("b-0").gpus(4), name="sim-2"), CONFIG).at(0)
    story.submit(a_job("plain").gpus(1).replicas(4))
    story.send(replicas_added("plain", 2, ("b-0", (0,)), cluster="sim-2")).at(100)
    assert used(story, "b-0") == [0, 0, 0, 0] and not story.events(JobStarted)
    story.place(a_placement("plain").cluster("sim-2").on("b-0", 1).on("b-0", 2)).at(200)
    assert used(story, "b-0") == [1000, 1000, 1000, 0]  # the placement took the addition with it


# -- restarts ---------------------------------------------------------------------------------------


def restarted(story: Story, at_s: float) -> tuple[ClusterModel, list[Emit]]:
    """A new model of the story's cluster, restored from what the log holds, begun at ``at_s``."""
    history = History(ClusterId(story.spec.cluster), SOURCE)
    for record in [*story.inputs, *story.envelopes()]:
        history.add(record)
    model = ClusterModel(story.spec, story.config, source=SOURCE)
    model.restore(history)
    return model, model.begin(T0 + round(at_s * 1000))


def test_a_restart_rebuilds_a_running_part_and_ends_it_as_it_would_have_ended() -> None:
    uninterrupted = spread_over_two().at(2000)
    (expected,) = uninterrupted.two.events(JobSucceeded, "svc")
    model, begun = restarted(spread_over_two().at(500).two, 500)
    assert model_used(model, "b-0")[0] == 1000 and model_used(model, "b-1")[0] == 1000
    after = begun + model.advance(T0 + 2_000_000)
    assert not [e for e in after if isinstance(e.event, JobStarted)]  # started once, before the restart
    (ended,) = [e for e in after if isinstance(e.event, JobSucceeded)]
    assert (ended.id, ended.time_ms, ended.event.cluster) == (expected.id, expected.time_ms, "sim-2")  # type: ignore[attr-defined]


def test_a_restart_starts_a_part_that_had_not_started_once() -> None:
    model, begun = restarted(spread_over_two().two, 102)  # restarted 2 s after the addition
    after = begun + model.advance(T0 + 200_000)
    (started,) = [e for e in after if isinstance(e.event, JobStarted)]
    assert started.event.cluster == "sim-2" and started.time_ms == T0 + 107_000  # type: ignore[attr-defined]
    assert model_used(model, "b-0")[0] == 1000


def test_a_restart_holds_a_parts_later_additions_with_it() -> None:
    fed = spread_over_two(replicas=6).at(300)
    story = fed.send(replicas_added("svc", 4, ("b-0", (1,)), cluster="sim-2")).two.at(400)
    model, _ = restarted(story, 400)
    assert model_used(model, "b-0")[:2] == [1000, 1000]


def test_after_a_restart_a_part_that_ended_is_not_opened_again_by_its_addition_read_again() -> None:
    story = spread_over_two().at(2000).two
    model, begun = restarted(story, 2000)
    added = story.inputs[-1]
    again = model.handle(added, T0 + 2_001_000) + model.advance(T0 + 3_000_000)
    assert [e for e in [*begun, *again] if "svc" in e.id] == []
    assert model_used(model, "b-0")[0] == 0


def test_the_start_up_read_of_the_log_keeps_the_lifecycle_of_a_part_opened_here() -> None:
    story = spread_over_two().at(500).two
    log = MemoryLog()
    for record in [*story.inputs, *story.envelopes()]:
        log.append(record)
    history = History(ClusterId("sim-2"), SOURCE)
    asyncio.run(read_history(log, history))  # type: ignore[arg-type]
    assert history.started == {(JobId("svc"), 1): T0 + 105_000}
    model = ClusterModel(story.spec, story.config, source=SOURCE)
    model.restore(history)
    begun = model.begin(T0 + 500_000)
    assert not [e for e in begun if isinstance(e.event, JobStarted)]
    assert model_used(model, "b-0")[0] == 1000


# -- whatever arrives -------------------------------------------------------------------------------

opening = st.tuples(
    st.just("part"),
    st.integers(0, 7),  # job
    st.integers(1, 4),  # its first replica number (the run's other parts hold those below)
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3)), min_size=1, max_size=3),  # (node, GPU) each
    st.integers(10, 400),  # runtime
)
op = st.one_of(
    opening,
    st.tuples(st.just("grow"), st.integers(0, 7), st.integers(1, 3), st.integers(0, 1), st.integers(0, 3)),
    st.tuples(st.just("again"), st.integers(0, 7)),
    st.tuples(st.just("cancel"), st.integers(0, 7)),
    st.tuples(st.just("preempt"), st.integers(0, 7)),
    st.tuples(st.just("wait"), st.integers(1, 120)),
)


@pytest.mark.property
@settings(max_examples=120, deadline=None)
@given(st.lists(op, max_size=40), st.integers(0, 3))
def test_whatever_arrives_a_part_holds_what_it_took_and_ends_once(ops: list[tuple[Any, ...]], seed: int) -> None:
    config = SimConfig(start_delay_s=5, stop_delay_s=3, fault_rate=0.5, seed=seed, fault_min_s=60, fault_max_s=300)
    story = Story(a_cluster(*(a_node(f"b-{i}").gpus(4, "T4", 15109) for i in range(2)), name="sim-2"), config)
    now, opened, top = 0.0, {}, {}
    for step in ops:
        kind, job = step[0], f"svc-{step[1]}"
        if kind == "part" and job not in opened:
            _, _, first, where, runtime = step
            story.submit(a_job(job).spread(2).gpus(1).replicas(6).runtime(runtime))  # at most 3 in one cluster
            opened[job] = replicas_added(job, first, *((f"b-{n}", (g,)) for n, g in where), cluster="sim-2")
            top[job] = first + len(where) - 1
            story.send(opened[job])
        elif kind == "grow" and job in opened:
            _, _, gap, node, gpu = step
            top[job] += gap
            story.send(replicas_added(job, top[job], (f"b-{node}", (gpu,)), cluster="sim-2"))
        elif kind == "again" and job in opened:
            story.send(opened[job])
        elif kind == "cancel":
            story.send(cancel_request(job))
        elif kind == "preempt":
            story.send(preemption_request(job, cluster="sim-2"))
        elif kind == "wait":
            now += step[1]
            story.at(now)
        held_matches_parts(story)
    story.at(now + 10_000)
    held_matches_parts(story)
    assert story.model.runs == {}
    ends = Counter(e.event.job_id for e in story.emitted if isinstance(e.event, END))
    assert ends == Counter(opened.keys())  # every part opened here ended once, and only here
    starts = Counter(e.event.job_id for e in story.events(JobStarted))  # type: ignore[attr-defined]
    assert max(starts.values(), default=1) == 1
    assert all(e.event.cluster == "sim-2" for e in story.emitted if isinstance(e.event, (*END, JobStarted)))
    assert max(Counter(e.id for e in story.emitted).values()) == 1


def held_matches_parts(story: Story) -> None:
    model = story.model
    for node in model.nodes.values():
        held = [0] * node.spec.gpus
        for key in node.runs:
            for replica in model.runs[key].placement:
                if replica.node == node.name:
                    for index in replica.gpu_indices:
                        held[index] += replica.gpu_milli_each
        assert node.gpu_milli == held and all(0 <= milli <= 1000 for milli in node.gpu_milli)
