"""Governance's job rules on NPU runs: a run of NPUs is judged by its NPUs' utilisation, as a GPU run is by
its GPUs' (the idle rule warns and reclaims it, the straggler rule finds its slow replica), and says so in
NPU words; a run holding both kinds is idle only when both are."""

from __future__ import annotations

import pytest

from events.catalog.decisions import JobReclaimRequested
from events.catalog.governance import FindingKind, GovernanceFinding, JobIdleWarning
from events.catalog.reasons import ReasonCode
from services.governance.core.config import GovConfig, IdleRule

from .builders import MIN, T0, History, a_history, types

IDLE = GovConfig(
    idle=(IdleRule("idle-notebook", "notebook", threshold_pct=5, idle_after_ms=20 * MIN, grace_ms=10 * MIN),)
)


def npu_notebook(*, npu_pct: int, gpu_pct: int = 0, gpus: int = 0) -> History:
    """A notebook on 8 NPUs (and ``gpus`` GPUs), busy at first, then at ``npu_pct`` on its NPUs for 20 min."""
    history = a_history().submit("nb", kind="notebook", gpus=gpus, npus=8).place("nb", at=0, gpus=gpus, npus=8)
    history.start("nb", at=1).usage("nb", 0, npu_pct=80, at=5)
    for minute in range(10, 26, 5):
        history.usage("nb", gpu_pct, npu_pct=npu_pct, at=minute)
    return history


def findings(outputs: list) -> list[GovernanceFinding]:  # type: ignore[type-arg]
    return [o.event for o in outputs if isinstance(o.event, GovernanceFinding)]


def test_a_notebook_holding_npus_it_does_not_use_is_warned_then_reclaimed_in_npu_words() -> None:
    history = npu_notebook(npu_pct=1)
    warned = history.evaluate(IDLE)
    assert types(warned) == ["JobIdleWarning"]
    warning = warned[0].event
    assert isinstance(warning, JobIdleWarning) and warning.idle_since_ms == T0 + 5 * MIN
    assert warning.mean_utilisation_pct == 1 and warning.message.startswith("NPUs under 5% for 20 min")
    history.then_publish(warned).usage("nb", 0, npu_pct=2, at=35)
    reclaimed = history.evaluate(IDLE)
    assert types(reclaimed) == ["JobCancelRequested", "JobReclaimRequested", "GovernanceFinding"]
    request = reclaimed[1].event
    assert isinstance(request, JobReclaimRequested) and request.reason is ReasonCode.IDLE_NPU
    assert request.message.startswith("8 NPUs idle for 30 min at 1% mean utilisation")
    (finding,) = findings(reclaimed)
    assert finding.kind is FindingKind.IDLE_RECLAIM
    assert {f.name: f.value for f in finding.figures}["npus"] == 8


def test_a_busy_npu_notebook_is_left_alone_though_its_gpu_figure_reads_zero() -> None:
    """Before NPUs were measured, every NPU run read 0% (its GPU figure) and looked idle."""
    history = npu_notebook(npu_pct=60)
    assert history.evaluate(IDLE) == []


def test_a_run_holding_gpus_and_npus_is_idle_only_when_both_kinds_are() -> None:
    assert history_types(npu_notebook(npu_pct=70, gpu_pct=1, gpus=1)) == []
    assert history_types(npu_notebook(npu_pct=1, gpu_pct=70, gpus=1)) == []
    warned = npu_notebook(npu_pct=1, gpu_pct=1, gpus=1).evaluate(IDLE)
    assert types(warned) == ["JobIdleWarning"] and warned[0].event.message.startswith("GPUs and NPUs under 5%")  # type: ignore[attr-defined]


def history_types(history: History) -> list[str]:
    return types(history.evaluate(IDLE))


def test_an_npu_gang_with_one_replica_far_slower_than_the_other_straggles() -> None:
    history = a_history().submit("g", kind="training", gpus=0, npus=8, gang=True, replicas=2)
    history.place("g", at=0, nodes=("a", "b"), gpus=0, npus=8).start("g", at=1)
    history.usage("g", 0, npu_pct=92, at=10, node="a").usage("g", 0, npu_pct=15, at=10, node="b")
    (straggler,) = findings(history.evaluate())
    assert straggler.kind is FindingKind.STRAGGLING_GANG and straggler.node == "b"
    assert straggler.message == "replica on b at 15% while the busiest is at 92% (utilisation of its NPUs)"


def test_fedsched_explain_of_an_idle_npu_reclaim_says_what_stayed_idle_and_no_quota_arithmetic() -> None:
    """An idle reclaim gives nothing back to a lender: the borrowed-quota line (in milli-GPU, all zeros for
    an NPU run) was noise; the reason's words cover NPUs and the message names them."""
    from services.api.explain import explain

    history = npu_notebook(npu_pct=1)
    history.then_publish(history.evaluate(IDLE)).usage("nb", 0, npu_pct=2, at=35)
    request = history.evaluate(IDLE)[1].event
    assert isinstance(request, JobReclaimRequested)
    row = {
        "entity_key": "nb",
        "status": "running",
        "last_decision_type": "JobReclaimRequested",
        "last_decision": request.model_dump(mode="json"),
    }
    summary = list(explain(row, T0 + 40 * MIN).summary)
    assert summary[0].startswith("Reclaim requested on cluster sim-1 (run 1) under rule idle-notebook: IdleNpu")
    assert "its NPUs stayed idle" in summary[0]
    assert not any("Borrowed quota" in line for line in summary)
    assert summary[1].startswith("8 NPUs idle for 30 min at 1% mean utilisation")


@pytest.mark.parametrize(
    ("gpu_milli", "npus", "words"),
    [(0, 8, "8 NPUs"), (2000, 0, "2 GPUs"), (500, 1, "0.5 GPU and 1 NPU"), (1000, 0, "1 GPU"), (0, 0, "its run")],
)
def test_a_reclaim_names_what_the_run_holds(gpu_milli: int, npus: int, words: str) -> None:
    from services.governance.core.reclaim import _held
    from services.governance.core.state import RunFacts

    assert _held(RunFacts(1, "sim-1", ("n1",), gpu_milli, 0, npus=npus)).startswith(words)
