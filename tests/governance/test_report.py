"""The report's figures from rows, and the four ways of writing them."""

from __future__ import annotations

import csv
import io
import json

import pytest

from services.cli.gov_render import render
from services.governance.core.figures import (
    HOUR_MS,
    FindingRow,
    HeldRow,
    JobRow,
    QuotaRow,
    UsageRow,
    build,
    not_running_ms,
    percentile,
)

pytestmark = pytest.mark.timeout(60)

T0 = 1_764_680_400_000  # on an hour boundary
MIN = 60_000
GPU_HOUR = 1000 * HOUR_MS  # milli-GPU-ms in one GPU-hour


def usage(tenant: str, hour: int, allocated_h: int, used_h: int, cost: int, project: str = "default") -> UsageRow:
    a, u = allocated_h * GPU_HOUR, used_h * GPU_HOUR
    return UsageRow(
        tenant, "sim-1", "A100", T0 + hour * HOUR_MS, a, u, max(0, a - u), cost, "USD", ((project, a, cost),)
    )


def a_job(
    job_id: str, tenant: str, *events: tuple[int, str, str, str], kind: str = "training", **more: object
) -> JobRow:
    timeline = tuple((T0 + m * MIN, status, event, reason, "") for m, status, event, reason in events)
    return JobRow(
        job_id,
        tenant,
        "default",
        kind,
        str(more.get("priority_class", "standard")),
        timeline[-1][1] if timeline else "submitted",
        T0 + int(str(more.get("submitted", 0))) * MIN,
        more.get("placed"),  # type: ignore[arg-type]
        more.get("waiting"),  # type: ignore[arg-type]
        timeline,
    )


PREEMPTED_TRAINING = a_job(
    "t1",
    "team-a",
    (1, "queued", "JobQueued", "QuotaExceeded,InsufficientGpu"),
    (5, "running", "JobStarted", ""),
    (30, "queued", "JobPreempted", "Preempted"),
    (40, "running", "JobStarted", ""),
    (90, "succeeded", "JobSucceeded", "Succeeded"),
    placed=T0 + 4 * MIN,
    waiting=4 * MIN,
)
FLAKY_INFERENCE = a_job(
    "inf",
    "team-b",
    (2, "running", "JobStarted", ""),
    (60, "queued", "JobFailed", "NodeFailure"),
    (75, "running", "JobStarted", ""),
    kind="inference",
    priority_class="production_inference",
    placed=T0 + MIN,
    waiting=MIN,
)


def a_report():  # type: ignore[no-untyped-def]
    return build(
        T0,
        T0 + 3 * HOUR_MS,
        [
            usage("team-a", 0, 4, 3, 8_000_000, "p1"),
            usage("team-a", 1, 2, 1, 4_000_000, "p2"),
            usage("team-b", 0, 1, 1, 500),
        ],
        [PREEMPTED_TRAINING, FLAKY_INFERENCE],
        [QuotaRow("team-a", "default", "gpu", None, 3000, 2000, 4000)],
        [FindingRow(T0 + 10 * MIN, "crash_loop", "crash-loop", "team-a", "etl-3", "etl failed 3 times")],
    )


def test_nearest_rank_percentiles_of_integers() -> None:
    assert [percentile([5, 1, 4, 2, 3], p) for p in (50, 90, 99)] == [3, 5, 5]
    assert percentile([], 90) == 0


def test_an_inference_job_is_down_while_restarting_after_it_first_started() -> None:
    assert not_running_ms(FLAKY_INFERENCE, T0, T0 + 3 * HOUR_MS) == 15 * MIN
    ended = a_job("x", "t", (1, "running", "JobStarted", ""), (10, "queued", "JobPreempted", "Preempted"))
    assert not_running_ms(ended, T0, T0 + HOUR_MS) == 50 * MIN, "still down at the end of the period"


def test_cost_utilisation_idle_waiting_and_interruptions_add_up() -> None:
    report = a_report()
    assert [(r["tenant"], r["cost_micro"]) for r in report.cost_by_tenant] == [("team-a", 12_000_000), ("team-b", 500)]
    assert [(r["project"], r["gpu_h"]) for r in report.cost_by_project] == [("p1", 4.0), ("p2", 2.0), ("default", 1.0)]
    assert report.utilisation == [
        {
            "cluster": "sim-1",
            "gpu_model": "A100",
            "allocated_gpu_h": 7.0,
            "used_gpu_h": 5.0,
            "idle_gpu_h": 2.0,
            "used_pct": 71.4,
        }
    ]
    assert report.idle[0] == {
        "tenant": "team-a",
        "idle_gpu_h": 2.0,
        "allocated_gpu_h": 6.0,
        "idle_pct": 33.3,
        "unmeasured_gpu_h": 0.0,
    }
    assert {r["reason"] for r in report.wait_reasons} == {"QuotaExceeded", "InsufficientGpu"}
    interruptions = {r["tenant"]: r for r in report.interruptions}
    assert interruptions["team-a"]["preemptions"] == 1 and interruptions["team-a"]["training_interruptions"] == 1
    assert interruptions["team-b"]["infrastructure"] == 1
    assert report.inference == [{"tenant": "team-b", "inference_jobs": 1, "minutes_below_min_replicas": 15.0}]
    assert report.quota[0]["used_pct_of_limit"] == 75.0


