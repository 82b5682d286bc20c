"""The report's allocated and used GPU time cover the same runs: the runs still holding GPUs count up to
the report's end, as their usage reports already do; quota percentages say what they are a share of."""

from __future__ import annotations

import pytest

from services.governance.core.figures import HOUR_MS, HeldRow, QuotaRow, UsageRow, build

pytestmark = pytest.mark.timeout(30)

T0 = 1_764_680_400_000  # on an hour boundary
MIN = 60_000
GPU_HOUR = 1000 * HOUR_MS


def bucket(hour: int, allocated_h: float, used_h: float, tenant: str = "team-a") -> UsageRow:
    a, u = int(allocated_h * GPU_HOUR), int(used_h * GPU_HOUR)
    return UsageRow(tenant, "sim-1", "A100", T0 + hour * HOUR_MS, a, u, max(0, a - u), 1_000_000, "USD")


# Two GPUs placed at 00:30 and still running at the report's end, 02:00: its usage reports (2 GPU-hours
# busy in hour 0 with a finished run's 1 GPU-hour, and 2 in hour 1) are in the buckets, its allocation not.
STILL_RUNNING = HeldRow("team-a", "p1", "sim-1", "A100", T0 + 30 * MIN, 2000)


def a_report(*held: HeldRow):  # type: ignore[no-untyped-def]
    return build(T0, T0 + 2 * HOUR_MS, [bucket(0, 1, 2), bucket(1, 0, 2)], [], [], [], held)


def test_a_running_job_counts_as_allocated_up_to_the_end_so_used_is_a_share_of_it() -> None:
    report = a_report(STILL_RUNNING)
    [row] = report.utilisation
    assert (row["allocated_gpu_h"], row["used_gpu_h"], row["used_pct"]) == (4.0, 4.0, 100.0)
    assert [(r["allocated_gpu_h"], r["used_gpu_h"]) for r in report.hourly] == [(2.0, 2.0), (2.0, 2.0)]
    assert report.impact[0]["allocated_gpu_h"] == 4.0 and report.impact[0]["used_pct"] == 100.0
    assert report.idle[0]["idle_gpu_h"] == 0.0


def test_without_the_running_part_used_would_exceed_allocated() -> None:
    [row] = a_report().utilisation
    assert row["used_pct"] == 400.0, "the old report's basis: why the running part is added"


def test_cost_stays_what_finished_runs_were_priced() -> None:
    assert [(r["gpu_h"], r["cost_micro"]) for r in a_report(STILL_RUNNING).cost_by_tenant] == [(1.0, 2_000_000)]


def test_a_run_placed_before_the_period_counts_from_its_start_and_a_new_bucket_is_made_for_it() -> None:
    early = HeldRow("team-b", "p", "sim-2", "H100", T0 - 5 * HOUR_MS, 1000)
    rows = {(r["cluster"], r["gpu_model"]): r for r in a_report(early).utilisation}
    assert rows[("sim-2", "H100")]["allocated_gpu_h"] == 2.0
    assert rows[("sim-2", "H100")]["used_pct"] == "no usage data", "no report measured sim-2's H100s"


def test_quota_usage_is_a_share_of_the_limit_and_of_the_guarantee_never_one_for_the_other() -> None:
    bounded = QuotaRow("team-a", "default", "gpu", None, 3000, 2000, 4000)
    unbounded = QuotaRow("team-b", "default", "gpu", None, 3000, 2000, None)
    report = build(T0, T0 + HOUR_MS, [], [], [bounded, unbounded], [])
    shares = [(q["used_pct_of_guarantee"], q["used_pct_of_limit"]) for q in report.quota]
    assert shares == [(150.0, 75.0), (150.0, None)]
