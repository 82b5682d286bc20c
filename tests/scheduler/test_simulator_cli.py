"""The trace simulator, the CLI and the benchmark on small slices of the real traces."""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from services.cli.main import main
from services.scheduler.core.policy import NodePolicy
from services.scheduler.sim.arrival import inflate, run_arrival
from services.scheduler.sim.timed import run_timed
from services.scheduler.sim.traces import TracePod, load_openb_nodes, load_pods
from tests.scheduler.builders import a_node

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
NODES = FIX / "openb_node_list_gpu_node_slice.csv"
PODS = FIX / "openb_pod_list_default_slice.csv"

pytestmark = pytest.mark.timeout(120)


def test_inflation_appends_resampled_pods_until_demand_would_pass_130_percent():
    pods = load_pods(PODS)
    cap = sum(int(n.gpus and len(n.gpus)) for n in load_openb_nodes(NODES)) * 1000
    got = inflate(pods, 42, cap)
    assert sorted(p.name for p in got[: len(pods)]) == sorted(p.name for p in pods)
    demand = sum(p.total_gpu_milli for p in got)
    assert demand <= cap * 13 // 10 + 8000
    assert got[:20] != pods[:20]  # shuffled
    assert inflate(pods, 42, cap) == got and inflate(pods, 43, cap) != got


def test_an_arrival_run_never_allocates_more_than_it_was_asked_or_than_exists():
    run = run_arrival(load_openb_nodes(NODES), load_pods(PODS), NodePolicy.FRAGMENTATION, 42, keep_placements=True)
    assert (run.allocated <= run.arrived).all()
    assert run.allocated[-1] <= run.capacity_milli
    assert run.placed == len(run.placements) < run.pods
    used: dict[tuple[str, int], int] = defaultdict(int)
    for p in run.placements:
        for g in p.gpu_indices:
            used[(p.node, g)] += p.gpu_milli_each
    assert max(used.values()) <= 1000
    assert sum(used.values()) == run.allocated[-1]
    curve = run.curve()
    assert curve[0][0] == 0 and all(0 <= a <= 100 for _, a in curve)


def test_fragmentation_aware_placement_strands_less_than_random_on_the_slice():
    nodes, pods = load_openb_nodes(NODES), load_pods(PODS)
    fgd = [run_arrival(nodes, pods, NodePolicy.FRAGMENTATION, s).unallocated_at(100) for s in (42, 43, 44)]
    rnd = [run_arrival(nodes, pods, NodePolicy.RANDOM, s).unallocated_at(100) for s in (42, 43, 44)]
    assert sorted(fgd)[1] < sorted(rnd)[1]


def test_simulate_prints_the_json_document_and_writes_placements(tmp_path, capsys):
    out = tmp_path / "placements.csv"
    code = main([
        "simulate", "--nodes", str(NODES), "--pods", str(PODS), "--policy", "fgd,bestfit", "--seeds", "42-43",
        "--json", "--placements-out", str(out),
    ])  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["policies"]) == {"fgd", "bestfit"}
    for s in doc["policies"].values():
        assert set(s["per_seed"]) == {"42", "43"}
        assert s["unallocated_gpu_pct_at_100"] == pytest.approx(statistics.median(s["per_seed"].values()), abs=0.01)
        assert all(len(p) == 2 for p in s["curve"])
    rows = list(csv.DictReader(out.open()))
    assert {r["policy"] for r in rows} == {"fgd", "bestfit"} and {r["seed"] for r in rows} == {"42", "43"}


