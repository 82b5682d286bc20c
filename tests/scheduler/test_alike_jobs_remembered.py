"""A cycle reuses, for jobs alike in all it reads of them, the preemption search that found nothing and
the explanation of a wait (``context.REMEMBER_ALIKE``): in a long queue of a few shapes that made a
cycle of 3,000 waiting jobs some 4.8x cheaper. It must change no decision: every cycle here is decided
with and without it, over long queues of mixed shapes, priorities, gangs, GPU models, runtimes, quotas,
a cohort, a reservation and NVLink domains preferred or required, and the two results must be equal."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.jobs import JobKind, PriorityClass
from services.scheduler.core.policy import Preempt, Quota, schedule
from services.scheduler.core.policy import context as policy_context
from tests.scheduler.builders import a_job, a_node, running, snapshot, tenant

pytestmark = [pytest.mark.property, pytest.mark.timeout(300)]

SHAPES = st.tuples(
    st.sampled_from([0, 1, 2, 4, 8]),  # whole GPUs (0: a share or none)
    st.sampled_from([1, 1, 1, 2, 3]),  # replicas
    st.sampled_from(list(PriorityClass)),
    st.sampled_from(["t0", "t1", "t2", "t3"]),  # t3 holds nothing of its guarantee: it may reclaim
    st.sampled_from([(), ("A100",), ("T4",)]),
    st.sampled_from([None, 60, 36_000]),  # max runtime: some may backfill a reservation
    st.sampled_from([None, False, True]),  # NVLink: none, preferred, required (domains of 2 and 1 nodes)
)


def scene(shapes: list[tuple[int, int, PriorityClass, str, tuple[str, ...], int | None, bool | None]], busy: int):  # type: ignore[no-untyped-def]
    nodes = [
        a_node(f"{c}-n{i}")
        .cluster(c)
        .model(m)
        .gpus(8, (0,) * busy + (1000,) * (8 - busy))
        .domain(f"{c}-d{i % 2}")
        .build()
        for c, m in (("cluster-a", "A100"), ("cluster-b", "T4"))
        for i in range(3)
    ]
    runs = [
        running(
            a_job(f"r-{c}-{i}").tenant(f"t{i % 3}").gpus(busy).priority(list(PriorityClass)[(i + 2) % 4]).build(),
            c,
            (f"{c}-n{i}", tuple(range(busy)), 1000),
        )
        for c in ("cluster-a", "cluster-b")
        for i in range(3)
        if busy
    ]
    jobs = []
    for k, (gpus, replicas, priority, who, models, max_s, nvlink) in enumerate(shapes):
        job = a_job(f"j{k:03d}").tenant(who).priority(priority).replicas(replicas, gang=replicas > 1).submitted(k)
        job = job if nvlink is None else job.nvlink(required=nvlink)
        job = (job.gpus(gpus) if gpus else job.share(500)).models(*models).runtime(max_s=max_s)
        jobs.append(job.kind(JobKind.TRAINING if k % 2 else JobKind.BATCH).build())
    tenants = [
        tenant("t0", Quota("gpu", 8000, 24000), cohort="c"),
        tenant("t1", Quota("gpu", 4000, 8000), cohort="c"),
        tenant("t3", Quota("gpu", 32000, 32000), cohort="c"),
    ]
    return snapshot(nodes, jobs, runs, tenants=tenants)


@settings(max_examples=150, deadline=None)
@given(shapes=st.lists(SHAPES, min_size=1, max_size=80), busy=st.sampled_from([0, 4, 6, 8]))
def test_remembering_alike_jobs_changes_no_decision(
    shapes: list[tuple[int, int, PriorityClass, str, tuple[str, ...], int | None, bool | None]], busy: int
) -> None:
    remembered, afresh = both_ways(scene(shapes, busy))
    assert remembered == afresh


def both_ways(snap):  # type: ignore[no-untyped-def]
    remembered = schedule(snap)
    policy_context.REMEMBER_ALIKE = False
    try:
        afresh = schedule(snap)
    finally:
        policy_context.REMEMBER_ALIKE = True
    return remembered, afresh


def reclaimed(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [d.victim for d in result.decisions if isinstance(d, Preempt)]


def full_of(node: str, owner: str, gpus: range):  # type: ignore[no-untyped-def]
    return [running(a_job(f"{owner}-{g}").tenant(owner).gpus(1).build(), "cluster-a", (node, (g,), 1000)) for g in gpus]


def test_a_job_of_another_tenant_alike_in_shape_may_reclaim_where_the_first_found_nothing() -> None:
    """t2 has no guarantee to reclaim for; t3 does, from t1's borrowed GPUs: the search that found nothing
    for t2's job is not the answer for t3's."""
    node = a_node("n1").gpus(8, (0,) * 8).cpu(64000, 56000).build()
    tenants = [tenant("t1", Quota("gpu", 4000, 8000), cohort="c"), tenant("t3", Quota("gpu", 32000, 32000), cohort="c")]
    pending = [
        a_job("a").tenant("t2").gpus(4).submitted(0).build(),
        a_job("b").tenant("t3").gpus(4).submitted(1).build(),
    ]
    remembered, afresh = both_ways(snapshot([node], pending, full_of("n1", "t1", range(8)), tenants=tenants))
    assert remembered == afresh and len(reclaimed(afresh)) == 4


def test_a_tenant_that_starts_borrowing_in_the_cycle_can_be_reclaimed_from_by_the_next_job_alike() -> None:
    """x finds nothing to reclaim; y's placement takes t1 above its guarantee; z, alike x, reclaims."""
    n1 = a_node("n1").gpus(8, (0,) * 8).cpu(64000, 56000).build()
    n2 = a_node("n2").gpus(1).build()
    tenants = [
        tenant("t1", Quota("gpu", 8000, 16000), cohort="c", weight=1000),  # first among equals in the order
        tenant("t3", Quota("gpu", 32000, 32000), cohort="c"),
    ]
    pending = [
        a_job("x").tenant("t3").gpus(4).submitted(0).build(),
        a_job("y").tenant("t1").gpus(1).submitted(1).build(),
        a_job("z").tenant("t3").gpus(4).submitted(2).build(),
    ]
    remembered, afresh = both_ways(snapshot([n1, n2], pending, full_of("n1", "t1", range(8)), tenants=tenants))
    assert remembered == afresh and reclaimed(afresh)
