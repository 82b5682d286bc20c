"""``fedsched budget``'s figures (``projections.readmodel.budgets``): used counts runs until now, projected
adds what the running ones are expected to hold still within the window (their submitted runtime, else
the maximum, else the Policy's default), as the scheduler holds a hard budget; nothing more for a run
already past its expected end."""

from __future__ import annotations

from typing import Any

import pytest

from events.catalog.budget_windows import MILLI_MS_PER_GPU_HOUR
from events.catalog.types import ClusterId, TenantId
from projections.readmodel.budgets import budget_views
from projections.readmodel.rows.typed import DocumentRow, HeldRun, RunPart, Slot

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(10)]

HOUR = 3_600_000
DAY0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z
NOW = DAY0 + 10 * HOUR


def document(kind: str, name: str, **spec: Any) -> DocumentRow:
    body = {"api_version": "fedsched.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    return DocumentRow(kind, name, spec.get("tenant", ""), 1, body, "ops", 0, False)


def run(gpus: int, placed_ms: int, expected_s: int | None = None, max_s: int | None = None) -> HeldRun:
    slot = Slot("n1", tuple(range(gpus)), 1000)
    return HeldRun(TenantId("team-a"), "", ClusterId("c1"), "A100", placed_ms, (slot,), expected_s, max_s)


class Reads:
    def __init__(self, held: list[HeldRun], policy: dict[str, Any] | None = None) -> None:
        self.held = held
        self.by_kind = {
            "Budget": [document("Budget", "daily", tenant="team-a", window="day", gpu_hours=100, mode="hard")],
            "Tenant": [],
            "Policy": [document("Policy", "default", **policy)] if policy is not None else [],
        }

    async def documents(self, scope: Any, kind: str) -> list[DocumentRow]:
        return self.by_kind[kind]

    async def held_runs(self) -> list[HeldRun]:
        return self.held

    async def allocated_within(self, tenants: Any, start_ms: int, end_ms: int) -> int:
        return 0


async def figures(reads: Reads) -> tuple[float, float]:
    [view] = await budget_views(reads, None, "", NOW)  # type: ignore[arg-type]
    return view.used_milli_ms / MILLI_MS_PER_GPU_HOUR, view.projected_milli_ms / MILLI_MS_PER_GPU_HOUR


async def test_a_running_job_is_projected_to_its_expected_end_not_the_windows() -> None:
    # 4 GPUs since 2 h ago, expected to run 3 h: 8 GPU-hours used, 4 more to come (the day's end would be 56).
    assert await figures(Reads([run(4, NOW - 2 * HOUR, expected_s=3 * 3600)])) == (8, 12)


async def test_without_an_estimate_its_maximum_then_the_policys_default_runtime_counts() -> None:
    assert await figures(Reads([run(1, NOW, max_s=5 * 3600)])) == (0, 5)
    assert await figures(Reads([run(1, NOW)])) == (0, 1)  # the default Policy: an hour
    assert await figures(Reads([run(1, NOW)], policy={"default_runtime_s": 7200})) == (0, 2)


async def test_a_run_past_its_expected_end_is_projected_to_hold_nothing_more() -> None:
    assert await figures(Reads([run(2, NOW - 3 * HOUR, expected_s=3600)])) == (6, 6)


async def test_what_falls_after_the_window_is_not_projected_in_it() -> None:
    assert await figures(Reads([run(1, NOW, expected_s=48 * 3600)])) == (0, 14)  # 10:00 to midnight


async def test_a_spread_services_part_counts_from_when_it_opened() -> None:
    # 2 GPUs in c1 since 4 h ago, 2 more in c2 since 1 h ago, expected to run 6 h: 8 + 2 used.
    parts = (RunPart("c1", 2, NOW - 4 * HOUR, "", "", None), RunPart("c2", 2, NOW - HOUR, "", "", None))
    slots = tuple(Slot("n1", (g,), 1000, cluster=c) for c, g in (("c1", 0), ("c1", 1), ("c2", 0), ("c2", 1)))
    spread = HeldRun(TenantId("team-a"), "", ClusterId("c1"), "A100", NOW - 4 * HOUR, slots, 6 * 3600, parts=parts)
    assert await figures(Reads([spread])) == (10, 18)  # then 2 h more of 4 GPUs: 18 (was 16 used, 24 projected)
