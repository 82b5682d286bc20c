"""The calendar windows of GPU-hour budgets, and the GPU time a run holds within one.

Called by governance (which opens each budget's window as the log's time enters it:
``BudgetWindowOpened``), by the scheduler (what a hard budget has left), by the API (``fedsched budget``)
and by the simulator. Pure: the zone's rules come in as ``offset_at(utc_ms) -> offset_ms`` (the shells
read them from the zone database: ``events.plumbing.zones``); the calendar is integer arithmetic.

A window is the local day, the local week (Monday 00:00 to Monday 00:00, named by its ISO week) or the
local month that contains a moment, as ``[start_ms, end_ms)`` in UTC. GPU time is milli-GPU x
milliseconds: a run holds ``gpu_milli`` from its placement until it ends (``held_within``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta
from typing import NamedTuple

from events.catalog.documents import BudgetWindow

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
MILLI_MS_PER_GPU_HOUR = 1000 * HOUR_MS
"""A GPU-hour in milli-GPU x milliseconds."""
_EPOCH = date(1970, 1, 1).toordinal()

OffsetAt = Callable[[int], int]
"""The zone's offset from UTC (milliseconds, east positive) in force at a UTC moment."""


def utc(_: int) -> int:
    return 0


class Window(NamedTuple):
    start_ms: int
    end_ms: int
    label: str
    """``2026-12-04`` (a day), ``2026-W49`` (a week), ``2026-12`` (a month)."""


def window_at(kind: BudgetWindow, at_ms: int, offset_at: OffsetAt = utc) -> Window:
    """The window of ``kind`` that contains the moment ``at_ms`` in the zone of ``offset_at``."""
    local_day = date.fromordinal(_EPOCH + (at_ms + offset_at(at_ms)) // DAY_MS)
    if kind is BudgetWindow.DAY:
        first, after, label = local_day, local_day + timedelta(days=1), local_day.isoformat()
    elif kind is BudgetWindow.WEEK:
        first = local_day - timedelta(days=local_day.weekday())
        after = first + timedelta(days=7)
        year, week, _ = first.isocalendar()
        label = f"{year}-W{week:02d}"
    else:
        first = local_day.replace(day=1)
        after = (first + timedelta(days=32)).replace(day=1)
        label = f"{first.year}-{first.month:02d}"
    return Window(_midnight(first, offset_at), _midnight(after, offset_at), label)


def _midnight(day: date, offset_at: OffsetAt) -> int:
    """The UTC moment of local 00:00 of ``day``: the offset in force then, found in two steps (a
    change of offset at midnight itself is settled by the second)."""
    local = (day.toordinal() - _EPOCH) * DAY_MS
    moment = local - offset_at(local)
    return local - offset_at(moment)


def held_within(gpu_milli: int, held_from_ms: int, held_to_ms: int, window: Window) -> int:
    """The GPU time (milli-GPU x ms) of ``gpu_milli`` held over ``[held_from_ms, held_to_ms)`` that falls
    within ``window``."""
    start, end = max(held_from_ms, window.start_ms), min(held_to_ms, window.end_ms)
    return gpu_milli * (end - start) if end > start else 0


QUARTER_MS = 15 * 60_000
"""Held GPU time is kept in quarter hours: every zone's offset is a whole number of them, so a window's
edges fall on theirs."""
KEPT_MS = 33 * DAY_MS
"""Held GPU time older than this (before the longest window, a month, could still be in force) is not kept."""


class HeldLedger:
    """GPU time held by runs that ended, per tenant, in quarter hours of the last ``KEPT_MS``: what a
    window's count needs once the runs themselves are forgotten. The sum over any set of runs, whatever
    order they are added in; the work per run is bounded (at most ``KEPT_MS`` of quarter hours)."""

    def __init__(self) -> None:
        self.quarters: dict[str, dict[int, int]] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HeldLedger) and self.quarters == other.quarters

    __hash__ = None  # type: ignore[assignment]  # mutable

    def add(self, tenant: str, gpu_milli: int, held_from_ms: int, held_to_ms: int) -> None:
        if gpu_milli <= 0 or held_to_ms <= held_from_ms:
            return
        mine = self.quarters.setdefault(tenant, {})
        start = max(held_from_ms, held_to_ms - KEPT_MS)
        while start < held_to_ms:
            quarter = start - start % QUARTER_MS
            end = min(held_to_ms, quarter + QUARTER_MS)
            mine[quarter] = mine.get(quarter, 0) + gpu_milli * (end - start)
            start = end

    def within(self, tenants: tuple[str, ...], window: Window) -> int:
        total = 0
        for tenant in tenants:
            for quarter, milli_ms in self.quarters.get(tenant, {}).items():
                if window.start_ms <= quarter < window.end_ms:
                    total += milli_ms
        return total

    def forget_before(self, moment_ms: int) -> None:
        """Drop what lies before ``moment_ms - KEPT_MS`` (call as the log's time moves on)."""
        horizon = moment_ms - KEPT_MS
        for tenant in list(self.quarters):
            mine = {q: v for q, v in self.quarters[tenant].items() if q >= horizon - QUARTER_MS}
            if mine:
                self.quarters[tenant] = mine
            else:
                del self.quarters[tenant]


def gpu_hours(milli_ms: int) -> str:
    """GPU time in GPU-hours, in words (``12.5``)."""
    tenths = round(milli_ms * 10 / MILLI_MS_PER_GPU_HOUR)
    return f"{tenths // 10}.{tenths % 10}" if tenths % 10 else str(tenths // 10)


__all__ = [
    "DAY_MS",
    "KEPT_MS",
    "MILLI_MS_PER_GPU_HOUR",
    "HeldLedger",
    "OffsetAt",
    "Window",
    "gpu_hours",
    "held_within",
    "utc",
    "window_at",
]
