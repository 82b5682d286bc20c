"""The pending-reason taxonomy: a small fixed vocabulary, and every reason code the catalogue declares as a
reason to wait in exactly one of its categories (a new waiting reason without one fails here, not in a
user's filter). ``tests/scheduler/test_waits_explained.py`` checks the same of what the scheduler emits."""

from __future__ import annotations

import inspect
import re

import pytest

from events.catalog.pending_reasons import DESCRIPTIONS, PENDING_REASONS, PendingReason, pending_reason_of
from events.catalog.reasons import ReasonCode

pytestmark = pytest.mark.timeout(30)


def declared_under(heading: str) -> list[ReasonCode]:
    """The codes the catalogue declares under one comment of ``ReasonCode`` (up to the next comment)."""
    block = inspect.getsource(ReasonCode).split(f"# {heading}", 1)[1].split("#", 1)[0]
    return [ReasonCode[name] for name in re.findall(r"^\s+([A-Z_]+) = ", block, re.MULTILINE)]


def test_the_categories_are_a_small_fixed_vocabulary_each_described_and_used() -> None:
    assert [c.value for c in PendingReason] == [
        "quota",
        "budget",
        "capacity",
        "unavailable",
        "topology",
        "preemption_pending",
        "misconfigured",
    ]
    assert set(DESCRIPTIONS) == set(PendingReason)
    assert set(PENDING_REASONS.values()) == set(PendingReason)


def test_every_reason_a_job_waits_for_has_exactly_one_category() -> None:
    waiting = declared_under("Why a job waits")
    assert len(waiting) > 20
    # ``Reserved`` is declared with the placement outcomes but says a job waits while room is held for it.
    missing = [code.value for code in [*waiting, ReasonCode.RESERVED] if code not in PENDING_REASONS]
    assert missing == []
    assert set(PENDING_REASONS) == {*waiting, ReasonCode.RESERVED}  # one mapping, nothing else in it


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (ReasonCode.QUOTA_EXCEEDED, PendingReason.QUOTA),
        ("BudgetExceeded", PendingReason.BUDGET),
        ("WaitingForPreemption", PendingReason.PREEMPTION_PENDING),
        ("Preempted", None),
        ("NotACode", None),
        (None, None),
    ],
)
def test_a_reasons_category_is_looked_up_by_its_code_or_its_string(
    code: ReasonCode | str | None, expected: PendingReason | None
) -> None:
    assert pending_reason_of(code) is expected
