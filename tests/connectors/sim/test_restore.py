"""Restarting from the log: a model rebuilt from what an earlier one published carries on without losing
or repeating a lifecycle event, and its clock-driven events (faults, usage) continue the same schedule."""

from __future__ import annotations

from collections import Counter

import pytest

from connectors.sim import ClusterModel, History, SimConfig
from connectors.sim.reports import Emit
from events.catalog.inventory import GpuHealthReported, NodeObserved, NodeRemoved
from events.catalog.jobs import JobCancelled, JobFailed, JobPreempted, JobStarted, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId
from events.wire.codec import encode

from .builders import (
    SOURCE,
    T0,
    Story,
    a_cluster,
    a_job,
    a_node,
    a_placement,
    cancel_request,
    envelope,
    preemption_request,
)

pytestmark = pytest.mark.timeout(30)

CONFIG = SimConfig(fault_rate=0.05, seed=3, start_delay_s=5, stop_delay_s=20, usage_interval_s=300)
LIFECYCLE = (JobStarted, JobSucceeded, JobFailed, JobCancelled, JobPreempted)
TERMINAL = (JobSucceeded, JobFailed, JobCancelled, JobPreempted)


def spec():  # type: ignore[no-untyped-def]
    return a_cluster(*(a_node(f"node-{i}") for i in range(6)))


def play(story: Story, until_s: float) -> Story:
    """Jobs in every state at t=1000: done, running, stopping, accepted but not started, waiting."""
    story.at(0).start(a_job("done").gpus(1).runtime(100), a_placement("done").on("node-0", 0))
    story.start(a_job("long").gpus(2).runtime(5000), a_placement("long").on("node-1", 0, 1))
    story.start(a_job("stopping").gpus(1).runtime(5000), a_placement("stopping").on("node-2", 0))
    story.start(a_job("cancelled").gpus(1).runtime(5000), a_placement("cancelled").on("node-3", 0))
    story.at(990).send(preemption_request("stopping"), cancel_request("cancelled"))
    story.at(998).start(a_job("fresh").gpus(1).runtime(300), a_placement("fresh").on("node-4", 0))
    story.submit(a_job("late").gpus(1).runtime(300))
    return story.at(until_s)


def restart(before: Story, at_s: float) -> tuple[ClusterModel, list[Emit]]:
    history = History(ClusterId(before.spec.cluster), SOURCE)
    for record in [*before.inputs, *before.envelopes()]:
        history.add(record)
    model = ClusterModel(before.spec, before.config, source=SOURCE)
    model.restore(history)
    assert history.resume_ms is not None
    now = max(T0 + round(at_s * 1000), history.resume_ms)
    return model, model.begin(now)


def test_a_restarted_cluster_neither_loses_nor_repeats_lifecycle_events() -> None:
    before = play(Story(spec(), CONFIG), 1000)
    model, after = restart(before, 1010)
    late = a_placement("late").on("node-5", 0).placed()
    after += model.handle(envelope(late), T0 + 1_020_000)
    after += model.advance(T0 + 20_000_000)
    ids_before = {e.id for e in before.emitted}
    assert not [e.id for e in after if e.id in ids_before]
    lifecycle = [e for e in [*before.emitted, *after] if isinstance(e.event, LIFECYCLE)]
    started = Counter(e.event.job_id for e in lifecycle if isinstance(e.event, JobStarted))  # type: ignore[attr-defined]
    ended = Counter(e.event.job_id for e in lifecycle if isinstance(e.event, TERMINAL))  # type: ignore[attr-defined]
    assert started == Counter({"done": 1, "long": 1, "stopping": 1, "cancelled": 1, "fresh": 1, "late": 1})
    assert ended == Counter({"done": 1, "long": 1, "stopping": 1, "cancelled": 1, "fresh": 1, "late": 1})


def test_a_run_that_was_running_ends_when_it_would_have_without_the_restart() -> None:
    uninterrupted = play(Story(spec(), CONFIG), 20_000)
    before = play(Story(spec(), CONFIG), 1000)
    model, after = restart(before, 1000)
    after += model.advance(T0 + 20_000_000)

    def ends(emits: list[Emit]) -> dict[str, tuple[str, int]]:
        return {e.event.job_id: (e.id, e.time_ms) for e in emits if isinstance(e.event, TERMINAL)}  # type: ignore[attr-defined]

    assert ends(after)["long"] == ends(uninterrupted.emitted)["long"]
    assert ends(after)["stopping"][0] == "sim:sim-test:stopping:1:preempted"
    assert ends(after)["cancelled"][0] == "sim:sim-test:cancelled:1:cancelled"


def test_the_fault_schedule_carries_on_after_a_restart() -> None:
    uninterrupted = Story(spec(), CONFIG).at(30_000)
    before = Story(spec(), CONFIG).at(10_000)
    model, after = restart(before, 10_000)
    after += model.advance(T0 + 30_000_000)
    kinds = (GpuHealthReported, NodeRemoved)

    def faults(emits: list[Emit]) -> list[tuple[str, int]]:
        return [(e.id, e.time_ms) for e in emits if isinstance(e.event, kinds)]

    assert faults(uninterrupted.emitted)
    assert faults(before.emitted) + faults(after) == faults(uninterrupted.emitted)


def test_a_restart_republishes_only_nodes_that_changed() -> None:
    before = Story(spec(), SimConfig()).at(10)
    _, after = restart(before, 20)
    assert [type(e.event).__name__ for e in after] == ["ClusterRegistered"]
    grown = a_cluster(*(a_node(f"node-{i}") for i in range(7)))
    history = History(ClusterId("sim-test"), SOURCE)
    for env in before.envelopes():
        history.add(env)
    bigger = ClusterModel(grown, SimConfig(), source=SOURCE)
    bigger.restore(history)
    emitted = bigger.begin(T0 + 30_000)
    assert [(type(e.event).__name__, getattr(e.event, "node", None)) for e in emitted] == [
        ("ClusterRegistered", None),
        ("NodeObserved", "node-6"),
    ]
    assert isinstance(emitted[1].event, NodeObserved) and emitted[1].event.generation == 1
    smaller = ClusterModel(a_cluster(*(a_node(f"node-{i}") for i in range(5))), SimConfig(), source=SOURCE)
    smaller.restore(history)
    [_, gone] = smaller.begin(T0 + 30_000)
    assert isinstance(gone.event, NodeRemoved)
    assert (gone.event.node, gone.event.generation, gone.event.reason) == ("node-5", 2, ReasonCode.NODE_DELETED)


def test_a_submission_the_restore_left_undecoded_is_read_when_its_placement_arrives() -> None:
    wire = encode(envelope(a_job("later").gpus(1).runtime(60).submitted()))
    history = History(ClusterId("sim-test"), SOURCE)
    history.add_unread("later", wire.headers, wire.value)
    model = ClusterModel(spec(), SimConfig(start_delay_s=0), source=SOURCE)
    model.restore(history)
    model.begin(T0)
    emitted = model.handle(envelope(a_placement("later").on("node-0", 0).placed()), T0 + 1000)
    emitted += model.advance(T0 + 100_000)
    assert [type(e.event).__name__ for e in emitted if not isinstance(e.event, NodeObserved)] == [
        "JobStarted",
        "JobSucceeded",
    ]
