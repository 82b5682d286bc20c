"""The decision engine's name changes whenever its decisions do, so ``audit verify`` can tell cycles
recorded by other code apart: a fixed scenario's decision events have one digest per engine name."""

from __future__ import annotations

from collections import Counter

from services.scheduler.core.outputs import DECISION_ENGINE, digest
from tests.scheduler.decision_golden import golden_path, scenario


def test_the_scenario_decides_every_kind_of_thing_the_service_publishes() -> None:
    events, _ = scenario()
    kinds = Counter(e.type.rsplit(".", 1)[1] for e in events)
    assert kinds["JobPlaced"] >= 1 and kinds["JobPreemptionRequested"] >= 1
    reasons = {e.data.binding.reason.value for e in events if e.type.endswith("JobQueued")}  # type: ignore[attr-defined]
    expected = {"WaitingForPreemption", "QuotaExceeded", "GpuModelUnavailable", "NoFeasibleNode", "TaintNotTolerated"}
    assert expected | {"InsufficientNpu"} <= reasons
    placed = {e.data.job_id: e.data for e in events if e.type.endswith("JobPlaced")}  # type: ignore[attr-defined]
    assert [tuple(r.npu_indices) for r in placed["npu-train"].replicas] == [(0, 1, 2, 3)]


def test_decisions_change_only_with_the_engine_name() -> None:
    events, record = scenario()
    assert record.data.engine == DECISION_ENGINE  # type: ignore[attr-defined]
    path = golden_path()
    assert path.exists(), (
        f"no digest for engine {DECISION_ENGINE}: record it with python -m tests.scheduler.decision_golden"
    )
    assert digest(events) == path.read_text().strip(), (
        "the same inputs now give other decision events: name a new DECISION_ENGINE in "
        "services/scheduler/core/outputs.py (audit verify then tells the cycles of the old code apart) and "
        "record its digest with python -m tests.scheduler.decision_golden"
    )
