"""Hard GPU-hour budgets within one cycle: what each has left, what a job is expected to take of it, and
the charge as jobs are placed.

Called by the cycle (``_context`` makes the book from the snapshot's budgets) and by the job steps
(``within_budget`` asks it, ``_place`` charges it). Pure.

A job's need of a budget is its GPUs (milli-GPU, all replicas) times the part of its expected runtime
that falls within the budget's window from now: a job that would run past the window's end takes only
the rest of this window. The expected runtime is the job's ``expected_runtime``, else its
``max_runtime``, else the policy's ``default_runtime_s`` (the rule for a job that gives no estimate).
A job starts only if every hard budget of its tenant (its own, its cohort's) has its need left. A
window that has ended before the next was opened has nothing left: jobs wait for the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events.catalog.budget_windows import gpu_hours
from services.scheduler.core.policy.model import Budget, Job, PolicyConfig, TenantId


def expected_runtime_ms(job: Job, config: PolicyConfig) -> int:
    return (job.expected_runtime_s or job.max_runtime_s or config.default_runtime_s) * 1000


@dataclass(frozen=True, slots=True)
class Refusal:
    budget: Budget
    left_milli_ms: int
    need_milli_ms: int

    def message(self, job: Job, now_ms: int) -> str:
        if now_ms >= self.budget.window_end_ms:
            return (
                f"budget {self.budget.name}'s window {self.budget.window} has ended and the next is not open"
                f" yet (governance opens it); {job.job_id} waits for it"
            )
        left = max(0, self.left_milli_ms)
        return (
            f"budget {self.budget.name} ({self.budget.window}) has {gpu_hours(left)} GPU-hours left of "
            f"{gpu_hours(self.budget.limit_milli_ms)}; {job.job_id} is expected to need {gpu_hours(self.need_milli_ms)}"
            f" ({job.total_gpu_milli() / 1000:g} GPUs until its expected end or the window's); it waits for the"
            " budget's next window or for running jobs to use less than expected"
        )


@dataclass(slots=True)
class BudgetBook:
    now_ms: int
    config: PolicyConfig
    left: dict[str, int] = field(default_factory=dict)
    of_tenant: dict[TenantId, list[Budget]] = field(default_factory=dict)

    @classmethod
    def of(cls, budgets: tuple[Budget, ...], now_ms: int, config: PolicyConfig) -> BudgetBook:
        book = cls(now_ms, config)
        for budget in budgets:
            ended = now_ms >= budget.window_end_ms
            book.left[budget.name] = 0 if ended else budget.limit_milli_ms - budget.spent_milli_ms
            for tenant in budget.tenants:
                book.of_tenant.setdefault(tenant, []).append(budget)
        return book

    def need(self, job: Job, budget: Budget) -> int:
        runtime = expected_runtime_ms(job, self.config)
        if self.now_ms >= budget.window_end_ms:  # over, and the next not opened yet: all of it, nothing left
            return job.total_gpu_milli() * runtime
        return job.total_gpu_milli() * min(runtime, budget.window_end_ms - self.now_ms)

    def refusal(self, job: Job) -> Refusal | None:
        """The first budget (by name) that has not the job's need left; None when every one has."""
        for budget in self.of_tenant.get(job.tenant, ()):
            need, left = self.need(job, budget), self.left[budget.name]
            if need > left:
                return Refusal(budget, left, need)
        return None

    def charge(self, job: Job) -> None:
        for budget in self.of_tenant.get(job.tenant, ()):
            self.left[budget.name] -= self.need(job, budget)


__all__ = ["BudgetBook", "Refusal", "expected_runtime_ms"]
