"""The cycle reads as its recipe: the per-job steps are the ones the cycle's docstring names, in its order."""

from __future__ import annotations

import re

import pytest

from services.scheduler.core.policy import cycle
from services.scheduler.core.policy.job_steps import JOB_STEPS

RECIPE = (
    "asks_nothing",
    "within_quota",
    "within_budget",
    "hot_model_cap",
    "honour_reservation",
    "place",
    "hot_model_wait",
    "preempt",
    "fewer_replicas",
    "reserve",
    "wait",
)


@pytest.mark.timeout(10)
def test_a_jobs_turn_tries_the_steps_in_the_documented_order() -> None:
    assert tuple(step.__name__ for step in JOB_STEPS) == RECIPE


@pytest.mark.timeout(10)
def test_the_cycles_docstring_names_every_step_in_that_order() -> None:
    named = re.findall(r"^   [a-z]\. ``(\w+)``", cycle.__doc__ or "", flags=re.MULTILINE)
    assert tuple(named) == RECIPE


@pytest.mark.timeout(10)
def test_every_step_says_what_it_decides() -> None:
    assert all(step.__doc__ for step in JOB_STEPS)
