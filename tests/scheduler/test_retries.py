"""Retries after a failed run (issue 21, item 5): the rule, the budget per priority class, the backoff,
the workload's own failures retried only when the job asked, the words; and through the scheduler's
state, one verdict per failed run that every later cycle follows (the job waits out its backoff, runs
again as the next run, or ends failed)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from events.catalog.decisions import FailureKind, JobPlaced, JobRetriesExhausted, JobRetryScheduled
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobFailed, JobStarted, PriorityClass, RetrySpec
from events.catalog.lifecycle import JobStatus
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId
from events.wire.envelope import Envelope
from services.scheduler.core.decide import decide
from services.scheduler.core.policy import schedule
from services.scheduler.core.policy.decisions import GiveUp, Retry
from services.scheduler.core.policy.model import FailedRun, PolicyConfig, RetryRules
from services.scheduler.core.policy.retries import backoff_ms, verdicts
from services.scheduler.core.state import SchedulerState
from services.scheduler.core.state.policy_document import policy_from_document
from tests.scheduler.builders import a_job, snapshot
from tests.unit.projections.builders import a_job as submitted
from tests.unit.projections.builders import a_node, placed

pytestmark = pytest.mark.timeout(30)

T0 = 1_800_000_000_000
SEC = 1000


def failed_run(
    priority: PriorityClass = PriorityClass.CRITICAL_TRAINING,
    *,
    used: int = 0,
    infrastructure: bool = True,
    failure: str = "NodeFailure",
    asked: int = 0,
    node: str | None = "c1/n-17",
) -> FailedRun:
    job = replace(a_job("train").priority(priority).gpus(8).build(), application_retries=asked)
    return FailedRun(job, 1 + used, ClusterId("c1"), node, failure, infrastructure, T0, used)


def only(config: PolicyConfig | None = None, **kw: object) -> Retry | GiveUp:
    (verdict,) = verdicts([failed_run(**kw)], config or PolicyConfig())  # type: ignore[arg-type]
    return verdict


# -- the rule ---------------------------------------------------------------------------------------


def test_a_node_lost_under_critical_training_is_retried_first_of_three_after_its_backoff() -> None:
    verdict = only()
    assert isinstance(verdict, Retry)
    assert (verdict.attempt, verdict.allowed, verdict.not_before_ms) == (1, 3, T0 + 30 * SEC)
    assert verdict.message.startswith("retry 1 of 3 after node c1/n-17 failed (run 1 on c1)")


@pytest.mark.parametrize(
    ("failure", "words"),
    [("GpuFailure", "a GPU of node c1/n-17 failed"), ("NpuFailure", "an NPU of node c1/n-17 failed")],
)
def test_a_failed_gpu_or_npu_is_the_infrastructures_failure_and_retried_saying_which(failure: str, words: str) -> None:
    verdict = only(failure=failure)
    assert isinstance(verdict, Retry) and verdict.infrastructure
    assert verdict.message.startswith(f"retry 1 of 3 after {words} (run 1 on c1)")
    given_up = only(failure=failure, used=3)
    assert isinstance(given_up, GiveUp) and given_up.message.startswith(f"not retried after {words} (run 4 on c1)")


def test_the_retries_of_a_class_are_a_budget_once_spent_the_job_ends_failed_saying_so() -> None:
    assert isinstance(only(used=2), Retry) and only(used=2).attempt == 3  # type: ignore[union-attr]
    verdict = only(used=3)
    assert isinstance(verdict, GiveUp)
    assert (verdict.used, verdict.allowed) == (3, 3)
    assert "the 3 retries critical_training jobs get after infrastructure failures are used" in verdict.message
    assert verdict.message.endswith("the job failed")


def test_each_class_has_its_own_budget_and_the_policy_sets_them() -> None:
    assert only(priority=PriorityClass.PRODUCTION_INFERENCE, used=9).allowed == 10
    assert isinstance(only(priority=PriorityClass.BEST_EFFORT, used=1), GiveUp)
    none_for_best_effort = PolicyConfig(retry_classes=((PriorityClass.BEST_EFFORT, RetryRules(0, 10, 10)),))
    verdict = only(none_for_best_effort, priority=PriorityClass.BEST_EFFORT)
    assert isinstance(verdict, GiveUp)
    assert "best_effort jobs get no retry after an infrastructure failure" in verdict.message
    # A class the policy leaves out keeps its own defaults, not another class's.
    assert only(none_for_best_effort).allowed == 3


def test_the_backoff_doubles_with_each_retry_up_to_the_class_cap() -> None:
    rules = RetryRules(max_retries=9, backoff_s=30, max_backoff_s=200)
    assert [backoff_ms(rules, n) // SEC for n in range(1, 6)] == [30, 60, 120, 200, 200]
    assert backoff_ms(rules, 10_000) == 200 * SEC  # no overflow however many
    assert only(used=2).not_before_ms == T0 + 120 * SEC  # type: ignore[union-attr]


def test_the_backoff_runs_from_the_failure_in_the_log_not_from_the_cycle() -> None:
    early = schedule(replace(snapshot([], [], [], now_ms=T0 + SEC), failed=(failed_run(),)))
    late = schedule(replace(snapshot([], [], [], now_ms=T0 + 3_600 * SEC), failed=(failed_run(),)))
    assert early.decisions == late.decisions


def test_a_failure_of_the_workload_is_retried_only_as_often_as_the_job_asked() -> None:
    asked_none = only(infrastructure=False, failure="NonZeroExit")
    assert isinstance(asked_none, GiveUp) and "it asked for no retries" in asked_none.message
    asked_two = only(infrastructure=False, failure="NonZeroExit", asked=2, used=1)
    assert isinstance(asked_two, Retry) and (asked_two.attempt, asked_two.allowed) == (2, 2)
    assert "after the workload failed" in asked_two.message
    spent = only(infrastructure=False, failure="OutOfMemory", asked=2, used=2)
    assert isinstance(spent, GiveUp) and "the 2 retries it asked for are used" in spent.message


def test_verdicts_come_first_in_job_order_whatever_order_the_runs_are_given() -> None:
    runs = [replace(failed_run(), job=replace(failed_run().job, job_id=name)) for name in ("b", "c", "a")]  # type: ignore[arg-type]
    assert [v.job_id for v in verdicts(runs, PolicyConfig())] == ["a", "b", "c"]
    result = schedule(replace(snapshot([], [a_job("q").gpus(1).build()], [], now_ms=T0), failed=tuple(runs)))
    assert [d.kind for d in result.decisions] == ["retry", "retry", "retry", "queue"]


# -- the policy document ----------------------------------------------------------------------------


def test_the_policy_document_sets_a_class_retry_rules_in_part_keeping_its_defaults() -> None:
    config = policy_from_document("p1", {"retry_classes": {"critical_training": {"max_retries": 5}}})
    assert config.retry_rules_for(PriorityClass.CRITICAL_TRAINING) == RetryRules(5, 30, 600)
    assert config.retry_rules_for(PriorityClass.STANDARD) == RetryRules(2, 60, 900)


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"gold": {"max_retries": 1}}, "unknown priority class 'gold'"),
        ({"standard": {"retries": 1}}, "unknown rule 'retries'"),
        ({"standard": {"max_retries": -1}}, "rule max_retries must be a whole number from 0 to 100"),
        ({"standard": {"backoff_s": 1000}}, "class standard has a backoff_s of 1000, more than its max_backoff_s"),
    ],
)
def test_bad_retry_rules_are_refused_naming_the_class_and_the_rule(given: object, words: str) -> None:
    with pytest.raises(ValueError, match="setting retry_classes") as refused:
        policy_from_document("p1", {"retry_classes": given})
    assert words in str(refused.value)


# -- through the scheduler's state ------------------------------------------------------------------


class Log:
    """A scheduler state fed events in log order at growing times, and its cycles' decisions folded back."""

    def __init__(self, *events: object) -> None:
        self.state = SchedulerState(keep_settled=True)
        self.n = 0
        registered = ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR")
        self.add(registered, a_node(node="n1", gpus=8), a_node(node="n2", gpus=8), *events)

    def add(self, *events: object, at: int | None = None) -> None:
        for event in events:
            self.n += 1
            self.state.fold(Envelope(id=f"e{self.n}", time_ms=at if at is not None else T0 + self.n, data=event))  # type: ignore[arg-type]

    def cycle(self, now_ms: int) -> list[object]:
        decided = decide(self.state, now_ms)
        for envelope in decided.events:
            self.state.fold(envelope)
        return [e.data for e in decided.events]


