"""An event appended again at a later offset, after any number of other records (a producer's retry, a
connector re-publishing after a restart), changes nothing in the projections: the entities and every
profile they publish are those of the history without the repeat.

Each story is told twice, once with an earlier event appended again after 100 later records about the
same entity (more than any window of recent event ids would hold), and the entities (but for the
positions they applied) and the latest published outputs must be the same."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from events.catalog.base import Event
from events.catalog.decisions import JobPreemptionRequested, JobQueued
from events.catalog.governance import QuotaLine, QuotaSet
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuHealthReported,
    GpuHealthSample,
    GpuRate,
    GpuUsage,
    JobUsage,
    NodeRemoved,
    NodeUsageReported,
)
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobPreempted,
    JobStarted,
    JobSucceeded,
)
from events.catalog.reasons import ReasonCode
from events.catalog.types import Health, ResourceKind
from projections.stages.core import Applied, Output, evolve
from tests.unit.projections.builders import Fold, a_job, a_node, placed

pytestmark = pytest.mark.timeout(60)

Step = tuple[Event, int, str]  # the event, its time (seconds), its envelope id
LATER = 100


def filler(event: Callable[[int], Event]) -> Callable[[int], list[Step]]:
    """``LATER`` records made by ``event(i)``, one a second from ``start_s``: what the entity goes through
    between the original and its repeat."""
    return lambda start_s: [(event(i), start_s + i, f"later-{i}") for i in range(LATER)]


def told(steps: list[Step]) -> Fold:
    fold = Fold()
    for event, at_s, event_id in steps:
        fold.feed(event, at_s=at_s, event_id=event_id)
    return fold


def entities(fold: Fold) -> dict[str, dict[str, Any]]:
    """Every entity, but for the positions it applied (a repeat at a later offset moves those only)."""
    return {
        stage: {key: _without_positions(entity) for key, entity in sorted(table.items())}
        for stage, table in sorted(fold.store.tables.items())
    }


def _without_positions(entity: Any) -> Any:
    return evolve(entity, applied=Applied()) if hasattr(entity, "applied") else entity


def latest(outputs: list[Output]) -> dict[str, str]:
    last: dict[str, tuple[int, str]] = {}
    for out in outputs:
        entity, _, version = out.id.rpartition(":v")
        if int(version) >= last.get(entity, (0, ""))[0]:
            last[entity] = (int(version), out.event.model_dump_json())
    return {entity: json for entity, (_, json) in sorted(last.items())}


def assert_repeat_changes_nothing(
    steps: list[Step], repeated: int, check: Callable[[Fold], None], later: Callable[[int], list[Step]]
) -> None:
    """Tell ``steps`` and ``later`` ones, then the same with step ``repeated`` appended again after them."""
    after = later(max(at for _, at, _ in steps) + 1)
    without = told([*steps, *after])
    with_repeat = told([*steps, *after, steps[repeated]])
    check(without)
    check(with_repeat)
    assert entities(with_repeat) == entities(without)
    assert latest(with_repeat.outputs) == latest(without.outputs)


def health(state: Health, xid: int) -> GpuHealthReported:
    return GpuHealthReported(
        cluster="c1", node="n1", gpus=(GpuHealthSample(index=0, health=state, xid_errors=xid, last_xid=79),)
    )


def test_a_recovered_gpu_does_not_turn_failed_again_when_its_failure_report_comes_again() -> None:
    steps: list[Step] = [
        (a_node(gpus=2), 0, "node"),
        (health(Health.FAILED, 1), 10, "failed"),
        (health(Health.OK, 1), 20, "recovered"),
    ]

    def check(fold: Fold) -> None:
        node = fold.get("nodes", "c1/n1")
        assert node.gpus[0].health is Health.OK and node.failures == 1

    assert_repeat_changes_nothing(steps, 1, check, filler(lambda i: health(Health.OK, 1)))


def test_an_old_cluster_status_or_registration_does_not_come_back() -> None:
    def registered(rate: int) -> ClusterRegistered:
        return ClusterRegistered(
            cluster="c1",
            kind=ClusterKind.SIMULATED,
            site="s",
            region="r",
            currency="EUR",
            gpu_rates=(GpuRate(model="A100", micro_per_gpu_hour=rate),),
        )

    steps: list[Step] = [
        (registered(1_000_000), 0, "registered"),
        (ClusterStatusChanged(cluster="c1", status=ClusterStatus.UNREACHABLE, reason=ReasonCode.NODE_LOST), 5, "gone"),
        (registered(2_000_000), 8, "new-rates"),
        (ClusterStatusChanged(cluster="c1", status=ClusterStatus.REACHABLE, reason=ReasonCode.PLACED), 10, "back"),
    ]

    def check(fold: Fold) -> None:
        view = fold.get("clusters", "c1")
        assert (view.status, view.rates) == ("reachable", (("A100", 2_000_000),))

    restated = filler(lambda i: registered(2_000_000) if i % 2 else steps[3][0])  # the connector restates it
    assert_repeat_changes_nothing(steps, 1, check, restated)
    assert_repeat_changes_nothing(steps, 0, check, restated)


def quota(guaranteed: int, set_by: str = "alice") -> QuotaSet:
    return QuotaSet(
        tenant="t", lines=(QuotaLine(resource=ResourceKind.GPU, guaranteed=guaranteed, limit=8000),), set_by=set_by
    )


def test_an_old_quota_does_not_come_back_but_an_operators_after_a_grant_stamped_ahead_does_apply() -> None:
    steps: list[Step] = [
        (quota(1000), 0, "q1"),
        (quota(3000, set_by="governance"), 500, "grant"),  # governance's log time, ahead of the API's clock
        (quota(2000), 10, "q2"),  # the operator's, later in the log, earlier by its clock
    ]

    def check(fold: Fold) -> None:
        assert fold.get("quota", "t/default").lines[0].guaranteed == 2000

    usage_of_the_queue = filler(lambda i: quota(2000))  # set again, to the same amounts
    assert_repeat_changes_nothing(steps, 0, check, usage_of_the_queue)
    assert_repeat_changes_nothing(steps, 1, check, usage_of_the_queue)
    assert_repeat_changes_nothing(steps, 2, check, usage_of_the_queue)


def test_a_usage_report_that_comes_again_counts_no_gpu_time_twice() -> None:
    def report(pct: int) -> NodeUsageReported:
        return NodeUsageReported(
            cluster="c1",
            node="n1",
            window_ms=60_000,
            gpus=(GpuUsage(index=0, utilisation_pct=pct, memory_used_mib=1),),
            jobs=(JobUsage(job_id="j1", gpu_indices=(0,), utilisation_pct=pct),),
        )

    steps: list[Step] = [(a_node(), 0, "node"), (a_job(), 1, "j1"), (placed(), 2, "place"), (report(80), 60, "usage")]

    def check(fold: Fold) -> None:
        used = sum(b.used_milli_ms for b in fold.store.tables["usage"].values())
        assert used == 1000 * 80 // 100 * 60_000

    assert_repeat_changes_nothing(steps, 3, check, filler(lambda i: report(0)))


def test_a_node_removal_that_comes_again_after_the_node_came_back_leaves_it_there() -> None:
    steps: list[Step] = [
        (a_node(generation=1), 0, "seen"),
        (NodeRemoved(cluster="c1", node="n1", generation=2, reason=ReasonCode.NODE_LOST), 5, "removed"),
        (a_node(generation=3), 10, "back"),
    ]

    def check(fold: Fold) -> None:
        assert fold.get("nodes", "c1/n1").present

    heartbeats = filler(lambda i: health(Health.OK, 0))
    assert_repeat_changes_nothing(steps, 1, check, heartbeats)
    assert_repeat_changes_nothing(steps, 0, check, heartbeats)


def a_preempted_and_replaced_job() -> list[Step]:
    """Submitted, waits, placed, started, preempted, waits again, placed again, started, succeeded."""
    ask = JobPreemptionRequested(job_id="j1", cycle_id="cycle-000000003", cluster="c1", run=1, rule="priority")
    full, over = (ReasonCode.INSUFFICIENT_GPU,), (ReasonCode.QUOTA_EXCEEDED,)
    return [
        (a_node(), 0, "node"),
        (a_job(), 1, "submit"),
        (JobQueued(job_id="j1", cycle_id="cycle-000000001", reasons=full, message="full"), 2, "q1"),
        (placed(run=1), 3, "place-1"),
        (JobStarted(job_id="j1", cluster="c1", run=1), 4, "start-1"),
        (ask, 5, "ask-1"),
        (JobPreempted(job_id="j1", cluster="c1", run=1), 6, "preempted-1"),
        (JobQueued(job_id="j1", cycle_id="cycle-000000004", reasons=over, message="quota"), 7, "q2"),
        (placed(run=2, gpus=(1,)), 8, "place-2"),
        (JobStarted(job_id="j1", cluster="c1", run=2), 9, "start-2"),
        (JobSucceeded(job_id="j1", cluster="c1", run=2), 20, "done"),
    ]  # fmt: skip


cancel_requests = filler(lambda i: JobCancelRequested(job_id="j1", requester=f"user-{i}"))
"""A job's later records: its users ask, again and again, to cancel it (it has ended)."""


