"""A run that grows (``JobReplicasAdded``): the simulated cluster starts the added replicas on the named
nodes and devices, holds them with the run until it ends, refuses an addition it cannot take, and a
restart from the log holds them again."""

from __future__ import annotations

import pytest

from connectors.sim import ClusterModel, History, SimConfig
from events.catalog.jobs import JobFailed, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId

from .builders import SOURCE, T0, Story, a_cluster, a_job, a_node, a_placement, replicas_added

pytestmark = pytest.mark.timeout(30)

CONFIG = SimConfig(fault_rate=0.0, seed=1, start_delay_s=5, stop_delay_s=20, usage_interval_s=300)


def used(model: ClusterModel, node: str) -> list[int]:
    return list(model.nodes[node].gpu_milli)  # type: ignore[index]


def grown_story() -> Story:
    story = Story(a_cluster(a_node("node-0").gpus(4)), CONFIG)
    story.at(0).start(
        a_job("array").gpus(1).runtime(1000).replicas(4), a_placement("array").on("node-0", 0).on("node-0", 1)
    )
    return story.at(100).send(replicas_added("array", 2, ("node-0", (2,)), ("node-0", (3,)))).at(200)


def test_the_added_replicas_take_their_devices_and_are_given_back_when_the_run_ends() -> None:
    story = grown_story()
    assert used(story.model, "node-0") == [1000, 1000, 1000, 1000]
    assert not story.events(JobFailed)
    story.at(2000)
    assert story.events(JobSucceeded, "array")
    assert used(story.model, "node-0") == [0, 0, 0, 0]


def test_a_repeated_addition_takes_nothing_more() -> None:
    story = grown_story()
    story.send(replicas_added("array", 2, ("node-0", (2,)), ("node-0", (3,)))).at(300)
    assert used(story.model, "node-0") == [1000, 1000, 1000, 1000] and not story.events(JobFailed)


def test_an_addition_the_cluster_cannot_take_fails_the_run_and_says_why() -> None:
    story = Story(a_cluster(a_node("node-0").gpus(2)), CONFIG)
    story.at(0).start(a_job("array").gpus(1).runtime(1000).replicas(4), a_placement("array").on("node-0", 0))
    story.at(100).send(replicas_added("array", 1, ("node-0", (0,)))).at(200)
    (failed,) = story.events(JobFailed, "array")
    assert failed.event.reason is ReasonCode.INSUFFICIENT_GPU  # type: ignore[attr-defined]
    assert "replicas added refused" in failed.event.message  # type: ignore[attr-defined]
    assert used(story.model, "node-0") == [0, 0]


def test_a_gang_takes_no_added_replicas() -> None:
    story = Story(a_cluster(a_node("node-0").gpus(4)), CONFIG)
    gang = a_job("gang").gpus(1).runtime(1000).replicas(2, gang=True)
    story.at(0).start(gang, a_placement("gang").on("node-0", 0).on("node-0", 1))
    story.at(100).send(replicas_added("gang", 2, ("node-0", (2,)))).at(200)
    (failed,) = story.events(JobFailed, "gang")
    assert failed.event.reason is ReasonCode.LAUNCH_FAILED  # type: ignore[attr-defined]


def test_a_restart_holds_the_added_replicas_again_and_ends_the_run_on_time() -> None:
    uninterrupted = grown_story().at(2000)
    before = grown_story()
    history = History(ClusterId(before.spec.cluster), SOURCE)
    for record in [*before.inputs, *before.envelopes()]:
        history.add(record)
    model = ClusterModel(before.spec, before.config, source=SOURCE)
    model.restore(history)
    assert used(model, "node-0") == [1000, 1000, 1000, 1000]
    model.begin(T0 + 200_000)
    after = model.advance(T0 + 2_000_000)
    (ended,) = [e for e in after if isinstance(e.event, JobSucceeded)]
    (expected,) = uninterrupted.events(JobSucceeded, "array")
    assert (ended.id, ended.time_ms) == (expected.id, expected.time_ms)
    assert used(model, "node-0") == [0, 0, 0, 0]