def critical(job_id: str = "train", **retry: int) -> object:
    job = submitted(job_id, gpus=8).model_copy(update={"priority_class": PriorityClass.CRITICAL_TRAINING})
    return job.model_copy(update={"retry": RetrySpec(**retry)}) if retry else job


def lost(job_id: str = "train", run: int = 1, node: str = "n1", reason: ReasonCode = ReasonCode.NODE_FAILURE):  # type: ignore[no-untyped-def]
    return JobFailed(job_id=job_id, cluster="c1", run=run, reason=reason, node=node, message=f"node {node} was lost")


def test_a_lost_node_sends_the_job_back_after_its_backoff_and_it_runs_again_as_the_next_run() -> None:
    log = Log(critical(), placed("train", "n1", tuple(range(8))), JobStarted(job_id="train", cluster="c1"))
    log.add(lost(), at=T0 + 100 * SEC)
    facts = log.state.jobs["train"]
    assert facts.terminal is None and not facts.pending() and facts.awaiting_verdict() == 1

    (verdict,) = log.cycle(T0 + 101 * SEC)
    assert isinstance(verdict, JobRetryScheduled)
    assert (verdict.run, verdict.attempt, verdict.allowed, verdict.kind) == (1, 1, 3, FailureKind.INFRASTRUCTURE)
    assert (verdict.node, verdict.failure, verdict.not_before_ms) == ("n1", ReasonCode.NODE_FAILURE, T0 + 130 * SEC)
    assert verdict.message.startswith("retry 1 of 3 after node n1 failed")

    assert log.cycle(T0 + 129 * SEC) == []  # in its backoff: not in the queue, nothing said again
    (again,) = log.cycle(T0 + 130 * SEC)
    assert isinstance(again, JobPlaced) and again.run == 2


