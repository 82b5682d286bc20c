"""The report's NPU figures: NPU time held (running runs too), used and idle per cluster x NPU model and
per tenant, beside the GPU figures and never mixed into them; NPUs no usage report measured say "no usage
data", not 0%."""

from __future__ import annotations

import pytest

from services.governance.core.figures import HOUR_MS, NO_USAGE_DATA, HeldRow, UsageRow, build

pytestmark = pytest.mark.timeout(30)

T0 = 1_764_680_400_000  # on an hour boundary
MIN = 60_000
DEVICE_HOUR = 1000 * HOUR_MS


def npu_bucket(cluster: str, allocated_h: float, used_h: float, samples: int, tenant: str = "team-a") -> UsageRow:
    a, u = int(allocated_h * DEVICE_HOUR), int(used_h * DEVICE_HOUR)
    return UsageRow(
        tenant, cluster, "Ascend910B", T0, a, u, max(0, a - u), 2_600_000, "USD", kind="npu", samples=samples
    )


GPU = UsageRow("team-a", "sim-1", "A100", T0, 2 * DEVICE_HOUR, DEVICE_HOUR, DEVICE_HOUR, 1_000_000, "USD", samples=12)


def test_npu_utilisation_is_reported_per_cluster_and_model_beside_the_gpus_own() -> None:
    # sim-3: a finished run held 4 NPU-hours, reports measured 1 busy; a run placed at 00:30 still holds 8
    # NPUs (4 NPU-hours to 01:00), measured 3 NPU-hours busy in the same hour.
    finished = npu_bucket("sim-3", allocated_h=4, used_h=4, samples=24)
    running = HeldRow("team-b", "p", "sim-3", "Ascend910B", T0 + 30 * MIN, 8000, "npu")
    report = build(T0, T0 + HOUR_MS, [GPU, finished], [], [], [], [running], T0 + HOUR_MS)
    [npu] = report.npu_usage
    assert (npu["cluster"], npu["npu_model"], npu["allocated_npu_h"], npu["used_npu_h"]) == (
        "sim-3",
        "Ascend910B",
        8.0,
        4.0,
    )
    assert (npu["idle_npu_h"], npu["used_pct"], npu["npu_h"], npu["cost_micro"]) == (4.0, 50.0, 4.0, 2_600_000)
    [gpu] = report.utilisation  # GPU figures count GPU time alone
    assert (gpu["gpu_model"], gpu["allocated_gpu_h"], gpu["used_pct"]) == ("A100", 2.0, 50.0)
    idle = {r["tenant"]: r for r in report.npu_idle}
    assert idle["team-a"]["idle_npu_h"] == 0.0 and idle["team-a"]["idle_pct"] == 0.0
    # team-b's running NPUs were measured in no bucket of its own: nothing known of their use.
    assert idle["team-b"]["allocated_npu_h"] == 4.0 and idle["team-b"]["idle_pct"] == NO_USAGE_DATA


def test_npus_no_report_measured_say_no_usage_data_not_zero() -> None:
    unmeasured = npu_bucket("sim-9", allocated_h=3, used_h=0, samples=0)
    measured_idle = npu_bucket("sim-3", allocated_h=3, used_h=0, samples=36)
    report = build(T0, T0 + HOUR_MS, [unmeasured, measured_idle], [], [], [])
    shares = {r["cluster"]: r["used_pct"] for r in report.npu_usage}
    assert shares == {"sim-3": 0.0, "sim-9": NO_USAGE_DATA}
    idle = {r["cluster"]: r["idle_npu_h"] for r in report.npu_usage}
    assert idle == {"sim-3": 3.0, "sim-9": NO_USAGE_DATA}
