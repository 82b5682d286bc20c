"""GPU-hour budgets in a simulation: the calendar's window at the simulated time, the GPU time simulated
runs hold, each cycle's hard budgets, and what each budget's windows used and held back.

Called by the timed simulator (``services.scheduler.sim.timed``) and ``audit whatif``
(``services.audit.whatif``), which say when time moves on (``advance``), when a run starts and ends and
what each cycle decided. Calls the live state's count (``state.budget_count.hard_budgets``: one count, so
a simulation and the scheduler can never disagree on what a budget has left), the calendar
(``window_at``) and the cycle's ``BudgetBook``. Pure: each zone's rules come in as ``offsets``.

No governance runs in a simulation: a budget's window is the one the calendar puts the simulated time in
(governance opens that window as the log's time enters it). A hard budget is in every cycle's snapshot,
counted from the runs that ended (a ``HeldLedger``) and the running ones, each placed when it started
and each replica added to it (an elastic top-up, ``grew``) counted from when it was added, as the live
state counts them.
Of every budget, hard or soft, each window reports the GPU time its tenants held in it and when that
crossed 80% and 100% of the budget (to the millisecond: what is held is constant between two moments of
a simulation); of a hard one, too, the jobs it held back (the core's reason ``BudgetExceeded``: every hard
budget of the job's tenant without its need left after the cycle's placements) and for how long.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from events.catalog.budget_windows import DAY_MS, HeldLedger, OffsetAt, Window, window_at
from events.catalog.documents import BudgetMode, BudgetSpec
from services.scheduler.core.policy import CycleResult, Place, Queue, ReasonCode
from services.scheduler.core.policy import model as m
from services.scheduler.core.policy.budgets import BudgetBook
from services.scheduler.core.simulated_budget_report import WindowUse, report_of
from services.scheduler.core.state.budget_count import Holdings, budget_tenants, hard_budgets


def _gpu_milli(run: m.RunningJob) -> int:
    return sum(len(r.gpu_indices) * r.gpu_milli_each for r in run.placements)


def _placed_when_started(run: m.RunningJob) -> int:
    return run.started_at_ms


@dataclass(slots=True)
class SimulatedBudgets:
    """The budgets of one simulation (``of``); false when there are none, and then every call is cheap."""

    specs: dict[str, BudgetSpec]
    cohorts: dict[str, str | None]
    """tenant -> its cohort (a cohort's budget counts its members)."""
    offsets: dict[str, OffsetAt]
    """budget -> its zone's rules."""
    config: m.PolicyConfig
    members: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """budget -> the tenants it counts."""
    counted: set[str] = field(default_factory=set)
    """The tenants of hard budgets: the runs of these the ledger keeps."""
    ledger: HeldLedger = field(default_factory=HeldLedger)
    rate: dict[str, int] = field(default_factory=dict)
    """tenant (of some budget) -> the milli-GPU its running jobs hold now."""
    now_ms: int | None = None
    windows: dict[tuple[str, str], WindowUse] = field(default_factory=dict)
    """(budget, window label) -> what the window used and held back."""
    holds: dict[tuple[str, str], tuple[Window, int]] = field(default_factory=dict)
    """(budget, job) held back now -> in which window, since when."""
    held_jobs: set[str] = field(default_factory=set)
    """Every job a hard budget held back at least once."""
    grown: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """job -> the replicas added to its running run: (when, milli-GPU), in order."""
    _current: dict[str, Window] = field(default_factory=dict)
    _pruned_ms: int = 0

    @classmethod
    def of(
        cls,
        specs: Mapping[str, BudgetSpec],
        cohorts: Mapping[str, str | None],
        offsets: Callable[[str], OffsetAt],
        config: m.PolicyConfig,
    ) -> SimulatedBudgets:
        """``offsets(zone)`` raises ``ValueError`` for a zone it does not know."""
        zones = {name: offsets(spec.timezone) for name, spec in specs.items()}
        members = {name: budget_tenants(spec, cohorts) for name, spec in specs.items()}
        hard = {t for name, spec in specs.items() if spec.mode is BudgetMode.HARD for t in members[name]}
        rate = {t: 0 for tenants in members.values() for t in tenants}
        return cls(dict(sorted(specs.items())), dict(cohorts), zones, config, members, hard, rate=rate)

    def __bool__(self) -> bool:
        return bool(self.specs)

    def window(self, name: str, at_ms: int) -> Window:
        """The window of budget ``name`` the calendar puts ``at_ms`` in."""
        current = self._current.get(name)
        if current is None or not current.start_ms <= at_ms < current.end_ms:
            current = self._current[name] = window_at(self.specs[name].window, at_ms, self.offsets[name])
        return current

    def advance(self, to_ms: int) -> None:
        """Time moves on to ``to_ms``: each budget's windows used what its tenants held meanwhile."""
        since, self.now_ms = self.now_ms, to_ms
        for name in self.specs:
            rate = sum(self.rate.get(t, 0) for t in self.members[name])
            at = to_ms if since is None else since
            while rate and at < to_ms:
                window = self.window(name, at)
                end = min(to_ms, window.end_ms)
                self._use(name, window).hold(rate, at, end)
                at = end
        if to_ms - self._pruned_ms > DAY_MS:
            self.ledger.forget_before(to_ms)
            self._pruned_ms = to_ms

    def started(self, run: m.RunningJob) -> None:
        tenant = run.job.tenant
        if tenant in self.rate:
            self.rate[tenant] += _gpu_milli(run)

    def grew(self, run: m.RunningJob, replicas: tuple[m.ReplicaPlacement, ...], at_ms: int) -> None:
        """``replicas`` were added to ``run`` at ``at_ms`` (the run as it stood before)."""
        tenant = run.job.tenant
        if tenant not in self.rate:
            return
        milli = sum(len(r.gpu_indices) * r.gpu_milli_each for r in replicas)
        self.rate[tenant] += milli
        self.grown.setdefault(run.job.job_id, []).append((at_ms, milli))

    def ended(self, run: m.RunningJob, at_ms: int) -> None:
        """A run ended (or was stopped) at ``at_ms``, having held its first replicas' GPUs since it
        started and each added replica's since it was added."""
        tenant = run.job.tenant
        grown = self.grown.pop(run.job.job_id, [])
        if tenant not in self.rate:
            return
        gpu = _gpu_milli(run)
        self.rate[tenant] -= gpu
        if tenant in self.counted:
            added = sum(milli for _, milli in grown)
            self.ledger.add(tenant, gpu - added, run.started_at_ms, at_ms)
            for since_ms, milli in grown:
                self.ledger.add(tenant, milli, since_ms, at_ms)

    def in_force(self, now_ms: int, running: Collection[m.RunningJob]) -> tuple[m.Budget, ...]:
        """The snapshot's hard budgets at ``now_ms``: what the live state would give with these runs."""
        if not self.counted:
            return ()
        holdings = Holdings(self.ledger, running, _placed_when_started, self._grown_of)
        return hard_budgets(
            self.specs, lambda name, _: self.window(name, now_ms), self.cohorts, holdings, now_ms, self.config
        )

    def _grown_of(self, run: m.RunningJob) -> tuple[tuple[int, int], ...]:
        return tuple(self.grown.get(run.job.job_id, ()))

    def decided(self, budgets: tuple[m.Budget, ...], result: CycleResult, waiting: Collection[m.Job]) -> None:
        """What the cycle at ``result.now_ms`` decided on the jobs ``waiting`` for it under ``budgets``."""
        if not budgets and not self.holds:
            return
        now = result.now_ms
        pending = {job.job_id: job for job in waiting}
        held = self._held_back(budgets, result, pending) if budgets else set()
        placed = {d.job_id for d in result.decisions if isinstance(d, Place)}
        queued = {d.job_id for d in result.decisions if isinstance(d, Queue)}
        for key, (window, since) in list(self.holds.items()):
            name, job_id = key
            moved_on = now >= window.end_ms  # held again in the next window, if at all
            if job_id in placed or job_id not in pending or (job_id in queued and key not in held) or moved_on:
                del self.holds[key]
                self._use(name, window).release(job_id, since, min(now, window.end_ms), job_id in placed)
        for key in sorted(held - self.holds.keys()):
            self.holds[key] = (self.window(key[0], now), now)
            self.held_jobs.add(key[1])

    def withdrawn(self, job_id: str, at_ms: int) -> None:
        """The job left the queue without starting (cancelled): no budget holds it back any more."""
        for key, (window, since) in list(self.holds.items()):
            if key[1] == job_id:
                del self.holds[key]
                self._use(key[0], window).release(job_id, since, min(at_ms, window.end_ms), False)

    def next_opening(self, now_ms: int) -> int | None:
        """When the next window opens of a budget that holds a job back now (then it may start)."""
        return min((window.end_ms for window, _ in self.holds.values() if window.end_ms > now_ms), default=None)

    def report(self, end_ms: int, unit_ms: int = 1000) -> list[dict[str, object]]:
        """Per budget and window, in order: see ``simulated_budget_report``. Jobs still held back at
        ``end_ms`` are reported held until then (``until`` none)."""
        self.advance(end_ms)
        for (name, job_id), (window, since) in sorted(self.holds.items()):
            self._use(name, window).release(job_id, since, end_ms, False, still=True)
        self.holds = {}
        return report_of(self.specs, self.cohorts, self.windows, unit_ms)

    def _use(self, name: str, window: Window) -> WindowUse:
        use = self.windows.get((name, window.label))
        if use is None:
            limit = self.specs[name].gpu_hours
            use = self.windows[(name, window.label)] = WindowUse(window, limit)
        return use

    def _held_back(
        self, budgets: tuple[m.Budget, ...], result: CycleResult, pending: Mapping[m.JobId, m.Job]
    ) -> set[tuple[str, str]]:
        """(budget, job) for each job waiting with ``BudgetExceeded`` and each hard budget of its tenant
        that has not the job's need left once the cycle's placements are charged (the one its reason
        names is among them: charges only take from what is left)."""
        book = BudgetBook.of(budgets, result.now_ms, self.config)
        for d in result.decisions:
            if isinstance(d, Place) and d.job_id in pending:
                book.charge(replace(pending[d.job_id], replicas=len(d.replicas)))
        out: set[tuple[str, str]] = set()
        for d in result.decisions:
            if isinstance(d, Queue) and d.binding is ReasonCode.BUDGET_EXCEEDED and d.job_id in pending:
                job = pending[d.job_id]
                out.update(
                    (b.name, job.job_id)
                    for b in book.of_tenant.get(job.tenant, ())
                    if book.need(job, b) > book.left[b.name]
                )
        return out


__all__ = ["SimulatedBudgets"]