def test_the_budget_counts_every_retry_and_the_last_failure_ends_the_job() -> None:
    log = Log(critical(), placed("train", "n1", tuple(range(8))))
    now = T0 + 10 * SEC
    for run in range(1, 5):
        log.add(lost(run=run), at=now)
        decided = log.cycle(now + SEC)
        if run <= 3:
            assert [type(d) for d in decided] == [JobRetryScheduled]
            now = decided[0].not_before_ms  # type: ignore[attr-defined]
            (replaced,) = log.cycle(now)
            assert isinstance(replaced, JobPlaced) and replaced.run == run + 1
    (last,) = decided
    assert isinstance(last, JobRetriesExhausted) and (last.used, last.allowed, last.run) == (3, 3, 4)
    assert log.state.jobs["train"].terminal is JobStatus.FAILED and log.state.jobs["train"].settled()
    assert log.cycle(now + 3_600 * SEC) == []


def test_a_failure_of_the_workload_ends_the_job_at_once_unless_it_asked_for_retries() -> None:
    crashed = lost(reason=ReasonCode.NON_ZERO_EXIT)
    plain = Log(critical(), placed("train", "n1", tuple(range(8))), crashed)
    assert plain.state.jobs["train"].terminal is JobStatus.FAILED
    assert plain.cycle(T0 + 60 * SEC) == []
    # Folded before its submission (two topics, no order between them): the same once it is.
    early = Log(placed("train", "n1", tuple(range(8))), crashed, critical())
    assert early.state.jobs["train"].terminal is JobStatus.FAILED

    asking = Log(critical(on_application_failure=1), placed("train", "n1", tuple(range(8))), crashed)
    (verdict,) = asking.cycle(T0 + 60 * SEC)
    assert isinstance(verdict, JobRetryScheduled) and verdict.kind is FailureKind.APPLICATION


def test_a_failure_the_job_is_never_retried_for_ends_it_as_before() -> None:
    log = Log(critical(), placed("train", "n1", tuple(range(8))), lost(reason=ReasonCode.RUNTIME_EXCEEDED))
    assert log.state.jobs["train"].terminal is JobStatus.FAILED and log.cycle(T0 + 60 * SEC) == []


def test_a_job_cancelled_while_it_awaits_its_verdict_is_cancelled_not_retried() -> None:
    from events.catalog.jobs import JobCancelRequested

    log = Log(critical(), placed("train", "n1", tuple(range(8))), lost())
    log.add(JobCancelRequested(job_id="train", requester="alice"))
    decided = log.cycle(T0 + 60 * SEC)
    assert [type(d).__name__ for d in decided] == ["JobCancelled"]
