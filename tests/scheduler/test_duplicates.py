"""An event appended again at a later offset, after any number of other records, changes nothing the
scheduler knows or decides: its folded facts, its snapshot and its next cycle's decision events are those
of the history without the repeat. Decisions stay a pure function of the log: the same log gives the
same state however often a repeat comes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from events.catalog.base import Event
from events.catalog.decisions import JobPreemptionRequested, JobQueued
from events.catalog.governance import PolicyConfigured, QuotaLine, QuotaSet, TenantRegistered
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuHealthReported,
    GpuHealthSample,
    NodeRemoved,
)
from events.catalog.jobs import JobPreempted, JobStarted, PriorityClass
from events.catalog.reasons import ReasonCode
from events.catalog.types import Health, ResourceKind
from events.wire.envelope import Envelope
from services.scheduler.core.decide import decide
from services.scheduler.core.state import SchedulerState
from tests.unit.projections.builders import a_job, a_node, placed

pytestmark = pytest.mark.timeout(60)

T0 = 1_767_225_600_000
LATER = 100
Step = tuple[Event, int, str]  # the event, its time (seconds from T0), its envelope id


def fold(steps: list[Step]) -> SchedulerState:
    state = SchedulerState()
    for event, at_s, event_id in steps:
        state.fold(Envelope(id=event_id, time_ms=T0 + at_s * 1000, data=event))
    state.refresh()
    return state


def known(state: SchedulerState, now_ms: int) -> dict[str, Any]:
    """What the scheduler knows and decides (not how many records it read)."""
    decided = decide(state, now_ms)
    return {
        "jobs": dict(sorted(state.jobs.items())),
        "nodes": dict(sorted(state.nodes.items())),
        "clusters": (state.clusters, state.cluster_status, state.profiles),
        "governance": (state.tenants, state.quotas, state.policy),
        "settled": state.settled,
        "snapshot": state.snapshot(now_ms),
        "decisions": [(e.id, e.data.model_dump_json()) for e in decided.events],
    }


def assert_repeat_changes_nothing(steps: list[Step], repeated: int, later: Callable[[int], list[Step]]) -> None:
    after = later(max(at for _, at, _ in steps) + 1)
    end_ms = T0 + (max(at for _, at, _ in after) + 10) * 1000
    without = fold([*steps, *after])
    with_repeat = fold([*steps, *after, steps[repeated]])
    assert known(with_repeat, end_ms) == known(without, end_ms)


def each(event: Callable[[int], Event]) -> Callable[[int], list[Step]]:
    return lambda start_s: [(event(i), start_s + i, f"later-{i}") for i in range(LATER)]


def registered(cluster: str = "c1") -> ClusterRegistered:
    return ClusterRegistered(cluster=cluster, kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR")


def health(state: Health) -> GpuHealthReported:
    return GpuHealthReported(cluster="c1", node="n1", gpus=(GpuHealthSample(index=0, health=state, xid_errors=1),))


def test_a_gpu_failure_reported_again_after_its_recovery_does_not_keep_the_gpu_from_work() -> None:
    steps: list[Step] = [
        (registered(), 0, "c1"),
        (a_node(gpus=1), 1, "n1"),
        (health(Health.FAILED), 2, "failed"),
        (health(Health.OK), 3, "recovered"),
        (a_job("j1", gpus=1), 4, "j1"),
    ]
    assert_repeat_changes_nothing(steps, 2, each(lambda i: health(Health.OK)))
    state = fold([*steps, steps[2]])
    assert [d.data.event_type for d in decide(state, T0 + 10_000).events] == ["io.fedsched.JobPlaced"]


def test_an_old_status_of_a_cluster_reported_again_does_not_make_it_unreachable() -> None:
    status = ClusterStatusChanged(cluster="c1", status=ClusterStatus.UNREACHABLE, reason=ReasonCode.NODE_LOST)
    back = ClusterStatusChanged(cluster="c1", status=ClusterStatus.REACHABLE, reason=ReasonCode.PLACED)
    steps: list[Step] = [(registered(), 0, "c1"), (a_node(), 1, "n1"), (status, 2, "gone"), (back, 3, "back")]
    steps.append((a_job("j1"), 4, "j1"))
    assert_repeat_changes_nothing(steps, 2, each(lambda i: back))
    assert_repeat_changes_nothing(steps, 0, each(lambda i: registered()))


def quota(guaranteed: int, set_by: str = "alice") -> QuotaSet:
    line = QuotaLine(resource=ResourceKind.GPU, guaranteed=guaranteed, limit=guaranteed)
    return QuotaSet(tenant="team-a", lines=(line,), set_by=set_by)


def test_an_old_quota_tenant_or_policy_set_again_does_not_come_back() -> None:
    policy = PolicyConfigured(policy="default", policy_version="v1", document={}, configured_by="ops")
    steps: list[Step] = [
        (registered(), 0, "c1"),
        (a_node(gpus=8), 1, "n1"),
        (TenantRegistered(tenant="team-a", display_name="A", weight=1), 2, "tenant-1"),
        (quota(1000), 3, "q1"),
        (policy, 4, "policy-1"),
        (quota(8000, set_by="governance"), 500, "grant"),  # governance's log time runs ahead
        (quota(2000), 6, "q2"),  # the operator's: later in the log, earlier by its clock, applied
        (TenantRegistered(tenant="team-a", display_name="A", weight=5), 7, "tenant-2"),
        (a_job("j1", gpus=2), 8, "j1"),
    ]
    for repeated in (2, 3, 4, 5, 6):
        assert_repeat_changes_nothing(steps, repeated, each(lambda i: a_job(f"o{i}", tenant="team-b")))
    state = fold(steps)
    assert state.quotas[("team-a", "default")].lines[0].guaranteed == 2000
    assert state.tenants["team-a"].weight == 5


def test_a_wait_or_a_stop_request_repeated_after_later_cycles_changes_no_decision() -> None:
    queued = JobQueued(job_id="j2", cycle_id="cycle-000000001", reasons=(ReasonCode.INSUFFICIENT_GPU,), message="m")
    later_wait = JobQueued(job_id="j2", cycle_id="cycle-000000005", reasons=(ReasonCode.QUOTA_EXCEEDED,), message="q")
    ask = JobPreemptionRequested(
        job_id="j1", cycle_id="cycle-000000002", cluster="c1", run=1, rule="priority", preemptor="j2"
    )
    steps: list[Step] = [
        (registered(), 0, "c1"),
        (a_node(gpus=1), 1, "n1"),
        (a_job("j1", gpus=1), 2, "j1"),
        (placed("j1"), 3, "place-j1"),
        (JobStarted(job_id="j1", cluster="c1"), 4, "start-j1"),
        (a_job("j2", gpus=1).model_copy(update={"priority_class": PriorityClass.CRITICAL_TRAINING}), 5, "j2"),
        (queued, 6, "wait-1"),
        (ask, 7, "ask"),
        (JobPreempted(job_id="j1", cluster="c1", run=1), 8, "preempted"),
        (placed("j2"), 9, "place-j2"),
        (JobPreempted(job_id="j2", cluster="c1", run=1), 10, "j2-preempted"),
        (later_wait, 11, "wait-5"),
    ]
    for repeated in range(2, len(steps)):
        assert_repeat_changes_nothing(steps, repeated, each(lambda i: a_job(f"o{i}", tenant="team-b", gpus=0)))
    assert fold([*steps, steps[6]]).jobs["j2"].last_queued == ("QuotaExceeded",)
    assert fold([*steps, steps[7]]).jobs["j2"].victims == ()  # its next placement names no one again


def test_a_node_removal_repeated_after_the_node_came_back_leaves_it_in_the_fleet() -> None:
    steps: list[Step] = [
        (registered(), 0, "c1"),
        (a_node(generation=1), 1, "seen"),
        (NodeRemoved(cluster="c1", node="n1", generation=2, reason=ReasonCode.NODE_LOST), 2, "removed"),
        (a_node(generation=3), 3, "back"),
    ]
    assert_repeat_changes_nothing(steps, 2, each(lambda i: health(Health.OK)))
    assert_repeat_changes_nothing(steps, 1, each(lambda i: health(Health.OK)))
