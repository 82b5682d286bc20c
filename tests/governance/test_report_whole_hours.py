"""A period not on hour boundaries: the usage figures count the whole hours it touches (usage is kept per
hour), and runs still holding GPUs count over the same hours as their usage samples, so idle plus used is
allocated."""

from __future__ import annotations

import pytest

from services.cli.gov_render import render
from services.governance.core.figures import HOUR_MS, HeldRow, UsageRow, build

pytestmark = pytest.mark.timeout(30)

T10 = 1_764_669_600_000  # 2025-12-02T10:00:00Z
SEC = 1000
MIN = 60 * SEC
GPU_HOUR = 1000 * HOUR_MS


def bucket(hour_ms: int, allocated_h: float, used_h: float, cost_micro: int = 0, tenant: str = "team-a") -> UsageRow:
    a, u = round(allocated_h * GPU_HOUR), round(used_h * GPU_HOUR)
    return UsageRow(tenant, "alpha", "G2", hour_ms, a, u, max(0, a - u), cost_micro, "USD", (("p", a, cost_micro),))


def test_an_hour_period_starting_past_the_hour_counts_its_first_hour_whole() -> None:
    # The tester's case: --period 1h over 10:00:42 .. 11:00:42 showed 0.006 GPU-h, the 11:00 bucket only.
    usage = [bucket(T10, 2.25, 1.5, 4_190_000), bucket(T10 + HOUR_MS, 0.006, 0.006, 7_000)]
    report = build(T10 + 42 * SEC, T10 + HOUR_MS + 42 * SEC, usage, [], [], [])
    [tenant] = report.cost_by_tenant
    assert (tenant["gpu_h"], tenant["cost_micro"]) == (2.256, 4_197_000)
    assert [r["hour_ms"] for r in report.hourly] == [T10, T10 + HOUR_MS]
    assert (report.usage_since_ms, report.usage_until_ms) == (T10, T10 + 2 * HOUR_MS)


def test_a_period_on_hour_boundaries_is_not_widened() -> None:
    usage = [bucket(T10 - HOUR_MS, 1, 1), bucket(T10, 1, 1), bucket(T10 + HOUR_MS, 1, 1)]
    report = build(T10, T10 + HOUR_MS, usage, [], [], [])
    assert [r["hour_ms"] for r in report.hourly] == [T10]
    assert "usage figures: whole hours" not in render(report, "table")


# Two GPUs held since 10:00 and still held now (13:00): usage samples fill the 11:00 hour, the report ends
# at 11:20. The held allocation used to stop at 11:20 while the hour's samples ran on to 12:00.
STILL_RUNNING = HeldRow("team-a", "p", "alpha", "G2", T10, 2000)
SAMPLES = [bucket(T10, 0, 1.5), bucket(T10 + HOUR_MS, 0, 1.5)]


def test_an_end_inside_an_hour_counts_the_held_runs_to_that_hours_end_so_idle_plus_used_is_allocated() -> None:
    report = build(T10, T10 + HOUR_MS + 20 * MIN, SAMPLES, [], [], [], [STILL_RUNNING], now_ms=T10 + 3 * HOUR_MS)
    [row] = report.utilisation
    assert (row["allocated_gpu_h"], row["used_gpu_h"], row["idle_gpu_h"]) == (4.0, 3.0, 1.0)
    assert [(r["allocated_gpu_h"], r["used_gpu_h"]) for r in report.hourly] == [(2.0, 1.5), (2.0, 1.5)]


def test_held_runs_are_not_counted_past_now_when_the_last_hour_has_not_ended() -> None:
    # Now is 11:20: the 11:00 hour's samples so far cover 20 minutes, as does the held allocation.
    samples = [bucket(T10, 0, 1.5), bucket(T10 + HOUR_MS, 0, 0.5)]
    now = T10 + HOUR_MS + 20 * MIN
    report = build(T10, now, samples, [], [], [], [STILL_RUNNING], now_ms=now)
    assert [(r["allocated_gpu_h"], r["used_gpu_h"]) for r in report.hourly] == [(2.0, 1.5), (0.667, 0.5)]
    [idle] = report.idle
    assert idle["idle_gpu_h"] == pytest.approx(2.667 - 2.0, abs=0.001)


def test_the_report_says_which_whole_hours_its_usage_figures_cover() -> None:
    report = build(T10 + 42 * SEC, T10 + HOUR_MS + 42 * SEC, [bucket(T10, 1, 1)], [], [], [])
    assert any("whole hours, 2025-12-02T10:00:00.000Z .. 2025-12-02T12:00:00.000Z" in n for n in report.notes)
    header = render(report, "table").splitlines()[0]
    assert header.endswith("(usage figures: whole hours 2025-12-02T10:00:00.000Z .. 2025-12-02T12:00:00.000Z)")
