"""Where a waiting job stands (issue 20, item 5): its place in its own tenant's queue beside its place in
the whole federation's order, in the decision and in its words; and the category of its wait, for every
reason the scheduling core can give."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from events.catalog.decisions import JobQueued
from events.catalog.lifecycle import APPLICATION_FAILURES, INFRASTRUCTURE_FAILURES
from events.catalog.pending_reasons import PENDING_REASONS, PendingReason
from services.scheduler.core.policy import Queue, ReasonCode, schedule
from tests.scheduler.builders import a_job, a_node, running, snapshot
from tests.scheduler.decision_golden import scenario

pytestmark = pytest.mark.timeout(30)

CORE = Path(__file__).resolve().parents[2] / "services" / "scheduler" / "core"
NOT_WAITING = {ReasonCode.PLACED, ReasonCode.BACKFILLED, ReasonCode.PRIORITY_PREEMPTION, ReasonCode.RECLAIM_BORROWED}
"""What the core names for a placement or a preemption, never for a wait."""
NOT_WAITING |= INFRASTRUCTURE_FAILURES | APPLICATION_FAILURES
"""... and the failures its retry verdicts name (``policy.retries``)."""


def test_with_two_tenants_a_jobs_place_in_its_own_queue_is_not_its_place_in_the_federation() -> None:
    busy = a_job("busy").tenant("team-c").gpus(8).runtime(expected_s=600).build()
    full = a_node("n1").gpus(8, free=(0,) * 8).build()
    pending = [
        a_job(name).tenant(tenant).queue(queue).gpus(4).submitted(at).runtime(expected_s=600).build()
        for at, (name, tenant, queue) in enumerate(
            [
                ("a1", "team-a", "default"),
                ("b1", "team-b", "default"),
                ("a2", "team-a", "default"),
                ("b2", "team-b", "default"),
                ("r1", "team-a", "research"),
            ],
            start=1,
        )
    ]
    result = schedule(snapshot([full], pending, [running(busy, "cluster-a", ("n1", tuple(range(8)), 1000))]))
    waits = {d.job_id: d for d in result.decisions if isinstance(d, Queue)}
    places = {job: (d.tenant_queue_position, d.federation_position) for job, d in waits.items()}
    # The federation takes the tenants in turn; each queue counts only its own waiting jobs.
    assert places == {"a1": (1, 1), "b1": (1, 2), "a2": (2, 3), "b2": (2, 4), "r1": (1, 5)}
    assert "2nd in team-a/default, 3rd in the federation" in waits["a2"].message
    assert "1st in team-a/research, 5th in the federation" in waits["r1"].message
    assert [d.federation_position for d in result.decisions if isinstance(d, Queue)] == [1, 2, 3, 4, 5]


def test_every_reason_the_scheduling_core_names_for_a_wait_has_a_category() -> None:
    named = {
        ReasonCode[name]
        for path in sorted(CORE.rglob("*.py"))
        for name in re.findall(r"ReasonCode\.([A-Z_]+)", path.read_text())
    }
    assert len(named) > 10
    assert sorted(code.value for code in named - NOT_WAITING if code not in PENDING_REASONS) == []


def test_every_wait_the_scheduler_publishes_carries_the_category_of_its_binding_reason() -> None:
    waits = [e.data for e in scenario()[0] if isinstance(e.data, JobQueued)]
    assert len(waits) >= 5
    for wait in waits:
        assert wait.binding is not None and wait.pending_reason is not None, wait.job_id
        assert wait.pending_reason is PENDING_REASONS[wait.binding.reason], wait.job_id
        assert wait.tenant_queue_position is not None and wait.federation_position is not None
        assert wait.tenant_queue_position <= wait.federation_position
    categories = {w.pending_reason for w in waits}
    assert categories >= {PendingReason.QUOTA, PendingReason.PREEMPTION_PENDING, PendingReason.MISCONFIGURED}
