"""Jobs that do not spread run as they did before spread services: a fixed story of such jobs (placements,
growth, an addition for a run not here, cancels, a preemption, seeded faults, failures and usage, and a
restart from the log) gives exactly the events it gave before parts existed, by digest."""

from __future__ import annotations

import hashlib
import json

import pytest

from connectors.sim import ClusterModel, History, SimConfig
from connectors.sim.reports import Emit
from events.catalog.jobs import JobKind
from events.catalog.types import ClusterId
from events.wire.envelope import Envelope

from .builders import (
    SOURCE,
    T0,
    Story,
    a_cluster,
    a_job,
    a_node,
    a_placement,
    cancel_request,
    preemption_request,
    replicas_added,
)

pytestmark = pytest.mark.timeout(60)

CONFIG = SimConfig(
    seed=7, fault_rate=0.4, fault_min_s=300, fault_max_s=1800, job_failure_rate=0.3, start_delay_s=5,
    stop_delay_s=20, usage_interval_s=300,
)  # fmt: skip

BEFORE_PARTS = "ed24b3715d4983899deedbf7041f205ac97478ddfc0d00d86316cf797979c52d"
"""The digest of ``story()``'s events at a0f8b8e, before a run could have a part in this cluster."""


def story() -> Story:
    nodes = [a_node(f"node-{i}").gpus(8) for i in range(4)]
    s = Story(a_cluster(*nodes), CONFIG)
    s.at(0).start(
        a_job("train").gpus(2).runtime(5000).replicas(2), a_placement("train").on("node-0", 0, 1).on("node-1", 0, 1)
    )
    serve = a_job("serve").kind(JobKind.INFERENCE).runtime(None).gpus(1).replicas(4)
    s.at(10).start(serve, a_placement("serve").on("node-2", 0).on("node-2", 1))
    s.at(60).send(replicas_added("serve", 2, ("node-2", (2,)), ("node-3", (0,))))
    s.at(70).send(replicas_added("late", 1, ("node-3", (1,))))  # a run not here yet, of a job not known yet
    s.at(80).start(a_job("nb").notebook().share(500), a_placement("nb").on("node-3", 2, milli=500))
    s.at(90).start(a_job("batch").kind(JobKind.BATCH).gpus(1).runtime(2400), a_placement("batch").on("node-1", 4))
    s.at(500).send(preemption_request("batch"))
    s.at(900).send(cancel_request("nb"))
    s.at(1500).start(a_job("short").gpus(1).runtime(300).replicas(2), a_placement("short").on("node-0", 5))
    s.at(1600).send(replicas_added("short", 1, ("node-0", (6,))))
    s.at(2000).start(a_job("late").gpus(1).runtime(600).replicas(2), a_placement("late").on("node-3", 3))
    return s.at(3000)


def digest(inputs: list[Envelope], emits: list[Emit]) -> str:
    """Of every event with its id, time and cause (an input named by its place in the story: the
    builders number input ids across the whole test session)."""
    place = {env.id: f"input-{i}" for i, env in enumerate(inputs)}
    rows = [
        (
            e.id,
            e.time_ms,
            e.event.event_type,
            e.event.model_dump(mode="json"),
            place.get(e.causation_id or "", e.causation_id),
        )
        for e in emits
    ]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def test_a_story_of_jobs_that_do_not_spread_gives_the_events_it_gave_before_parts() -> None:
    before = story()
    history = History(ClusterId(before.spec.cluster), SOURCE)
    for record in [*before.inputs, *before.envelopes()]:
        history.add(record)
    restarted = ClusterModel(before.spec, before.config, source=SOURCE)
    restarted.restore(history)
    after = [*restarted.begin(T0 + 3_000_000), *restarted.advance(T0 + 9_000_000)]
    assert digest(before.inputs, [*before.emitted, *after]) == BEFORE_PARTS
