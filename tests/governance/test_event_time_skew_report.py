"""Governance's report counts the GPU time of runs still holding GPUs at a cost per run that does not grow
with how long ago it was placed: the same buckets as splitting every run hour by hour, in one step per run."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.governance.core.figures import HOUR_MS, HeldRow, UsageRow, with_held

pytestmark = [pytest.mark.timeout(90)]

T0 = 1_764_680_400_000  # on an hour boundary


def hour_by_hour(usage: list[UsageRow], held: list[HeldRow], since_ms: int, until_ms: int) -> list[UsageRow]:
    """The reference: every run split at every hour boundary it crosses (what ``with_held`` did before)."""
    extra: dict[tuple[str, str, str, int], int] = defaultdict(int)
    for run in held:
        start = max(run.placed_ms, since_ms) if run.gpu_milli else until_ms  # no GPU (NPUs alone): no row
        while start < until_ms:
            end = min(until_ms, start - start % HOUR_MS + HOUR_MS)
            extra[(run.tenant, run.cluster, run.gpu_model, start - start % HOUR_MS)] += run.gpu_milli * (end - start)
            start = end
    merged = []
    for u in usage:
        more = extra.pop((u.tenant, u.cluster, u.gpu_model, u.hour_ms), 0)
        a = u.allocated_milli_ms + more
        merged.append(replace(u, allocated_milli_ms=a, idle_milli_ms=max(0, a - u.used_milli_ms)))
    merged += [UsageRow(t, c, m, h, a, 0, a, 0, "") for (t, c, m, h), a in extra.items()]
    return sorted(merged, key=lambda u: (u.tenant, u.cluster, u.gpu_model, u.hour_ms))


minutes = st.integers(-600, 900).map(lambda m: T0 + m * 60_000 + m * 7)  # off the hour and the minute too
held_rows = st.lists(
    st.builds(
        HeldRow,
        tenant=st.sampled_from(["a", "b"]),
        project=st.just("p"),
        cluster=st.sampled_from(["c1", "c2"]),
        gpu_model=st.sampled_from(["A100", "T4"]),
        placed_ms=minutes,
        gpu_milli=st.sampled_from([0, 500, 1000, 8000]),
    ),
    max_size=8,
)
usage_rows = st.lists(
    st.builds(
        UsageRow,
        tenant=st.sampled_from(["a", "b"]),
        cluster=st.sampled_from(["c1", "c2"]),
        gpu_model=st.sampled_from(["A100", "T4"]),
        hour_ms=st.integers(-10, 15).map(lambda h: T0 + h * HOUR_MS),
        allocated_milli_ms=st.integers(0, 10**9),
        used_milli_ms=st.integers(0, 10**9),
        idle_milli_ms=st.just(0),
        cost_micro=st.integers(0, 10**6),
        currency=st.just("EUR"),
    ),
    max_size=6,
    unique_by=lambda u: (u.tenant, u.cluster, u.gpu_model, u.hour_ms),
)


@settings(max_examples=400, deadline=None)
@given(usage=usage_rows, held=held_rows, since=minutes, until=minutes)
def test_held_runs_fill_the_same_buckets_as_splitting_them_hour_by_hour(
    usage: list[UsageRow], held: list[HeldRow], since: int, until: int
) -> None:
    assert with_held(usage, held, since, until) == hour_by_hour(usage, held, since, until)


def test_many_runs_held_over_a_year_long_report_cost_a_step_each_not_a_step_per_hour() -> None:
    held = [HeldRow("a", "p", "c1", "A100", 0, 1000) for _ in range(2000)]  # placed in 1970, still held
    year = 365 * 24 * HOUR_MS
    started = time.monotonic()
    rows = with_held([], held, T0, T0 + year)
    assert time.monotonic() - started < 5.0  # hour by hour: 2,000 runs x 8,760 hours
    assert len(rows) == 365 * 24
    assert all(row.allocated_milli_ms == 2000 * 1000 * HOUR_MS for row in rows)