def test_usage_not_priced_yet_joins_the_tenants_currency() -> None:
    unpriced = UsageRow("team-b", "sim-1", "A100", T0 + HOUR_MS, 0, GPU_HOUR, 0, 0, "", ())
    report = build(T0, T0 + 3 * HOUR_MS, [usage("team-b", 0, 1, 1, 500), unpriced], [], [], [])
    assert [(r["tenant"], r["currency"], r["cost_micro"]) for r in report.cost_by_tenant] == [("team-b", "USD", 500)]


def test_business_impact_sits_beside_utilisation_per_tenant() -> None:
    impact = {r["tenant"]: r for r in a_report().impact}
    assert impact["team-a"]["used_pct"] == 66.7 and impact["team-a"]["training_interruptions"] == 1
    assert impact["team-a"]["findings"] == 1 and impact["team-a"]["wait_p90_min"] == 4.0
    assert impact["team-b"]["used_pct"] == 100.0 and impact["team-b"]["inference_down_min"] == 15.0


def test_the_report_renders_as_table_csv_json_and_html_with_charts() -> None:
    report = a_report()
    table = render(report, "table")
    assert "== Business impact beside utilisation (per tenant)" in table and "team-a" in table
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    assert {"section": "cost_by_tenant", "field": "cost_micro", "value": "12000000", "row": "0"} in rows
    assert json.loads(render(report, "json"))["cost_by_tenant"][0]["cost_micro"] == 12_000_000
    page = render(report, "html")
    assert page.count("<svg") == 3 and "Cost by tenant" in page


def test_npu_hours_are_shown_and_priced_beside_gpu_hours_and_never_as_gpu_utilisation() -> None:
    # team-a: 2 GPU-hours (cost 4) and 8 NPU-hours of an Ascend910B (cost 12) in the same hour and project.
    npu = UsageRow(
        "team-a",
        "sim-1",
        "Ascend910B",
        T0,
        8 * GPU_HOUR,
        0,
        8 * GPU_HOUR,
        12,
        "USD",
        (("p1", 8 * GPU_HOUR, 12),),
        "npu",
    )
    report = build(T0, T0 + HOUR_MS, [usage("team-a", 0, 2, 1, 4, project="p1"), npu], [], [], [])
    # No usage report measured those NPUs: their use is not known (not 0%).
    assert report.npu_usage == [
        {
            "cluster": "sim-1",
            "npu_model": "Ascend910B",
            "allocated_npu_h": 8.0,
            "used_npu_h": "no usage data",
            "idle_npu_h": "no usage data",
            "used_pct": "no usage data",
            "npu_h": 8.0,
            "cost_micro": 12,
            "cost": 12e-6,
            "currency": "USD",
        }
    ]
    assert [(r["gpu_h"], r["npu_h"], r["cost_micro"]) for r in report.cost_by_tenant] == [(2.0, 8.0, 16)]
    assert [(r["project"], r["gpu_h"], r["npu_h"]) for r in report.cost_by_project] == [("p1", 2.0, 8.0)]
    # Utilisation, idle, hourly and impact are of GPUs: NPU time is counted apart (npu_usage, npu_idle).
    assert [(r["gpu_model"], r["allocated_gpu_h"]) for r in report.utilisation] == [("A100", 2.0)]
    assert report.idle[0]["allocated_gpu_h"] == 2.0 and report.hourly[0]["allocated_gpu_h"] == 2.0
    assert report.impact[0]["allocated_gpu_h"] == 2.0


def test_a_running_npu_job_adds_no_gpu_row_to_utilisation() -> None:
    npu_only = HeldRow("team-a", "p1", "sim-3", "none", T0, 0)  # holds NPUs, no GPU
    report = build(T0, T0 + HOUR_MS, [usage("team-a", 0, 2, 1, 4)], [], [], [], held=[npu_only])
    assert [(r["cluster"], r["gpu_model"]) for r in report.utilisation] == [("sim-1", "A100")]
