"""Properties of the projection topology: the answer does not depend on how the partitions of
different topics interleave, a redelivered prefix changes nothing, and folding in batches gives the
same entities and the same latest outputs as folding one event at a time."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.base import Event
from events.catalog.inventory import NodeRemoved
from events.catalog.jobs import JobCancelled, JobFailed, JobStarted, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.wire.envelope import Envelope
from projections.readmodel.rows.entities import TABLES
from projections.stages.core import Batch, Input, Output, Position
from projections.stages.nodes import NodeStage
from projections.stages.topology import MemoryStore, Processed, Topology
from tests.unit.projections.builders import Fold, a_job, a_node, placed

JOBS = 6


def per_topic_streams(outcomes: list[int]) -> dict[str, list[tuple[Event, int]]]:
    """jobs topic: submissions and connector reports; decisions topic: placements. Times increase."""
    jobs: list[tuple[Event, int]] = []
    decisions: list[tuple[Event, int]] = []
    for i, outcome in enumerate(outcomes):
        job = f"j{i}"
        jobs.append((a_job(job, tenant=f"t{i % 2}"), 10 * i))
        if outcome == 0:
            continue
        decisions.append((placed(job, gpus=(i,)), 10 * i + 1))
        jobs.append((JobStarted(job_id=job, cluster="c1"), 10 * i + 2))
        if outcome == 2:
            jobs.append((JobSucceeded(job_id=job, cluster="c1"), 10 * i + 5))
        elif outcome == 3:
            jobs.append((JobFailed(job_id=job, cluster="c1", reason=ReasonCode.NON_ZERO_EXIT), 10 * i + 5))
    # The node reports itself now and then (a new generation each time): its profile's versions then
    # depend on what was folded between two reports, which must not show in the read models.
    inventory = [(a_node(gpus=8, generation=2 + k), 150 * k + 3) for k in range(len(outcomes))]
    return {"jobs": jobs, "decisions": decisions, "inventory": inventory}


def fold(order: list[str], streams: dict[str, list[tuple[Event, int]]]) -> Fold:
    f = Fold()
    f.feed(a_node(gpus=8))
    cursors = dict.fromkeys(streams, 0)
    for topic in order:
        if cursors[topic] < len(streams[topic]):
            event, at = streams[topic][cursors[topic]]
            f.feed(event, at_s=at, event_id=f"{topic}-{cursors[topic]}")
            cursors[topic] += 1
    for topic, events in streams.items():  # whatever the drawn order left
        for index in range(cursors[topic], len(events)):
            event, at = events[index]
            f.feed(event, at_s=at, event_id=f"{topic}-{index}")
    return f


def summary(f: Fold) -> dict[str, dict[str, object]]:
    """Every read-model row the entities make: what a rebuild is compared with."""
    return {
        stage: {key: TABLES[stage].rows(key, entity) for key, entity in sorted(entities.items())}
        for stage, entities in sorted(f.store.tables.items())
    }


@settings(max_examples=60, deadline=None)
@given(
    outcomes=st.lists(st.integers(0, 3), min_size=JOBS, max_size=JOBS),
    order=st.lists(st.sampled_from(["jobs", "decisions", "inventory"]), min_size=0, max_size=60),
)
def test_any_interleaving_of_the_topics_gives_the_same_views(outcomes: list[int], order: list[str]) -> None:
    streams = per_topic_streams(outcomes)
    canonical = fold(["jobs", "decisions"] * 0, streams)  # all jobs first, then all decisions
    in_time_order = Fold()
    in_time_order.feed(a_node(gpus=8))
    merged = sorted(
        [(at, topic, i, e) for topic, evs in streams.items() for i, (e, at) in enumerate(evs)],
        key=lambda item: item[:3],
    )
    for at, topic, i, event in merged:
        in_time_order.feed(event, at_s=at, event_id=f"{topic}-{i}")
    assert summary(fold(order, streams)) == summary(in_time_order) == summary(canonical)


@settings(max_examples=30, deadline=None)
@given(outcomes=st.lists(st.integers(0, 3), min_size=JOBS, max_size=JOBS), cut=st.integers(0, 20))
def test_a_redelivered_prefix_changes_nothing(outcomes: list[int], cut: int) -> None:
    streams = per_topic_streams(outcomes)
    f = fold([], streams)
    before = summary(f)
    for topic, events in streams.items():
        for index, (event, at) in enumerate(events[:cut]):
            f.feed(event, at_s=at, event_id=f"{topic}-{index}", replay=Position(event.topic, 0, index))
    assert summary(f) == before


def _envelopes(outcomes: list[int]) -> list[tuple[Envelope, Position]]:
    merged = sorted(
        (at, 0 if topic == "jobs" else 1, i, topic, e)
        for topic, evs in per_topic_streams(outcomes).items()
        for i, (e, at) in enumerate(evs)
    )
    fed = [(Envelope(id="node", time_ms=0, data=a_node(gpus=8)), Position("inventory", 0, 0))]
    for at, _, i, topic, event in merged:
        fed.append((Envelope(id=f"{topic}-{i}", time_ms=1_000_000 + at * 1000, data=event), Position(topic, 0, i)))
    return fed


def _latest(outputs: list[Output]) -> dict[str, str]:
    return {out.id.rsplit(":v", 1)[0]: out.event.model_dump_json() for out in outputs}


@settings(max_examples=40, deadline=None)
@given(outcomes=st.lists(st.integers(0, 3), min_size=JOBS, max_size=JOBS), cuts=st.sets(st.integers(1, 30)))
def test_folding_in_batches_gives_the_same_entities_and_latest_outputs(outcomes: list[int], cuts: set[int]) -> None:
    fed = _envelopes(outcomes)
    one_by_one, store = Topology(), MemoryStore()
    each = Processed()
    for envelope, position in fed:
        one_by_one.process(store, envelope, position, each)

    batched, batched_store = Topology(), MemoryStore()
    outputs: list[Output] = []
    bounds = [0, *sorted(cut for cut in cuts if cut < len(fed)), len(fed)]
    for start, end in itertools.pairwise(bounds):
        batch = Processed()
        for envelope, position in fed[start:end]:
            batched.fold(batched_store, envelope, position, batch)
        batched.flush(batched_store, batch)
        outputs += batch.outputs

    assert batched_store.tables == store.tables
    published = {(out.id, out.event.model_dump_json()) for out in each.outputs}
    assert all((out.id, out.event.model_dump_json()) in published for out in outputs)  # every version as it was
    assert _latest(outputs) == _latest(each.outputs)
    assert len(outputs) <= len(each.outputs)


def test_a_stage_folded_in_a_batch_publishes_the_latest_version_of_each_entity() -> None:
    stage = NodeStage()
    batch = Batch(stage)
    entity = None
    for at, event in enumerate([a_node(gpus=8), a_node(gpus=8, generation=2), a_node(gpus=4, generation=3)]):
        position = Position("inventory", 0, at)
        entity, _ = batch.fold(entity, Input("c1/n1", 1000 * at, position, event, f"e{at}"))
    outputs = batch.publish(lambda key: entity)
    assert [(out.id, time_ms) for out, time_ms in outputs] == [("profile:c1/n1:v2", 2000)]
    assert outputs[0][0].event.capacity.gpu_milli == 4000
    assert batch.publish(lambda key: entity) == []


fleet_step = st.one_of(
    # a node of one of three models, with 0 to 8 GPUs (its generation makes each observation count)
    st.tuples(st.just("node"), st.integers(0, 3), st.integers(0, 8), st.sampled_from(("A100", "H100", "T4"))),
    st.tuples(st.just("gone"), st.integers(0, 3), st.just(0), st.just("")),
    # a job of 1 to 24 GPUs, of one model or any
    st.tuples(st.just("job"), st.integers(0, 5), st.integers(1, 24), st.sampled_from(("A100", "H100", ""))),
    st.tuples(st.just("cancel"), st.integers(0, 5), st.just(0), st.just("")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(fleet_step, max_size=40))
def test_the_fleets_demand_is_that_of_the_waiting_jobs_the_fleet_could_hold(steps) -> None:
    """Kept up to date delta by delta (only the unfit jobs looked at again when the fleet grew), the
    demand equals a count from scratch: the waiting jobs asking no more than the fleet has of what they
    accept."""
    fold = Fold()
    nodes: dict[str, tuple[int, str]] = {}
    waiting: dict[str, tuple[int, str]] = {}
    for i, (what, n, size, model) in enumerate(steps):
        if what == "node":
            fold.feed(a_node(node=f"n{n}", gpus=size, model=model, generation=i + 1))
            nodes[f"n{n}"] = (size, model)
        elif what == "gone" and f"n{n}" in nodes:
            fold.feed(NodeRemoved(cluster="c1", node=f"n{n}", generation=i + 1, reason=ReasonCode.NODE_DELETED))
            del nodes[f"n{n}"]
        elif what == "job" and f"j{i}" not in waiting:
            job = a_job(f"j{i}", gpus=size)
            if model:
                job = job.model_copy(update={"resources": job.resources.model_copy(update={"gpu_models": (model,)})})
            fold.feed(job)
            waiting[f"j{i}"] = (size * 1000, model)
        elif what == "cancel" and waiting:
            job_id = sorted(waiting)[n % len(waiting)]
            fold.feed(JobCancelled(job_id=job_id, cluster="c1", run=0))
            del waiting[job_id]
    fleet = fold.get("fleet", "fleet")
    if fleet is None:
        return
    capacity: dict[str, int] = {}
    for size, model in nodes.values():
        if size:
            capacity[model] = capacity.get(model, 0) + size * 1000
    expected_any, expected = 0, dict[str, int]()
    for ask, model in waiting.values():
        if ask > (capacity.get(model, 0) if model else sum(capacity.values())):
            continue
        if model:
            expected[model] = expected.get(model, 0) + ask
        else:
            expected_any += ask
    assert (fleet.demand_any, dict(fleet.demand_by_model)) == (expected_any, expected)
