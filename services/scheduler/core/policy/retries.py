"""The retry rule: the scheduler's verdict on each run that failed for a cause that may be retried.

Called by ``cycle.schedule`` (step 0 of a cycle, before the queue is ordered), so the live scheduler,
``audit verify``, ``audit whatif`` and the simulator give the same verdicts. Pure: the snapshot's
``failed`` runs, the policy's ``retry_classes`` and the cycle's logical time in, ``Retry`` and ``GiveUp``
decisions out, by job id.

The budget depends on whose failure it was. The infrastructure's (``FailedRun.infrastructure``: a node
failed, was lost or removed, a GPU failed, an eviction) is not the job's fault: it is retried up to the
policy's ``max_retries`` for the job's priority class. The workload's own (a non-zero exit, out of
memory) is retried only as often as the job asked (``Job.application_retries``). The two are counted
apart: a job that asked for two retries of its own failures still gets its class's retries after node
losses. Retry n of a kind waits ``backoff_s * 2**(n-1)`` seconds (at most ``max_backoff_s``, the job's
class's) after the failure's time in the log (not the cycle's), so the verdict does not depend on when a
cycle ran, and a workload that keeps crashing is retried ever more slowly.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.scheduler.core.policy.decisions import GiveUp, Retry
from services.scheduler.core.policy.model import FailedRun, PolicyConfig, RetryRules
from services.scheduler.core.policy.reasons import ReasonCode

MAX_BACKOFF_DOUBLINGS = 30
"""Doublings of the backoff counted at most (the cap applies long before; keeps the integer small)."""


def backoff_ms(rules: RetryRules, attempt: int) -> int:
    """How long retry ``attempt`` (1 for the first) waits after its failure, in milliseconds."""
    doublings = min(max(0, attempt - 1), MAX_BACKOFF_DOUBLINGS)
    return min(rules.backoff_s << doublings, rules.max_backoff_s) * 1000


def verdicts(failed: Sequence[FailedRun], config: PolicyConfig) -> list[Retry | GiveUp]:
    """The verdict on each failed run, in job id order."""
    return [_verdict(f, config) for f in sorted(failed, key=lambda f: (f.job.job_id, f.run))]


def _verdict(f: FailedRun, config: PolicyConfig) -> Retry | GiveUp:
    job = f.job
    rules = config.retry_rules_for(job.priority_class)
    allowed = rules.max_retries if f.infrastructure else job.application_retries
    failure = ReasonCode(f.failure)
    cause = failure_words(failure, f.node)
    if f.retries_used < allowed:
        attempt = f.retries_used + 1
        wait = backoff_ms(rules, attempt)
        message = (
            f"retry {attempt} of {allowed} after {cause} (run {f.run} on {f.cluster}); back in the queue "
            f"{wait // 1000} s after the failure"
        )
        return Retry(
            job.job_id, job.tenant, f.run, f.cluster, f.node, failure, f.infrastructure, attempt, allowed,
            f.failed_at_ms + wait, message,
        )  # fmt: skip
    if f.infrastructure:
        budget = (
            f"{job.priority_class.value} jobs get no retry after an infrastructure failure"
            if allowed == 0
            else f"the {allowed} retries {job.priority_class.value} jobs get after infrastructure failures are used"
        )
    else:
        budget = f"the {allowed} retries it asked for are used" if allowed else "it asked for no retries"
    message = f"not retried after {cause} (run {f.run} on {f.cluster}): {budget}; the job failed"
    return GiveUp(
        job.job_id, job.tenant, f.run, f.cluster, f.node, failure, f.infrastructure, f.retries_used, allowed, message
    )


_WORDS = {
    ReasonCode.NODE_FAILURE: "node {node} failed",
    ReasonCode.NODE_LOST: "node {node} was lost",
    ReasonCode.NODE_DELETED: "node {node} was removed",
    ReasonCode.GPU_FAILURE: "a GPU of node {node} failed",
    ReasonCode.NPU_FAILURE: "an NPU of node {node} failed",
    ReasonCode.NON_ZERO_EXIT: "the workload failed",
    ReasonCode.OUT_OF_MEMORY: "the workload ran out of memory",
}


def failure_words(failure: ReasonCode, node: str | None) -> str:
    """The failure in plain words (``node n-17 was lost``)."""
    words = _WORDS.get(failure, f"a failure ({failure.value})")
    return words.format(node=node) if node else words.replace(" {node}", "").replace("node", "its node")


__all__ = ["backoff_ms", "failure_words", "verdicts"]
