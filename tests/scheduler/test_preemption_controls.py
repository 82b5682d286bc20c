"""Preemption controls of the Policy (issue 20, item 4): per priority class of the victim an interruption
budget, a grace period and a minimum runtime; limits per cycle and per tenant per hour; victims already
stopping counted, so a later cycle asks nobody more for the same room. Each setting changes a decision
here, against the same scene under the defaults."""

from __future__ import annotations

from dataclasses import replace

import pytest

from events.catalog.decisions import JobPreemptionRequested
from events.catalog.jobs import JobKind, JobSubmitted, PriorityClass, Resources
from events.catalog.types import TenantId
from events.wire.envelope import Envelope
from services.scheduler.core.policy import Preempt, Queue, ReasonCode, schedule
from services.scheduler.core.policy.model import PolicyConfig, PreemptionRules, RunningJob
from services.scheduler.core.state import SchedulerState
from services.scheduler.core.state.policy_document import policy_from_document
from tests.scheduler.builders import a_job, a_node, running, snapshot

pytestmark = pytest.mark.timeout(30)

MIN = 60_000
NOW = 100 * MIN


def rules(**by_class: PreemptionRules) -> PolicyConfig:
    classes = tuple((p, by_class.get(p.value, PreemptionRules())) for p in PriorityClass)
    return PolicyConfig(preemption_classes=classes)


def best_effort_run(job_id: str, node: str, *, tenant: str = "team-b", started_ms: int = 0, **more: int) -> RunningJob:
    job = a_job(job_id).tenant(tenant).gpus(8).priority(PriorityClass.BEST_EFFORT).build()
    if more:
        job = replace(job, **more)
    return running(job, "cluster-a", (node, tuple(range(8)), 1000), started_ms=started_ms)


def full(*names: str):
    return [a_node(n).gpus(8, (0,) * 8).cpu(64000, 63000).build() for n in names]


def critical(job_id: str = "crit", gpus: int = 8) -> object:
    return a_job(job_id).tenant("team-a").gpus(gpus).priority(PriorityClass.CRITICAL_TRAINING).kind(JobKind.TRAINING)


def preempted(result) -> list[str]:
    return [d.victim for d in result.decisions if isinstance(d, Preempt)]


def test_a_class_interruption_budget_spares_a_job_preempted_that_many_times_already() -> None:
    scene = snapshot(full("n1"), [critical().build()], [best_effort_run("be", "n1", times_preempted=1)], now_ms=NOW)
    assert preempted(schedule(scene)) == ["be"]  # the default budget is 3
    assert preempted(schedule(scene, rules(best_effort=PreemptionRules(interruption_budget=1)))) == []


def test_a_class_budget_of_zero_means_never_preempted() -> None:
    scene = snapshot(full("n1"), [critical().build()], [best_effort_run("be", "n1")], now_ms=NOW)
    assert preempted(schedule(scene, rules(best_effort=PreemptionRules(interruption_budget=0)))) == []


def test_a_victim_is_given_its_class_grace_period_and_told_so() -> None:
    scene = snapshot(full("n1"), [critical().build()], [best_effort_run("be", "n1")], now_ms=NOW)
    default = next(d for d in schedule(scene).decisions if isinstance(d, Preempt))
    assert default.grace_period_s == 30
    longer = next(
        d
        for d in schedule(scene, rules(best_effort=PreemptionRules(grace_period_s=600))).decisions
        if isinstance(d, Preempt)
    )
    assert longer.grace_period_s == 600 and "it has 600 s to stop" in longer.message


def test_a_run_younger_than_its_class_minimum_runtime_is_not_preempted_until_it_is_old_enough() -> None:
    young = best_effort_run("be", "n1", started_ms=NOW - 5 * MIN)
    policy = rules(best_effort=PreemptionRules(min_runtime_s=600))
    assert preempted(schedule(snapshot(full("n1"), [critical().build()], [young], now_ms=NOW))) == ["be"]
    assert preempted(schedule(snapshot(full("n1"), [critical().build()], [young], now_ms=NOW), policy)) == []
    later = snapshot(full("n1"), [critical().build()], [young], now_ms=NOW + 5 * MIN)
    assert preempted(schedule(later, policy)) == ["be"]


def test_the_minimum_runtime_steers_preemption_to_the_run_that_has_run_long_enough() -> None:
    runs = [best_effort_run("be-old", "n1", started_ms=0), best_effort_run("be-new", "n2", started_ms=NOW - MIN)]
    scene = snapshot(full("n1", "n2"), [critical().build()], runs, now_ms=NOW)
    assert preempted(schedule(scene)) == ["be-new"]  # least progress lost
    assert preempted(schedule(scene, rules(best_effort=PreemptionRules(min_runtime_s=600)))) == ["be-old"]


def test_a_cycle_asks_no_more_jobs_to_stop_than_the_policy_allows_per_cycle() -> None:
    runs = [best_effort_run("be-1", "n1"), best_effort_run("be-2", "n2")]
    scene = snapshot(full("n1", "n2"), [critical("c1").build(), critical("c2").build()], runs, now_ms=NOW)
    assert sorted(preempted(schedule(scene))) == ["be-1", "be-2"]
    limited = schedule(scene, PolicyConfig(max_preemptions_per_cycle=1))
    assert len(preempted(limited)) == 1
    waiting = [d for d in limited.decisions if isinstance(d, Queue)]
    assert [q.binding for q in waiting] == [ReasonCode.WAITING_FOR_PREEMPTION, ReasonCode.INSUFFICIENT_GPU]


