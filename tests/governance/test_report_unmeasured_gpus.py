"""GPUs no usage report measured (a Kubernetes cluster without the DCGM exporter) say "no usage data" in
the report, not 0% used and 100% idle; what "measured" means comes from the log's usage samples, per
cluster x GPU model, never from how a connector is configured."""

from __future__ import annotations

import json

import pytest

from services.cli.gov_render import render
from services.governance.core.figures import HOUR_MS, NO_USAGE_DATA, HeldRow, UsageRow, build

pytestmark = pytest.mark.timeout(30)

T0 = 1_764_680_400_000  # on an hour boundary
GPU_HOUR = 1000 * HOUR_MS


def bucket(cluster: str, allocated_h: float, used_h: float, samples: int, tenant: str = "team-a") -> UsageRow:
    a, u = int(allocated_h * GPU_HOUR), int(used_h * GPU_HOUR)
    return UsageRow(tenant, cluster, "H100", T0, a, u, max(0, a - u), 0, "", samples=samples)


# sim-1 reports usage: 4 GPU-hours held, 1 busy. k8s-1 reports none: 6 GPU-hours held, and a run still
# holding 2 GPUs since the hour began.
MEASURED = bucket("sim-1", 4, 1, samples=12)
UNMEASURED = bucket("k8s-1", 6, 0, samples=0)
STILL_HOLDING = HeldRow("team-b", "p", "k8s-1", "H100", T0, 2000)


def a_report():  # type: ignore[no-untyped-def]
    return build(T0, T0 + HOUR_MS, [MEASURED, UNMEASURED], [], [], [], [STILL_HOLDING], T0 + HOUR_MS)


def test_a_cluster_with_no_usage_reports_has_no_usage_data_not_zero_percent() -> None:
    rows = {r["cluster"]: r for r in a_report().utilisation}
    assert rows["sim-1"] == {
        "cluster": "sim-1",
        "gpu_model": "H100",
        "allocated_gpu_h": 4.0,
        "used_gpu_h": 1.0,
        "idle_gpu_h": 3.0,
        "used_pct": 25.0,
    }
    assert rows["k8s-1"] == {
        "cluster": "k8s-1",
        "gpu_model": "H100",
        "allocated_gpu_h": 8.0,  # held time is known from the log, measured or not
        "used_gpu_h": NO_USAGE_DATA,
        "idle_gpu_h": NO_USAGE_DATA,
        "used_pct": NO_USAGE_DATA,
    }


def test_idle_counts_the_measured_gpus_and_gives_the_rest_as_unmeasured() -> None:
    idle = {r["tenant"]: r for r in a_report().idle}
    assert idle["team-a"] == {
        "tenant": "team-a",
        "idle_gpu_h": 3.0,
        "allocated_gpu_h": 10.0,
        "idle_pct": 75.0,  # of the 4 measured GPU-hours, not of 10
        "unmeasured_gpu_h": 6.0,
    }
    assert idle["team-b"] == {
        "tenant": "team-b",
        "idle_gpu_h": NO_USAGE_DATA,
        "allocated_gpu_h": 2.0,
        "idle_pct": NO_USAGE_DATA,
        "unmeasured_gpu_h": 2.0,
    }


def test_the_impact_table_shares_only_what_was_measured() -> None:
    impact = {r["tenant"]: r for r in a_report().impact}
    assert (impact["team-a"]["allocated_gpu_h"], impact["team-a"]["used_pct"]) == (10.0, 25.0)
    assert (impact["team-b"]["allocated_gpu_h"], impact["team-b"]["used_pct"]) == (2.0, NO_USAGE_DATA)


def test_one_usage_sample_in_the_period_is_enough_to_be_measured_even_if_idle() -> None:
    idle_but_measured = bucket("k8s-1", 6, 0, samples=3)
    rows = {r["cluster"]: r for r in build(T0, T0 + HOUR_MS, [idle_but_measured], [], [], []).utilisation}
    assert (rows["k8s-1"]["used_pct"], rows["k8s-1"]["idle_gpu_h"]) == (0.0, 6.0)


def test_the_report_renders_no_usage_data_in_every_format() -> None:
    report = a_report()
    assert "no usage data" in render(report, "table")
    assert json.loads(render(report, "json"))["utilisation"][0]["used_pct"] == NO_USAGE_DATA  # k8s-1 sorts first
    page = render(report, "html")  # the impact chart draws no bar for a tenant with nothing measured
    assert "<svg" in page and "no usage data" in page