def test_simulate_prints_a_table_and_a_plot(tmp_path, capsys):
    png = tmp_path / "u.png"
    assert main(["simulate", "--nodes", str(NODES), "--pods", str(PODS), "--policy", "spread", "--seeds", "42",
                 "--clusters", "3", "--plot", str(png)]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "spread" in text and "3 cluster(s)" in text
    assert png.stat().st_size > 1000


def test_simulate_refuses_an_unknown_policy(capsys):
    assert main(["simulate", "--pods", str(PODS), "--nodes", str(NODES), "--policy", "magic"]) == 2
    assert "unknown policy" in capsys.readouterr().err


def test_timed_mode_reports_queueing_and_completion(capsys):
    assert main(["simulate", "--mode", "timed", "--nodes", str(NODES), "--pods", str(PODS), "--policy", "fgd",
                 "--seeds", "42", "--max-pods", "120", "--json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    m = doc["policies"]["fgd"]
    assert m["jobs"] == 120 and m["completed"] + m["dropped"] + m["unfinished"] == 120
    assert m["p50_queue_s"] <= m["p99_queue_s"] and 0 <= m["gpu_utilisation_pct"] <= 100


@pytest.mark.slow
def test_bench_scheduler_prints_fleets_as_json(capsys, monkeypatch):
    monkeypatch.setenv("FEDSCHED_TRACES", str(FIX))
    import services.scheduler.sim.traces as traces

    monkeypatch.setattr(traces, "default_nodes_csv", lambda: NODES)
    monkeypatch.setattr(traces, "pods_csv", lambda name: PODS)
    monkeypatch.setattr(traces, "load_spot_nodes", lambda path, n, k: load_openb_nodes(NODES, k)[:n])
    assert main(["bench", "scheduler", "--placements", "50", "--sizes", "30,60", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["nodes"] for f in doc["fleets"]] == [61, 30, 60]
    assert all(set(f) >= {"name", "nodes", "clusters", "placements_per_s", "p50_ms", "p99_ms"} for f in doc["fleets"])


def test_the_tie_order_is_seeded_per_run_or_the_authors_node_name_order():
    nodes, pods = load_openb_nodes(NODES), load_pods(PODS)
    by_name = [run_arrival(nodes, pods, NodePolicy.PACKING, s, keep_placements=True, tiebreak="name") for s in (42, 43)]
    seeded = run_arrival(nodes, pods, NodePolicy.PACKING, 42, keep_placements=True)
    again = run_arrival(nodes, pods, NodePolicy.PACKING, 42, keep_placements=True, tiebreak="name")
    assert [p.node for p in again.placements] == [p.node for p in by_name[0].placements]
    assert [p.node for p in seeded.placements] != [p.node for p in by_name[0].placements]
    # under the name order, the first CPU-only pod of every seed lands on the first node by name
    first = sorted(n.node_id for n in nodes)[0]
    for run in by_name:
        cpu_only = [p for p in run.placements if not p.gpu_indices]
        assert cpu_only and cpu_only[0].node == first
    with pytest.raises(ValueError, match="tiebreak"):
        run_arrival(nodes, pods, NodePolicy.PACKING, 42, tiebreak="random")


def test_timed_mode_places_a_preemptor_the_moment_its_victim_is_stopped():
    """The simulation stops a preempted job at once: the job that asked for the room starts then, not at
    the next arrival or end (here the victim's own old end, ten hours on)."""
    node = a_node("n1").gpus(8).build()
    pods = [
        TracePod("pod-be-1", 4000, 16384, 8, 1000, (), creation_s=0, deletion_s=36_000, qos="BE"),
        TracePod("pod-crit-2", 4000, 16384, 8, 1000, (), creation_s=60, deletion_s=3_660, qos="Guaranteed"),
    ]
    m = run_timed([node], pods, NodePolicy.FRAGMENTATION, seed=1, max_pods=0)
    assert m["preemptions"] == 1
    assert m["p99_queue_s"] == 0  # both started the moment they arrived (the victim's first start counts)


def test_timed_mode_runs_a_preempted_job_its_whole_runtime_again():
    node = a_node("n1").gpus(8).build()
    pods = [
        TracePod("pod-be-1", 4000, 16384, 8, 1000, (), creation_s=0, deletion_s=3_600, qos="BE"),
        TracePod("pod-crit-2", 4000, 16384, 8, 1000, (), creation_s=600, deletion_s=1_800, qos="Guaranteed"),
    ]
    m = run_timed([node], pods, NodePolicy.FRAGMENTATION, seed=1, max_pods=0)
    # The critical pod runs 600 -> 1,800 s; the best-effort one again from 1,800 s for its whole hour, to
    # 5,400 s (its first run's end at 3,600 s must not end the second run).
    assert m["preemptions"] == 1 and m["completed"] == 2
    assert m["mean_jct_s"] == (5_400 + 1_200) / 2


def test_the_fragmentation_policies_can_be_scored_against_every_shape_the_measure_stays_the_papers(capsys):
    nodes, pods = load_openb_nodes(NODES), load_pods(PODS)
    papers = run_arrival(nodes, pods, NodePolicy.FRAGMENTATION, 42, keep_placements=True)
    every = run_arrival(nodes, pods, NodePolicy.FRAGMENTATION, 42, keep_placements=True, typical_coverage_pct=100)
    assert [p.node for p in every.placements] != [p.node for p in papers.placements]
    # The reported fragmentation is the paper's (95% of the pods) whatever the policy scored against: while
    # the two runs place alike, they report alike (against every shape, the CPU-only share, and so the
    # expected fragment of an idle GPU, would differ).
    same = next(k for k, (a, b) in enumerate(zip(every.placements, papers.placements, strict=False)) if a != b)
    assert same > 0 and every.frag[:same].tolist() == papers.frag[:same].tolist()
    for bad in (0, 101, True):
        with pytest.raises(ValueError, match="typical_coverage_pct must be from 1 to 100"):
            run_arrival(nodes, pods, NodePolicy.FRAGMENTATION, 42, typical_coverage_pct=bad)
    assert main(["simulate", "--nodes", str(NODES), "--pods", str(PODS), "--policy", "fgd", "--seeds", "42",
                 "--typical-coverage", "100", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["typical_coverage_pct"] == 100
    with pytest.raises(SystemExit):
        main(["simulate", "--nodes", str(NODES), "--pods", str(PODS), "--typical-coverage", "0"])
    assert "--typical-coverage: must be from 1 to 100, not 0" in capsys.readouterr().err
    assert main(["simulate", "--mode", "timed", "--nodes", str(NODES), "--pods", str(PODS),
                 "--typical-coverage", "100"]) == 2  # fmt: skip
    assert "--typical-coverage is for --mode arrival" in capsys.readouterr().err
