"""The simulator's arrival-mode handler, ``fedsched simulate --mode arrival`` (``simulate_cmd`` registers it
and stays light; this one imports numpy and friends), and the choice of traces and node policies both modes
share (``simulate_timed`` has the timed mode). Calls ``services.scheduler.sim``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from services.scheduler.core.policy.model import NodePolicy
from services.scheduler.sim import report
from services.scheduler.sim.arrival import ArrivalRun, run_arrival
from services.scheduler.sim.traces import default_nodes_csv, load_openb_nodes, load_pods, pods_csv

TRACE_NAMES = ("default", "multigpu50", "gpushare40", "gpuspec20", "cpu050")


class SimError(Exception):
    pass


def _trace_paths(spec: str) -> list[tuple[str, Path]]:
    out = []
    for part in [x.strip() for x in spec.split(",") if x.strip()]:
        path = Path(part)
        if path.suffix == ".csv" or path.exists():
            name = path.stem.removeprefix("openb_pod_list_")
        else:
            name, path = part, pods_csv(part)
        if not path.exists():
            raise SimError(f"pod list not found: {path} (set FEDSCHED_TRACES or pass --pods FILE.csv)")
        out.append((name, path))
    return out


def _policies(spec: str) -> list[NodePolicy]:
    names = [x.strip() for x in spec.split(",") if x.strip()]
    valid = {p.value: p for p in NodePolicy}
    bad = [n for n in names if n not in valid]
    if bad:
        raise SimError(f"unknown policy {', '.join(bad)}; choose from {', '.join(valid)}")
    return [valid[n] for n in names]


def _one(job: tuple[str, str, int, str, int, bool, str, int]) -> ArrivalRun:
    nodes_csv, pods_path, clusters, policy, seed, keep, tiebreak, coverage = job
    nodes = load_openb_nodes(Path(nodes_csv), clusters)
    pods = load_pods(Path(pods_path))
    return run_arrival(
        nodes, pods, NodePolicy(policy), seed, keep_placements=keep, tiebreak=tiebreak, typical_coverage_pct=coverage
    )


def _progress(done: int, total: int, run: ArrivalRun, trace: str) -> None:
    width = 30
    filled = width * done // total
    bar = "#" * filled + "." * (width - filled)
    print(
        f"[{bar}] {done}/{total} {trace} {run.policy} seed {run.seed}: unallocated "
        f"{run.unallocated_at(100):.2f}% ({run.placed}/{run.pods} placed) in {run.wall_s:.2f} s",
        file=sys.stderr,
        flush=True,
    )


def chosen(args: argparse.Namespace) -> tuple[list[tuple[str, Path]], list[NodePolicy]] | None:
    """The traces and policies asked for; None (said on stderr) when one of them does not exist."""
    try:
        return _trace_paths(args.pods), _policies(args.policy)
    except SimError as e:
        print(f"fedsched simulate: {e}", file=sys.stderr)
        return None


def run_arrival_cli(args: argparse.Namespace) -> int:
    picked = chosen(args)
    if picked is None:
        return 2
    traces, policies = picked
    nodes_csv = Path(args.nodes) if args.nodes else default_nodes_csv()
    if not nodes_csv.exists():
        print(f"fedsched simulate: node list not found: {nodes_csv}", file=sys.stderr)
        return 2
    keep = bool(args.placements_out)
    node_count = len(load_openb_nodes(nodes_csv))
    jobs = [
        (trace, (str(nodes_csv), str(path), args.clusters, p.value, seed, keep, args.tiebreak, args.typical_coverage))
        for trace, path in traces
        for p in policies
        for seed in args.seeds
    ]
    t0 = time.perf_counter()
    runs: dict[str, list[ArrivalRun]] = {t: [] for t, _ in traces}
    if args.workers > 1:
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            for k, (run, (trace, _)) in enumerate(zip(pool.map(_one, [j for _, j in jobs]), jobs, strict=True)):
                runs[trace].append(run)
                _progress(k + 1, len(jobs), run, trace)
    else:
        for k, (trace, job) in enumerate(jobs):
            run = _one(job)
            runs[trace].append(run)
            _progress(k + 1, len(jobs), run, trace)
    per_trace = {t: report.summarise(rs) for t, rs in runs.items()}
    if args.placements_out:
        n = 0
        with Path(args.placements_out).open("w") as f:
            f.write("")
        for t, rs in runs.items():
            n += _append_placements(Path(args.placements_out), rs, t, first=n == 0)
        print(f"wrote {n} placements to {args.placements_out}", file=sys.stderr)
    if args.plot:
        report.plot(Path(args.plot), per_trace)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        first = next(iter(per_trace.values()))
        doc: dict[str, Any] = {
            "policies": first,
            "trace": traces[0][0],
            "nodes": node_count,
            "clusters": args.clusters,
            "seeds": args.seeds,
            "tiebreak": args.tiebreak,
            "typical_coverage_pct": args.typical_coverage,
        }
        if len(per_trace) > 1:
            doc["traces"] = {t: {"policies": s} for t, s in per_trace.items()}
        print(json.dumps(doc))
    else:
        for t, s in per_trace.items():
            print(report.table(t, s, node_count, args.clusters))
            print()
        print(
            f"{len(jobs)} runs in {time.perf_counter() - t0:.1f} s (ties between equal nodes: {args.tiebreak} order; "
            f"fragmentation policies scored against the shapes of {args.typical_coverage}% of the pods, fgd also "
            "against a filler per share size below their smallest)"
        )
    return 0


def _append_placements(path: Path, runs: list[ArrivalRun], trace: str, first: bool) -> int:
    if first:
        return report.write_placements(path, runs, trace)
    tmp = path.with_suffix(path.suffix + ".part")
    n = report.write_placements(tmp, runs, trace)
    with path.open("a") as out, tmp.open() as src:
        next(src)
        out.writelines(src)
    tmp.unlink()
    return n


__all__ = ["SimError", "chosen", "run_arrival_cli"]
