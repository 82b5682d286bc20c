"""What a simulation reports of a budget's window: the GPU time it used, when that crossed 80% and 100%,
and the jobs it held back and for how long.

Called by ``services.scheduler.core.simulated_budgets`` (which fills each ``WindowUse`` as the simulation
runs and asks ``report_of`` at its end). Pure. Integer milli-GPU x ms throughout; the report's figures are
GPU-hours and seconds (``unit_ms``) of the simulation's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from events.catalog.budget_windows import MILLI_MS_PER_GPU_HOUR, Window
from events.catalog.documents import BudgetSpec
from services.scheduler.core.state.budget_count import budget_tenants

THRESHOLDS_PCT = (80, 100)
"""Where governance raises a soft budget's findings; a simulation says when each was crossed."""
LISTED = 50
"""Held-back jobs a window lists at most (in the order they were held); all are counted."""


@dataclass(frozen=True, slots=True)
class Hold:
    """A job a hard budget held back in one window: from, until (``None``: still held at the simulation's
    end, which ``counted_to_ms`` is) and whether it started then."""

    job: str
    from_ms: int
    until_ms: int | None
    started: bool
    counted_to_ms: int


@dataclass(slots=True)
class WindowUse:
    window: Window
    gpu_hours: int
    used: int = 0
    """milli-GPU x ms held in the window by the budget's tenants."""
    crossed: dict[int, int] = field(default_factory=dict)
    """Threshold (%) -> the moment the window's use reached it."""
    holds: list[Hold] = field(default_factory=list)

    def hold(self, rate_milli: int, from_ms: int, to_ms: int) -> None:
        """``rate_milli`` held over ``[from_ms, to_ms)`` (within the window)."""
        before = self.used
        self.used += rate_milli * (to_ms - from_ms)
        limit = self.gpu_hours * MILLI_MS_PER_GPU_HOUR
        for pct in THRESHOLDS_PCT:
            reach = -(-limit * pct // 100)  # used * 100 >= limit * pct, as governance counts it
            if pct not in self.crossed and before < reach <= self.used:
                self.crossed[pct] = from_ms + -(-(reach - before) // rate_milli)

    def release(self, job: str, from_ms: int, until_ms: int, started: bool, *, still: bool = False) -> None:
        self.holds.append(Hold(job, from_ms, None if still else until_ms, started, until_ms))


def report_of(
    specs: Mapping[str, BudgetSpec],
    cohorts: Mapping[str, str | None],
    windows: Mapping[tuple[str, str], WindowUse],
    unit_ms: int,
) -> list[dict[str, object]]:
    """One entry per budget and window that used GPU time or held a job back, by budget then window."""
    out: list[dict[str, object]] = []
    for (name, _), use in sorted(windows.items(), key=lambda item: (item[0][0], item[1].window.start_ms)):
        spec = specs[name]
        holds = sorted(use.holds, key=lambda h: (h.from_ms, h.job))
        held = [h.counted_to_ms - h.from_ms for h in holds]
        limit = spec.gpu_hours * MILLI_MS_PER_GPU_HOUR
        out.append(
            {
                "budget": name,
                "mode": spec.mode.value,
                "tenants": list(budget_tenants(spec, cohorts)),
                "window": use.window.label,
                "start_s": use.window.start_ms / unit_ms,
                "end_s": use.window.end_ms / unit_ms,
                "limit_gpu_hours": spec.gpu_hours,
                "used_gpu_hours": round(use.used / MILLI_MS_PER_GPU_HOUR, 2),
                "used_pct": use.used * 100 // limit,
                **{f"crossed_{pct}_s": _at(use.crossed.get(pct), unit_ms) for pct in THRESHOLDS_PCT},
                "jobs_held": len({h.job for h in holds}),
                "held_s": sum(held) / unit_ms,
                "longest_held_s": max(held, default=0) / unit_ms,
                "held": [
                    {
                        "job": h.job,
                        "from_s": h.from_ms / unit_ms,
                        "until_s": _at(h.until_ms, unit_ms),
                        "started": h.started,
                    }
                    for h in holds[:LISTED]
                ],
            }
        )
    return out


def _at(moment_ms: int | None, unit_ms: int) -> float | None:
    return None if moment_ms is None else moment_ms / unit_ms


__all__ = ["LISTED", "THRESHOLDS_PCT", "Hold", "WindowUse", "report_of"]
