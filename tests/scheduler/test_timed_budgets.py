"""GPU-hour budgets on the simulator's timed mode (issue 20): a hard budget holds back a job that would exceed
it until the next window opens (the report says from when until when), a soft one lets every job start and
reports when its window crossed 80% and 100%, a tenant without a budget is not touched; the configuration
is documents, as ``fedsched apply -f`` takes them, and the CLI prints the budgets section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from events.catalog.documents import DocumentError
from services.cli.main import main
from services.scheduler.core.policy import NodePolicy
from services.scheduler.sim.config import SimConfig, sim_config
from services.scheduler.sim.timed import run_timed
from services.scheduler.sim.traces import TracePod
from tests.scheduler.builders import a_node

pytestmark = pytest.mark.timeout(120)

HOUR = 3600
DAY = 24 * HOUR
REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "traces"
SLICE = [
    "--nodes",
    str(FIX / "openb_node_list_gpu_node_slice.csv"),
    "--pods",
    str(FIX / "openb_pod_list_default_slice.csv"),
]


def pod(name: str, gpus: int, at_s: int, hours: float, qos: str = "Burstable") -> TracePod:
    """A pod of ``gpus`` whole GPUs created at ``at_s`` that runs ``hours`` (its tenant: its number % 4)."""
    return TracePod(name, 4000, 16384, gpus, 1000, (), creation_s=at_s, deletion_s=at_s + int(hours * HOUR), qos=qos)


def document(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"api_version": "fedsched.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def daily(name: str, gpu_hours: int, mode: str, **owner: str) -> dict[str, Any]:
    return document("Budget", name, window="day", gpu_hours=gpu_hours, mode=mode, **owner)


def simulate(pods: list[TracePod], *documents: dict[str, Any], gpus: int = 16) -> dict[str, Any]:
    node = a_node("n1").gpus(gpus).build()
    configuration = sim_config(list(documents)) if documents else SimConfig()
    return run_timed([node], pods, NodePolicy.FRAGMENTATION, seed=1, max_pods=0, configuration=configuration)


def windows(report: dict[str, Any], budget: str) -> dict[str, dict[str, Any]]:
    return {w["window"]: w for w in report["budgets"] if w["budget"] == budget}


def test_a_hard_daily_budget_holds_a_job_that_would_exceed_it_until_the_next_days_window_opens() -> None:
    pods = [
        pod("pod-1", 4, 0, 2),  # tenant-1: 8 of its 10 GPU-hours
        pod("pod-5", 4, 60, 1),  # tenant-1: 4 more, over: held back
        pod("pod-2", 4, 120, 3),  # tenant-2: no budget
    ]
    report = simulate(pods, daily("t1-daily", 10, "hard", tenant="tenant-1"))

    first, second = windows(report, "t1-daily")["1970-01-01"], windows(report, "t1-daily")["1970-01-02"]
    assert first["held"] == [{"job": "pod-5", "from_s": 60.0, "until_s": float(DAY), "started": True}]
    assert (first["jobs_held"], first["held_s"], first["used_gpu_hours"]) == (1, DAY - 60, 8.0)
    assert (first["crossed_80_s"], first["crossed_100_s"]) == (2 * HOUR, None)
    assert second["start_s"] == DAY and second["used_gpu_hours"] == 4.0 and second["jobs_held"] == 0
    # The only wait is pod-5's (the fleet had room for all three): tenant-2's job started when it came.
    assert report["completed"] == 3 and report["mean_queue_s"] == pytest.approx((DAY - 60) / 3, abs=0.1)
    assert report["p50_queue_s"] == 0


def test_a_tenant_without_a_budget_runs_as_it_would_with_no_configuration() -> None:
    pods = [pod("pod-2", 4, 0, 20), pod("pod-6", 4, 60, 20), pod("pod-10", 8, 120, 5)]  # all tenant-2
    with_budget = simulate(pods, daily("t1-daily", 1, "hard", tenant="tenant-1"))
    without = simulate(pods)
    assert with_budget["budgets"] == []  # tenant-1 never ran, and nobody was held back
    keys = ("completed", "mean_queue_s", "mean_jct_s", "gpu_utilisation_pct", "cycles")
    assert {k: with_budget[k] for k in keys} == {k: without[k] for k in keys}


def test_a_soft_budget_lets_every_job_start_and_reports_when_80_and_100_percent_were_crossed() -> None:
    pods = [pod("pod-3", 2, 0, 6), pod("pod-7", 2, 3600, 1)]  # tenant-3: 2 GPUs, then 4 for an hour
    report = simulate(pods, daily("t3-daily", 10, "soft", tenant="tenant-3"))

    day = windows(report, "t3-daily")["1970-01-01"]
    assert report["p99_queue_s"] == 0 and day["jobs_held"] == 0 and day["held"] == []
    assert day["used_gpu_hours"] == 14.0 and day["used_pct"] == 140
    # 2 GPU-hours by 1 h, 4 more by 2 h (6), then 2 an hour: 8 (80%) at 3 h, 10 (100%) at 4 h.
    assert (day["crossed_80_s"], day["crossed_100_s"]) == (3 * HOUR, 4 * HOUR)


def test_a_cohorts_budget_counts_its_members_and_trace_jobs_are_dealt_to_the_configured_tenants() -> None:
    tenants = [document("Tenant", t, cohort="research") for t in ("team-a", "team-b")]
    pods = [pod("pod-0", 4, 0, 2), pod("pod-1", 4, 60, 1)]  # dealt: team-a (0 % 2), team-b (1 % 2)
    report = simulate(pods, *tenants, daily("research-daily", 10, "hard", cohort="research"))

    day = windows(report, "research-daily")["1970-01-01"]
    assert day["tenants"] == ["team-a", "team-b"]
    assert [h["job"] for h in day["held"]] == ["pod-1"]  # team-b's hour is over what team-a left


def test_a_job_no_window_could_ever_admit_is_left_waiting_and_the_simulation_ends() -> None:
    report = simulate([pod("pod-1", 8, 0, 48)], daily("t1-daily", 10, "hard", tenant="tenant-1"))
    assert (report["completed"], report["unfinished"]) == (0, 1)
    held = [w for w in report["budgets"] if w["jobs_held"]]
    assert held and held[-1]["held"][0]["until_s"] is None  # still held when the simulation ended


def test_a_policy_document_is_applied_and_the_node_policy_asked_for_overrides_its_own() -> None:
    pods = [pod("pod-1", 8, 0, 10, qos="BE"), pod("pod-2", 8, 60, 1, qos="Guaranteed")]
    policy = document("Policy", "default", node_policy="bestfit", preemption=False)
    assert simulate(pods, gpus=8)["preemptions"] == 1
    quiet = simulate(pods, policy, gpus=8)
    assert quiet["preemptions"] == 0 and quiet["policy"] == "fgd"  # the run's node policy, not the document's


def test_a_bad_document_or_an_unknown_zone_is_refused_by_name() -> None:
    with pytest.raises(DocumentError, match=r"spec\.gpu_hours"):
        sim_config([daily("broken", 0, "hard", tenant="t")])
    with pytest.raises(ValueError, match=r"Budget 'far': spec\.timezone"):
        sim_config([document("Budget", "far", tenant="t", window="day", gpu_hours=1, timezone="Mars/Olympus")])


def test_the_cli_runs_the_example_configuration_and_prints_the_budgets_section(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["simulate", "--mode", "timed", *SLICE, "--config", str(REPO / "deploy/examples/config")]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "seed 0" in text  # the Policy document's seed, and its node policy (fgd) is the one run
    assert "budgets under fgd" in text and "team-a-monthly    hard" in text and "team-b-weekly     soft" in text

    assert main([*args, "--policy", "bestfit", "--seeds", "7", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    run = doc["policies"]["bestfit"]
    assert run["seed"] == 7 and list(doc["policies"]) == ["bestfit"]
    assert {b["budget"] for b in run["budgets"]} == {"team-a-monthly", "team-b-weekly", "research-monthly"}
    soft = [b for b in run["budgets"] if b["budget"] == "team-b-weekly" and b["used_pct"] >= 100]
    assert soft and all(b["crossed_80_s"] < b["crossed_100_s"] for b in soft)


def test_the_cli_refuses_a_bad_configuration_and_a_configuration_in_arrival_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("api_version: fedsched.io/v1\nkind: Budget\nmetadata: {name: b}\nspec: {tenant: t}\n")
    assert main(["simulate", "--mode", "timed", *SLICE, "--config", str(bad)]) == 2
    assert "--config: document 1 (Budget 'b'): spec.window" in capsys.readouterr().err
    assert main(["simulate", *SLICE, "--config", str(bad)]) == 2
    assert "--config is for --mode timed" in capsys.readouterr().err