def test_a_tenant_preempted_up_to_its_hourly_limit_loses_no_more_jobs_that_hour() -> None:
    runs = [best_effort_run("b-1", "n1", tenant="team-b"), best_effort_run("c-1", "n2", tenant="team-c")]
    scene = snapshot(full("n1", "n2"), [critical().build()], runs, now_ms=NOW)
    assert preempted(schedule(scene)) == ["b-1"]  # by id, between equals
    hit = replace(scene, preempted_last_hour=((TenantId("team-b"), 2),))
    assert preempted(schedule(hit, PolicyConfig(max_preemptions_per_tenant_hour=2))) == ["c-1"]
    assert preempted(schedule(hit, PolicyConfig(max_preemptions_per_tenant_hour=3))) == ["b-1"]


def test_the_hourly_limit_counts_the_victims_of_this_cycle_too() -> None:
    runs = [best_effort_run("b-1", "n1"), best_effort_run("b-2", "n2")]
    scene = snapshot(full("n1", "n2"), [critical("c1").build(), critical("c2").build()], runs, now_ms=NOW)
    assert len(preempted(schedule(scene, PolicyConfig(max_preemptions_per_tenant_hour=1)))) == 1


def test_a_job_whose_victims_are_stopping_waits_for_them_and_asks_nobody_else() -> None:
    """The next cycle after the preemption: the victim still holds its GPUs while it checkpoints. Without
    counting it, the preemptor would ask the other best-effort job to stop too."""
    stopping = replace(best_effort_run("be-1", "n1"), stopping=True, stopping_for="crit")
    scene = snapshot(full("n1", "n2"), [critical().build()], [stopping, best_effort_run("be-2", "n2")], now_ms=NOW)
    result = schedule(scene)
    assert preempted(result) == []
    waits = next(d for d in result.decisions if isinstance(d, Queue))
    assert waits.binding is ReasonCode.WAITING_FOR_PREEMPTION
    assert "1 job(s) in cluster-a are stopping to make room for it: be-1" in waits.message


def test_when_the_jobs_stopping_for_it_are_not_enough_only_the_difference_is_asked() -> None:
    half = [a_node(n).gpus(8, (0,) * 8).cpu(64000, 63000).build() for n in ("n1",)]
    runs = [
        running(
            a_job("be-1").gpus(4).priority(PriorityClass.BEST_EFFORT).build(), "cluster-a", ("n1", (0, 1, 2, 3), 1000)
        ),
        running(
            a_job("be-2").gpus(4).priority(PriorityClass.BEST_EFFORT).build(), "cluster-a", ("n1", (4, 5, 6, 7), 1000)
        ),
    ]
    runs[0] = replace(runs[0], stopping=True, stopping_for="crit")
    result = schedule(snapshot(half, [critical().build()], runs, now_ms=NOW))
    assert preempted(result) == ["be-2"]
    waits = next(d for d in result.decisions if isinstance(d, Queue))
    assert "asked to stop: be-2" in waits.message and "stopping to make room for it: be-1" in waits.message


def test_a_job_stopping_for_one_job_is_not_counted_on_by_another() -> None:
    stopping = replace(best_effort_run("be-1", "n1"), stopping=True, stopping_for="other")
    result = schedule(snapshot(full("n1"), [critical().build()], [stopping], now_ms=NOW))
    assert preempted(result) == []
    waits = next(d for d in result.decisions if isinstance(d, Queue))
    assert waits.binding is not ReasonCode.WAITING_FOR_PREEMPTION


# -- the state: what the scheduler folds from the log -----------------------------------------------


def submitted(job_id: str, tenant: str, time_ms: int) -> Envelope:
    job = JobSubmitted(
        job_id=job_id,
        name=job_id,
        tenant=tenant,
        kind=JobKind.BATCH,
        priority_class=PriorityClass.BEST_EFFORT,
        resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=1),
    )
    return Envelope(id=f"s-{job_id}", time_ms=time_ms, data=job)


def asked(job_id: str, time_ms: int, preemptor: str = "crit") -> Envelope:
    request = JobPreemptionRequested(job_id=job_id, cycle_id="c-1", cluster="cluster-a", rule="r", preemptor=preemptor)
    return Envelope(id=f"p-{job_id}", time_ms=time_ms, data=request)


@pytest.mark.parametrize("requests_first", [False, True])
def test_the_state_counts_a_tenants_preemptions_within_the_hour_in_any_order(requests_first: bool) -> None:
    submissions = [submitted(f"j{i}", "team-b", 0) for i in range(4)] + [submitted("k", "team-c", 0)]
    requests = [asked("j0", 10 * MIN), asked("j1", 50 * MIN), asked("j2", 70 * MIN), asked("k", 75 * MIN)]
    state = SchedulerState(keep_settled=True)
    for envelope in [*requests, *submissions] if requests_first else [*submissions, *requests, requests[1]]:
        state.fold(envelope)
    assert state.snapshot(80 * MIN).preempted_last_hour == (("team-b", 2), ("team-c", 1))
    assert state.snapshot(115 * MIN).preempted_last_hour == (("team-b", 1), ("team-c", 1))


def test_the_policy_document_carries_every_preemption_control() -> None:
    config = policy_from_document(
        "v7",
        {
            "preemption_classes": {"standard": {"interruption_budget": 1, "grace_period_s": 300, "min_runtime_s": 900}},
            "max_preemptions_per_cycle": 4,
            "max_preemptions_per_tenant_hour": 10,
        },
    )
    assert config.rules_for(PriorityClass.STANDARD) == PreemptionRules(1, 300, 900)
    assert config.rules_for(PriorityClass.BEST_EFFORT) == PreemptionRules()
    assert (config.max_preemptions_per_cycle, config.max_preemptions_per_tenant_hour) == (4, 10)
    with pytest.raises(ValueError, match="class standard rule grace_period_s"):
        policy_from_document("v8", {"preemption_classes": {"standard": {"grace_period_s": "soon"}}})
