"""The pure governance rules, one story each: quota approval and grants, reclamation, abnormal jobs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from events.catalog.decisions import JobReclaimRequested
from events.catalog.governance import (
    FindingKind,
    GovernanceFinding,
    JobIdleWarning,
    QuotaRequestApproved,
    QuotaRequestRejected,
    QuotaSet,
)
from events.catalog.jobs import JobCancelRequested, JobFailed
from events.catalog.reasons import ReasonCode
from events.catalog.types import MAX_SAFE_INT
from services.governance.core.config import AutoApproveRule, GovConfig, IdleRule, RuntimeRule, from_document
from services.governance.core.quota import DecisionError, auto_decide, decide

from .builders import MIN, T0, History, a_history, types

pytestmark = pytest.mark.timeout(30)


def findings(outputs: list) -> list[GovernanceFinding]:  # type: ignore[type-arg]
    return [o.event for o in outputs if isinstance(o.event, GovernanceFinding)]


# -- quota ---------------------------------------------------------------------------------------------


def test_a_request_under_the_threshold_is_approved_by_the_named_rule_for_the_period_asked() -> None:
    outputs = a_history().quota("team-a", 4000).request("qr-1", 1000).evaluate()
    approved = [o.event for o in outputs if isinstance(o.event, QuotaRequestApproved)]
    assert len(approved) == 1
    assert approved[0].rule == "small-gpu-request" and approved[0].decided_by is None
    assert approved[0].approved_amount == 1000 and approved[0].expires_ms == T0 + 24 * 60 * MIN


def test_a_request_whose_period_is_over_when_it_is_read_is_not_approved_by_rule() -> None:
    # Asked for one hour from minute 0, read only at minute 90 (the log's time moved on before governance ran).
    late = a_history().quota("team-a", 4000).request("qr-late", 1000, hours=1).tick(90)
    assert [o for o in late.evaluate() if isinstance(o.event, QuotaRequestApproved)] == []
    on_time = a_history().quota("team-a", 4000).request("qr-late", 1000, hours=1).tick(30)
    assert [o.event.request_id for o in on_time.evaluate() if isinstance(o.event, QuotaRequestApproved)] == ["qr-late"]


def test_a_request_above_the_threshold_waits_for_a_person() -> None:
    assert a_history().quota("team-a", 4000).request("qr-1", 8000).evaluate() == []


@pytest.mark.parametrize(
    ("rules", "amount", "expected"),
    [
        (
            (AutoApproveRule("any", max_amount=1000), AutoApproveRule("team-a", tenant="team-a", max_amount=8000)),
            8000,
            "team-a",
        ),
        (
            (AutoApproveRule("any", max_amount=9000), AutoApproveRule("team-a", tenant="team-a", max_amount=100)),
            8000,
            None,
        ),
        ((AutoApproveRule("other", tenant="team-b", max_amount=9000),), 10, None),
    ],
    ids=["the tenant's own rule wins", "the most specific rule decides even when it says no", "no rule matches"],
)
def test_the_most_specific_auto_approve_rule_decides(rules: tuple, amount: int, expected: str | None) -> None:  # type: ignore[type-arg]
    history = a_history().request("qr-1", amount)
    request = history.state().requests["qr-1"].submitted
    decision = auto_decide(request, GovConfig(auto_approve=rules))
    assert (decision.rule if decision else None) == expected


def test_an_approved_grant_raises_the_quota_from_its_start_and_restores_it_at_expiry() -> None:
    history = a_history().quota("team-a", 1000).request("qr-1", 8000, at=10, hours=1)
    request = history.state().requests["qr-1"].submitted
    history.add(decide(request, approve=True, by="ops@example.com", comment="ok"), at=11)
    started = history.tick(12).evaluate()
    assert types(started) == ["QuotaSet"]
    raised = started[0].event
    assert isinstance(raised, QuotaSet) and raised.request_id == "qr-1"
    assert (raised.lines[0].guaranteed, raised.lines[0].limit) == (9000, 9000)
    history.then_publish(started).tick(50)
    assert history.evaluate() == []
    ended = history.tick(71).evaluate()
    assert [o.id for o in ended] == ["gov:quota-end:qr-1"]
    restored = ended[0].event
    assert isinstance(restored, QuotaSet) and restored.lines[0].guaranteed == 1000


def test_grants_of_two_resources_stack_and_an_operators_new_base_keeps_the_grant_in_force() -> None:
    history = a_history().quota("team-a", 1000).request("qr-1", 2000, at=1)  # auto-approved (<= 2000)
    history.then_publish(history.evaluate()).tick(2)
    history.then_publish(history.evaluate())
    history.quota("team-a", 3000, at=5).tick(6)  # an operator replaces the base while qr-1 is in force
    (reapplied,) = history.evaluate()
    assert reapplied.id == "gov:quota-reapply:team-a.default.2"
    assert isinstance(reapplied.event, QuotaSet) and reapplied.event.lines[0].guaranteed == 5000


def test_a_grant_for_a_resource_without_a_quota_line_adds_a_guarantee_and_no_limit() -> None:
    history = a_history().request("qr-1", 1000)
    history.then_publish(history.evaluate())
    (started,) = history.tick(1).evaluate()
    assert isinstance(started.event, QuotaSet)
    assert [(line.guaranteed, line.limit) for line in started.event.lines] == [(1000, None)]


def test_a_grant_on_a_line_near_the_largest_amount_an_event_carries_is_held_there() -> None:
    # Found by the consumer fuzz: guaranteed + grant above MAX_SAFE_INT made the QuotaSet invalid and
    # governance's evaluation raise.
    history = a_history().quota("team-a", MAX_SAFE_INT).request("qr-1", 1000)
    history.then_publish(history.evaluate())
    (started,) = history.tick(1).evaluate()
    assert isinstance(started.event, QuotaSet)
    assert [(line.guaranteed, line.limit) for line in started.event.lines] == [(MAX_SAFE_INT, MAX_SAFE_INT)]


def test_a_person_cannot_approve_more_than_asked_nor_decide_twice() -> None:
    request = a_history().request("qr-1", 1000).state().requests["qr-1"].submitted
    with pytest.raises(DecisionError, match="more than"):
        decide(request, approve=True, by="ops", approved_amount=2000)
    with pytest.raises(DecisionError, match="already decided"):
        decide(request, approve=False, by="ops", already_decided=True)
    assert isinstance(decide(request, approve=False, by="ops", comment="no"), QuotaRequestRejected)


def test_settings_come_from_a_document_and_unknown_ones_are_refused() -> None:
    config = from_document(
        {"idle": [{"name": "idle-nb", "idle_after_ms": 60_000}], "abnormal": {"crash_loop_failures": 5}}
    )
    assert config.idle[0].name == "idle-nb" and config.abnormal.crash_loop_failures == 5
    with pytest.raises(ValueError, match="unknown settings"):
        from_document({"lease": {"nope": 1}})


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ({"auto_approve": [{"name": "x", "max_amount": "4000"}]}, "AutoApproveRule.max_amount: must be a whole number"),
        ({"idle": [{"threshold_pct": 120}]}, "IdleRule.threshold_pct: must be from 0 to 100"),
        ({"lease": {"start_lease_ms": -1}}, "LeaseRule.start_lease_ms: must be from 0 up"),
        ({"abnormal": {"crash_loop_failures": True}}, "AbnormalRules.crash_loop_failures: must be a whole number"),
        ({"runtime": [{"name": 7, "kind": "batch", "max_runtime_ms": 1}]}, "RuntimeRule.name: must be a string"),
    ],
)
def test_a_setting_of_the_wrong_kind_or_out_of_range_is_refused_naming_it(document: dict, reason: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=reason):
        from_document(document)


# -- reclamation ---------------------------------------------------------------------------------------

IDLE = GovConfig(idle=(IdleRule(idle_after_ms=20 * MIN, grace_ms=10 * MIN),))


def idle_notebook(minutes_idle: int) -> History:
    history = a_history().submit("nb", kind="notebook").place("nb", at=0).start("nb", at=1).usage("nb", 80, at=5)
    for minute in range(10, 10 + minutes_idle + 1, 5):
        history.usage("nb", 1, at=minute)
    return history


def test_an_idle_notebook_is_warned_then_reclaimed_after_the_grace_period() -> None:
    history = idle_notebook(20)  # idle since minute 5, samples up to minute 30: 25 minutes idle
    warned = history.evaluate(IDLE)
    assert types(warned) == ["JobIdleWarning"]
    warning = warned[0].event
    assert isinstance(warning, JobIdleWarning)
    assert (warning.rule, warning.idle_since_ms, warning.reclaim_at_ms) == (
        "idle-notebook",
        T0 + 5 * MIN,
        T0 + 35 * MIN,
    )
    history.then_publish(warned).usage("nb", 2, at=35)
    reclaimed = history.evaluate(IDLE)
    # The cancel goes first: once the run stops, the scheduler must not place the notebook again (sent
    # after the cluster's JobReclaimed, it came after the notebook was placed and started once more).
    assert types(reclaimed) == ["JobCancelRequested", "JobReclaimRequested", "GovernanceFinding"]
    request = reclaimed[1].event
    assert isinstance(request, JobReclaimRequested) and request.reason is ReasonCode.IDLE_GPU
    figures = {f.name: f.value for f in findings(reclaimed)[0].figures}
    assert figures["idle_ms"] == 30 * MIN and figures["threshold_pct"] == 5
    history.then_publish(reclaimed).reclaimed("nb", at=36)
    assert history.evaluate(IDLE) == [], "its cancel was asked once, with the reclaim"

    # A log written when the cancel came only after the cluster's JobReclaimed: it comes then.
    older = idle_notebook(20).then_publish(warned).usage("nb", 2, at=35).then_publish(reclaimed[1:])
    older.reclaimed("nb", at=36)
    assert types(older.evaluate(IDLE)) == ["JobCancelRequested"], "a reclaimed idle notebook is not placed again"


def test_a_notebook_that_becomes_busy_during_the_grace_period_is_not_reclaimed() -> None:
    history = idle_notebook(20)
    history.then_publish(history.evaluate(IDLE)).usage("nb", 60, at=35)
    assert history.evaluate(IDLE) == []


def test_training_is_not_judged_by_the_notebook_idle_rule() -> None:
    history = a_history().submit("t", kind="training").place("t", at=0).start("t", at=1)
    for minute in range(5, 90, 5):
        history.usage("t", 0, at=minute)
    assert history.evaluate(IDLE) == []


def test_a_job_past_its_kinds_maximum_runtime_is_stopped_with_the_figures() -> None:
    config = GovConfig(runtime=(RuntimeRule("batch-max-2h", "batch", 120 * MIN),))
    history = a_history().submit("b").place("b", at=0).start("b", at=1).tick(100)
    assert history.evaluate(config) == []
    outputs = history.tick(122).evaluate(config)
    assert types(outputs) == ["JobCancelRequested", "GovernanceFinding"]
    assert isinstance(outputs[0].event, JobCancelRequested) and "batch-max-2h" in outputs[0].event.reason
    assert findings(outputs)[0].kind is FindingKind.RUNTIME_EXCEEDED


def test_the_jobs_own_maximum_runtime_is_enforced_too() -> None:
    outputs = a_history().submit("b", max_runtime_s=600).place("b", at=0).start("b", at=1).tick(12).evaluate()
    assert findings(outputs)[0].rule == "job-max-runtime"


def test_a_placement_that_never_started_is_released_after_the_lease() -> None:
    history = a_history().submit("j").place("j", at=0).tick(14)
    assert history.evaluate() == []
    outputs = history.tick(16).evaluate()
    failed = outputs[0].event
    assert isinstance(failed, JobFailed) and failed.reason is ReasonCode.ALLOCATION_LEASE_EXPIRED
    assert {f.name: f.value for f in findings(outputs)[0].figures}["lease_ms"] == 15 * MIN


def test_a_start_read_before_its_placement_still_counts() -> None:
    # The host reads the decisions topic, then the jobs topic: a start can be read before its placement.
    history = a_history().submit("j").start("j", at=1).place("j", at=0.5).tick(30)
    assert history.evaluate() == []
    assert history.state().jobs["j"].runs[1].started_ms is not None


def test_a_run_on_a_lost_node_is_released_after_the_lease() -> None:
    history = a_history().submit("j").place("j", at=0, nodes=("n7",)).start("j", at=1).node_removed("n7", at=5)
    assert history.tick(14).evaluate() == []
    assert types(history.tick(16).evaluate()) == ["JobFailed", "GovernanceFinding"]


# -- abnormal jobs -------------------------------------------------------------------------------------


def test_three_failures_of_one_job_name_within_the_window_are_a_crash_loop_flagged_once() -> None:
    history = a_history()
    for i, minute in enumerate((0, 5, 10, 15)):
        job = f"etl-{i}"
        history.submit(job, name="etl", at=minute).place(job, at=minute).start(job, at=minute).fail(job, at=minute + 1)
    found = findings(history.evaluate())
    crash = [f for f in found if f.kind is FindingKind.CRASH_LOOP]
    assert len(crash) == 1 and crash[0].job_id == "etl-2"
    assert {f.name: f.value for f in crash[0].figures}["failures"] == 3


def test_failures_spread_wider_than_the_window_are_no_crash_loop() -> None:
    history = a_history()
    for i, minute in enumerate((0, 40, 80)):
        job = f"etl-{i}"
        history.submit(job, name="etl", at=minute).place(job, at=minute, nodes=(f"n{i}",)).start(job, at=minute)
        history.fail(job, at=minute + 1, node=f"n{i}")
    assert findings(history.evaluate()) == []


def test_a_job_waiting_past_the_threshold_is_stuck_with_its_last_reasons() -> None:
    history = a_history().submit("big", gpus=64).queue("big", ReasonCode.QUOTA_EXCEEDED, at=1).tick(121)
    (stuck,) = findings(history.evaluate())
    assert stuck.kind is FindingKind.STUCK_PENDING and "QuotaExceeded" in stuck.message


def test_distinct_jobs_failing_right_after_starting_on_one_node_make_it_suspect() -> None:
    history = a_history()
    for i in range(3):
        job = f"j{i}"
        history.submit(job, name=job, at=i).place(job, at=i, nodes=("bad",)).start(job, at=i + 0.5)
        history.fail(job, at=i + 1, node="bad")
    (suspect,) = findings(history.evaluate())
    assert suspect.kind is FindingKind.SUSPECT_NODE and suspect.node == "bad"
    assert suspect.profile_penalty_milli == 300 and suspect.tenant is None


def test_one_workload_crash_looping_on_a_node_blames_the_workload_not_the_node() -> None:
    history = a_history()
    for i in range(3):
        job = f"j{i}"
        history.submit(job, name="same-etl", at=i).place(job, at=i, nodes=("n1",)).start(job, at=i + 0.5)
        history.fail(job, at=i + 1, node="n1")
    assert [f.kind for f in findings(history.evaluate())] == [FindingKind.CRASH_LOOP]


def test_a_gang_with_one_replica_far_slower_than_the_others_straggles() -> None:
    history = a_history().submit("g", kind="training", gang=True, replicas=2).place("g", at=0, nodes=("a", "b"))
    history.start("g", at=1).usage("g", 90, at=10, node="a").usage("g", 20, at=10, node="b")
    (straggler,) = findings(history.evaluate())
    assert straggler.kind is FindingKind.STRAGGLING_GANG and straggler.node == "b"
    balanced = a_history().submit("g", kind="training", gang=True, replicas=2).place("g", at=0, nodes=("a", "b"))
    balanced.start("g", at=1).usage("g", 90, at=10, node="a").usage("g", 80, at=10, node="b")
    assert findings(balanced.evaluate()) == []


def test_the_same_history_gives_the_same_outputs_and_published_ones_are_not_repeated() -> None:
    history = idle_notebook(40).submit("big", gpus=64, at=0).tick(200)
    first = history.evaluate(IDLE)
    assert [o.id for o in first] == [o.id for o in history.evaluate(IDLE)]
    assert history.then_publish(first).evaluate(IDLE) == []
    assert replace(IDLE) == IDLE


def test_the_public_names_of_the_package_are_pinned_and_pure() -> None:
    import subprocess
    import sys

    import services.governance as governance

    assert sorted(governance.__all__) == [
        "AutoApproveRule",
        "DecisionError",
        "GovConfig",
        "GovState",
        "IdleRule",
        "LeaseRule",
        "Output",
        "RuntimeRule",
        "SOURCE",
        "auto_decide",
        "decide",
        "effective_lines",
        "evaluate",
        "from_document",
    ]
    assert all(getattr(governance, name) is not None for name in governance.__all__)
    probe = "import sys, services.governance; print(sorted({'asyncpg', 'aiokafka', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30)
    assert out.stdout.strip() == "[]", "importing the package pulls in no I/O library"
