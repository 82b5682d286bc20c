"""Properties of the model whatever arrives, in whatever order: no GPU is ever over-committed, the
allocation always equals what the live runs hold, every placement ends exactly once, ids never repeat
and node generations only grow."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.sim import SimConfig
from events.catalog.inventory import NodeObserved, NodeRemoved
from events.catalog.jobs import JobCancelled, JobFailed, JobPreempted, JobReclaimed, JobSucceeded

from .builders import Story, a_cluster, a_job, a_node, a_placement, cancel_request, preemption_request

pytestmark = [pytest.mark.property, pytest.mark.timeout(120)]

TERMINAL = (JobSucceeded, JobFailed, JobCancelled, JobPreempted, JobReclaimed)
NODES = 3
GPUS = 4

place = st.tuples(
    st.just("place"),
    st.integers(0, 11),  # job
    st.integers(0, NODES - 1),
    st.lists(st.integers(0, GPUS - 1), min_size=1, max_size=3, unique=True),
    st.sampled_from([1000, 250, 500, 750]),
    st.integers(10, 400),  # runtime
)
op = st.one_of(
    place,
    st.tuples(st.just("again"), st.integers(0, 11)),
    st.tuples(st.just("cancel"), st.integers(0, 11)),
    st.tuples(st.just("preempt"), st.integers(0, 11)),
    st.tuples(st.just("wait"), st.integers(1, 120)),
)


def check_allocation(story: Story) -> None:
    model = story.model
    for node in model.nodes.values():
        held = [0] * node.spec.gpus
        for key in node.runs:
            for replica in model.runs[key].placement:
                if replica.node == node.name:
                    for index in replica.gpu_indices:
                        held[index] += replica.gpu_milli_each
        assert node.gpu_milli == held
        assert all(0 <= milli <= 1000 for milli in node.gpu_milli)


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=40), st.integers(0, 3))
def test_whatever_arrives_nothing_is_over_committed_and_every_placement_ends_once(
    ops: list[tuple[object, ...]], seed: int
) -> None:
    config = SimConfig(start_delay_s=5, stop_delay_s=3, fault_rate=0.5, seed=seed, fault_min_s=60, fault_max_s=300)
    story = Story(a_cluster(*(a_node(f"node-{i}").gpus(GPUS, "T4", 15109) for i in range(NODES))), config)
    now, sent = 0.0, {}
    for step in ops:
        kind, job = step[0], f"job-{step[1]}"
        if kind == "place" and job not in sent:
            _, _, node, gpus, milli, runtime = step
            builder = a_job(job).runtime(runtime)  # type: ignore[arg-type]
            builder = builder.gpus(len(gpus)) if milli == 1000 else builder.share(milli)  # type: ignore[arg-type]
            gpus = gpus if milli == 1000 else gpus[:1]  # type: ignore[index]
            sent[job] = a_placement(job).on(f"node-{node}", *sorted(gpus), milli=milli)  # type: ignore[arg-type]
            story.start(builder, sent[job])
        elif kind == "again" and job in sent:
            story.place(sent[job])
        elif kind == "cancel":
            story.send(cancel_request(job))
        elif kind == "preempt":
            story.send(preemption_request(job))
        elif kind == "wait":
            now += step[1]  # type: ignore[operator]
            story.at(now)
        check_allocation(story)
    story.at(now + 10_000)
    check_allocation(story)
    assert story.model.runs == {}
    ends = Counter(e.event.job_id for e in story.emitted if isinstance(e.event, TERMINAL))  # type: ignore[attr-defined]
    assert ends == Counter(sent.keys())
    assert max(Counter(e.id for e in story.emitted).values()) == 1
    generations: dict[str, list[int]] = {}
    for emit in story.emitted:
        if isinstance(emit.event, NodeObserved | NodeRemoved):
            generations.setdefault(emit.event.node, []).append(emit.event.generation)
    assert all(g == sorted(set(g)) for g in generations.values())
