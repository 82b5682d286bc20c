"""Whose usage a node's report measured does not depend on the order the hosts read it in (issue 19's
soak found the distributed host counting a report read before its job's allocation as the unknown
tenant's, whole GPUs, where a rebuild in time order counted it as the job's tenant's share).

The node stage is fed the same allocations and reports in time order (as a rebuild reads them) and in
any other order that keeps each source's own order (as the distributed host may read them: the reports
from the inventory topic, the allocations one hop behind through the job stage), and must emit the same
usage samples and end with the same profile.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.inventory import GpuDevice, JobUsage, NodeObserved, NodeUsageReported
from events.catalog.types import ClusterId, JobId, NodeId
from projections.stages.core import Input, Position, Routed
from projections.stages.deltas import NodeAllocation, UsageSample
from projections.stages.nodes import WAITING_USAGE, NodeProfile, NodeStage

KEY = "c1/n1"
STAGE = NodeStage()


def _node() -> Input:
    event = NodeObserved(
        cluster=ClusterId("c1"),
        node=NodeId("n1"),
        generation=1,
        cpu_milli=64_000,
        memory_mib=262_144,
        gpus=tuple(GpuDevice(index=i, model="A100", memory_mib=81_920) for i in range(4)),
    )
    return Input(KEY, 0, Position("fedsched.inventory", 0, 0), event, "node")


def _held(job: str, run: int, at_ms: int, tenant: str = "team-a", milli: int = 500) -> Input:
    return Input(KEY, at_ms, None, NodeAllocation(job, run, True, tenant, 1000, 1024, ((0, milli),)), f"p-{job}-{run}")


def _gone(job: str, run: int, at_ms: int) -> Input:
    return Input(KEY, at_ms, None, NodeAllocation(job, run, False), f"e-{job}-{run}")


def _report(at_ms: int, offset: int, *jobs: str, run: int | None = 1) -> Input:
    usage = tuple(JobUsage(job_id=JobId(j), gpu_indices=(0,), utilisation_pct=40, run=run) for j in jobs)
    event = NodeUsageReported(cluster=ClusterId("c1"), node=NodeId("n1"), window_ms=30_000, jobs=usage)
    return Input(KEY, at_ms, Position("fedsched.inventory", 0, offset), event, f"u{offset}")


def _fold(inputs: list[Input]) -> tuple[NodeProfile | None, Counter[UsageSample]]:
    entity: NodeProfile | None = None
    samples: Counter[UsageSample] = Counter()
    for item in [_node(), *inputs]:
        entity, emitted = STAGE.fold(entity, item)
        samples.update(e.delta for e in emitted if isinstance(e, Routed) and isinstance(e.delta, UsageSample))
    return entity, samples


def test_a_report_read_before_the_allocation_it_measured_is_the_jobs_tenants_share() -> None:
    in_time_order = [_held("j1", 1, 1_000), _report(30_000, 1, "j1")]
    _, expected = _fold(in_time_order)
    profile, samples = _fold([_report(30_000, 1, "j1"), _held("j1", 1, 1_000)])
    assert samples == expected
    (sample,) = samples
    assert (sample.tenant, sample.gpu_milli) == ("team-a", 500)
    assert profile is not None and profile.waiting_usage == ()


def test_a_report_read_after_the_release_of_what_it_measured_is_still_the_jobs() -> None:
    _, expected = _fold([_held("j1", 1, 1_000), _report(30_000, 1, "j1"), _gone("j1", 1, 30_000)])
    _, samples = _fold([_held("j1", 1, 1_000), _gone("j1", 1, 30_000), _report(30_000, 1, "j1")])
    assert samples == expected and next(iter(samples)).tenant == "team-a"


def test_a_report_is_the_run_it_names_when_the_job_came_back_to_the_node() -> None:
    in_time_order = [
        _held("j1", 1, 1_000, milli=500),
        _report(30_000, 1, "j1", run=1),
        _gone("j1", 1, 40_000),
        _held("j1", 2, 50_000, milli=1000),
        _report(60_000, 2, "j1", run=2),
    ]
    _, expected = _fold(in_time_order)
    reports_first = [in_time_order[1], in_time_order[4], *in_time_order[0:1], *in_time_order[2:4]]
    _, samples = _fold(reports_first)
    assert samples == expected
    assert sorted(s.gpu_milli for s in samples) == [500, 1000]


def test_a_run_whose_placement_never_comes_waits_a_bounded_while_then_counts_as_the_unknown_tenants() -> None:
    reports = [_report(30_000 * (i + 1), i + 1, "lost") for i in range(WAITING_USAGE + 3)]
    profile, samples = _fold(reports)
    assert profile is not None and len(profile.waiting_usage) == WAITING_USAGE
    assert sum(samples.values()) == 3
    assert {(s.tenant, s.gpu_milli) for s in samples} == {("", 1000)}


def test_work_fedsched_did_not_place_counts_at_once_as_the_unknown_tenants() -> None:
    profile, samples = _fold([_held("j1", 1, 1_000), _report(30_000, 1, "foreign", run=None)])
    assert {(s.job_id, s.tenant, s.gpu_milli) for s in samples} == {("foreign", "", 1000)}
    assert profile is not None and profile.waiting_usage == ()


def test_a_report_that_names_no_run_is_the_allocation_in_force_at_its_time() -> None:
    history = [
        _held("j1", 1, 1_000, milli=500),
        _report(30_000, 1, "j1", run=None),
        _gone("j1", 1, 40_000),
        _report(45_000, 2, "j1", run=None),  # after the run was given back: no allocation then
        _held("j1", 2, 50_000, milli=250),
        _report(60_000, 3, "j1", run=None),
    ]
    _, samples = _fold(history)
    assert sorted((s.end_ms, s.tenant, s.gpu_milli) for s in samples) == [
        (30_000, "team-a", 500),
        (45_000, "", 1000),
        (60_000, "team-a", 250),
    ]


@st.composite
def _interleavings(draw: st.DrawFn) -> tuple[list[Input], list[Input]]:
    """A node's history in time order, and the same history read with the allocations behind."""
    jobs = draw(st.integers(min_value=1, max_value=4))
    allocations: list[Input] = []
    reports: list[Input] = []
    offset = 0
    for index in range(jobs):
        job = f"j{index}"
        start = draw(st.integers(min_value=0, max_value=100)) * 1_000
        runs = draw(st.integers(min_value=1, max_value=2))
        for run in range(1, runs + 1):
            length = draw(st.integers(min_value=30, max_value=200)) * 1_000
            milli = draw(st.sampled_from((250, 500, 1000)))
            allocations.append(_held(job, run, start, milli=milli))
            for at in range(start + 30_000, start + length + 1, 30_000):
                offset += 1
                reports.append(_report(at, offset, job, run=run))
            allocations.append(_gone(job, run, start + length))
            start += length + draw(st.integers(min_value=1, max_value=60)) * 1_000
    reports.sort(key=lambda i: i.time_ms)
    reports = [item._replace(position=Position("fedsched.inventory", 0, n + 1)) for n, item in enumerate(reports)]
    allocations.sort(key=lambda i: (i.time_ms, isinstance(i.item, NodeAllocation) and i.item.held))
    in_time = sorted([*allocations, *reports], key=lambda i: (i.time_ms, isinstance(i.item, NodeAllocation)))
    # The distributed host: each source keeps its order; the allocations lag the reports by any amount.
    lags = draw(st.lists(st.integers(min_value=0, max_value=6), min_size=len(allocations), max_size=len(allocations)))
    lagged: list[Input] = []
    pending = list(reports)
    for allocation, lag in zip(allocations, lags, strict=True):
        while pending and pending[0].time_ms <= allocation.time_ms + lag * 30_000:
            lagged.append(pending.pop(0))
        lagged.append(allocation)
    return in_time, [*lagged, *pending]


@settings(max_examples=300, deadline=None)
@given(_interleavings())
def test_any_lag_of_the_allocations_behind_the_reports_gives_the_same_usage(
    histories: tuple[list[Input], list[Input]],
) -> None:
    in_time, lagged = histories
    expected_profile, expected = _fold(in_time)
    profile, samples = _fold(lagged)
    assert samples == expected
    assert all(s.tenant == "team-a" for s in samples)
    assert profile is not None and expected_profile is not None
    assert profile.waiting_usage == expected_profile.waiting_usage == ()
    assert profile.allocations == expected_profile.allocations