@pytest.mark.parametrize("repeated", range(1, 11), ids=lambda i: a_preempted_and_replaced_job()[i][2])
def test_any_step_of_a_jobs_lifecycle_that_comes_again_changes_nothing(repeated: int) -> None:
    def check(fold: Fold) -> None:
        job = fold.get("jobs", "j1")
        assert (job.status, job.runs, job.preemptions, job.run) == ("succeeded", 2, 1, 2)
        assert fold.get("nodes", "c1/n1").allocations == ()

    assert_repeat_changes_nothing(a_preempted_and_replaced_job(), repeated, check, cancel_requests)


@pytest.mark.parametrize(
    "ending",
    [
        [(JobCancelRequested(job_id="j1", requester="u"), 5, "ask"), (JobCancelled(job_id="j1", run=1), 6, "end")],
        [(JobCancelled(job_id="j1"), 6, "end")],  # names no run: ends the run the job holds
        [(JobFailed(job_id="j1", cluster="c1", run=1, reason=ReasonCode.NON_ZERO_EXIT), 6, "end")],
    ],
    ids=["cancelled", "cancelled naming no run", "failed"],
)
def test_the_end_of_a_run_that_comes_again_or_a_second_end_changes_nothing(ending: list[Step]) -> None:
    steps: list[Step] = [(a_node(), 0, "node"), (a_job(), 1, "submit"), (placed(), 2, "place"), *ending]
    for index in range(1, len(steps)):
        assert_repeat_changes_nothing(steps, index, lambda fold: None, cancel_requests)
    # A second, different end of the same run: the first is final, as the scheduler takes it.
    first = told(steps)
    second = told([*steps, (JobSucceeded(job_id="j1", cluster="c1", run=1), 30, "late-success")])
    assert entities(second)["jobs"] == entities(first)["jobs"]


def test_a_job_told_again_whole_after_many_other_jobs_is_unchanged() -> None:
    story = a_preempted_and_replaced_job()
    others = [*((a_job(f"o{i}"), 30 + i, f"other-{i}") for i in range(LATER)), *cancel_requests(200)]
    once = told([*story, *others])
    twice = told([*story, *others, *story])
    assert entities(twice) == entities(once)
    assert latest(twice.outputs) == latest(once.outputs)


def test_only_ids_make_a_repeat_a_new_event_at_the_same_time_is_applied() -> None:
    steps = [(a_node(gpus=2), 0, "node"), (health(Health.FAILED, 1), 10, "a"), (health(Health.OK, 1), 10, "b")]
    assert told(steps).get("nodes", "c1/n1").gpus[0].health is Health.OK
    ids = itertools.count()
    again = told([*steps, *((e, at, f"{i}-{next(ids)}") for e, at, i in steps[1:2])])
    assert again.get("nodes", "c1/n1").gpus[0].health is Health.FAILED  # a new report of the same millisecond
