"""A quota request that could never be used is refused where it comes in: a GPU model on a resource
without models, a period that has already ended (the API's check, ``tests/api/test_cli_gov.py`` through
the command); and a report of no time at all is refused before the API is asked."""

from __future__ import annotations

import pytest

from events.catalog.governance import QuotaRequestSubmitted
from events.catalog.types import ResourceKind
from services.cli.main import main
from services.governance.core.quota import request_problem

pytestmark = pytest.mark.timeout(30)

NOW = 1_900_000_000_000
HOUR = 3_600_000


def a_request(resource: str = "gpu", gpu_model: str | None = None, start: int = NOW, hours: int = 24):  # type: ignore[no-untyped-def]
    return QuotaRequestSubmitted(
        request_id="q1",
        tenant="team-a",
        resource=ResourceKind(resource),
        gpu_model=gpu_model,
        amount=500,
        period_start_ms=start,
        period_end_ms=start + hours * HOUR,
        justification="j",
        requester="alice@example.com",
    )


@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_a_gpu_model_on_a_resource_without_models_is_refused(resource: str) -> None:
    problem = request_problem(a_request(resource, "NVIDIA-H100-80GB-HBM3"), NOW)
    assert problem is not None and problem[0] == "gpu_model"
    assert f"not {resource}" in problem[1]


def test_a_gpu_model_on_gpu_and_npu_and_no_model_on_cpu_are_fine() -> None:
    assert request_problem(a_request("gpu", "H100"), NOW) is None
    assert request_problem(a_request("npu", "Ascend-910"), NOW) is None
    assert request_problem(a_request("cpu"), NOW) is None


def test_a_period_that_has_ended_is_refused_one_still_running_is_not() -> None:
    ended = request_problem(a_request(start=NOW - 48 * HOUR), NOW)
    assert ended is not None and ended[0] == "period_end_ms"
    assert request_problem(a_request(start=NOW - 24 * HOUR), NOW) is not None  # ends exactly now
    assert request_problem(a_request(start=NOW - 23 * HOUR), NOW) is None
    assert request_problem(a_request(start=NOW + HOUR), NOW) is None


@pytest.mark.parametrize("period", ["0h", "0m", "00d", "0w"])
def test_a_report_of_no_time_is_refused(
    period: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDSCHED_SERVER", "127.0.0.1:1")  # never reached
    assert main(["gov", "report", "--period", period]) == 2
    assert f"period must be more than 0, not {period!r}" in capsys.readouterr().err
