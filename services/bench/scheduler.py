"""``fedsched bench scheduler``: placement decisions per second and per-decision latency, by fleet size.

Called by ``services.cli.bench_cmd``. Fleets: the openb fleet (1,213 nodes, one cluster) and federations
of 10 clusters built from the spot-GPU node list repeated to about 1k, 4k and 17k nodes. The workload is
the openb default trace's pod shapes, single replicas, placed one at a time through the same path the
cycle uses for a single-replica job (best node per cluster, then the federation score); once the fleet is
80% allocated the oldest placements depart, so the measurement stays in a steady, realistic state. Prints
figures; it never asserts them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("scheduler", help="placement throughput and latency of the scheduling core")
    p.add_argument("--policy", default="fgd", help="node policy (default: fgd)")
    p.add_argument("--placements", type=int, default=4000, help="timed placements per fleet")
    p.add_argument("--sizes", default="1000,4000,17000", help="node counts of the 10-cluster federations")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def _measure(name: str, nodes: list[Any], pods: list[Any], policy: str, count: int, seed: int) -> dict[str, Any]:
    from collections import deque

    import numpy as np

    from services.scheduler.core.policy.federation import choose_replica_across_clusters
    from services.scheduler.core.policy.fleet import FleetState
    from services.scheduler.core.policy.fragmentation import FragModel, typical_shapes
    from services.scheduler.core.policy.model import ClusterWeights, NodePolicy
    from services.scheduler.core.policy.placer import Placer

    fleet = FleetState(nodes)
    # As the cycle scores: our policy also against a filler per share size below the typical ones.
    fillers = NodePolicy(policy) is NodePolicy.FRAGMENTATION
    frag = FragModel(typical_shapes((p.shape() for p in pods), 95, fillers), fleet.models)
    placer = Placer(fleet, NodePolicy(policy), frag, seed=seed)
    rng = np.random.Generator(np.random.PCG64(seed))
    demands = [p.demand() for p in pods]
    capacity = fleet.capacity_gpu_milli()
    live: deque[tuple[Any, Any]] = deque()
    allocated = 0
    weights = ClusterWeights()
    for d in sorted(set(demands), key=repr):  # a running scheduler's caches are warm
        placer.keys(d)
    lat = np.zeros(count, dtype=np.float64)
    done = failed = 0
    warm = min(500, count)
    k = 0
    while done < count:
        d = demands[int(rng.integers(len(demands)))]
        while allocated > capacity * 8 // 10 and live:
            p, dd = live.popleft()
            placer.release(p, dd)
            allocated -= dd.total_gpu_milli
        t0 = time.perf_counter()
        got = choose_replica_across_clusters(placer, d, {}, weights)
        if got is not None:
            p = placer.place(d, got[0])
        dt = time.perf_counter() - t0
        k += 1
        if got is None:
            failed += 1
            if failed > 10 * count:
                break
            continue
        live.append((p, d))
        allocated += d.total_gpu_milli
        if k > warm:
            lat[done] = dt
            done += 1
    lat = lat[:done]
    total = float(lat.sum())
    return {
        "name": name,
        "nodes": fleet.size,
        "clusters": len(fleet.clusters),
        "placements": int(done),
        "placements_per_s": round(done / total, 1) if total else 0.0,
        "p50_ms": round(float(np.percentile(lat, 50)) * 1000, 4) if done else 0.0,
        "p99_ms": round(float(np.percentile(lat, 99)) * 1000, 4) if done else 0.0,
        "policy": policy,
    }


def run(args: argparse.Namespace) -> int:
    from services.scheduler.sim.traces import (
        default_nodes_csv,
        load_openb_nodes,
        load_pods,
        load_spot_nodes,
        pods_csv,
        spot_nodes_csv,
    )

    try:
        pods = load_pods(pods_csv("default"))
        openb = load_openb_nodes(default_nodes_csv())
    except FileNotFoundError as e:
        print(f"fedsched bench scheduler: trace not found: {e.filename} (set FEDSCHED_TRACES)", file=sys.stderr)
        return 2
    fleets: list[tuple[str, list[Any]]] = [("openb-1213", openb)]
    for size in [int(x) for x in args.sizes.split(",") if x.strip()]:
        fleets.append((f"spot-federation-{size}", load_spot_nodes(spot_nodes_csv(), size, 10)))
    results = []
    for name, nodes in fleets:
        r = _measure(name, nodes, pods, args.policy, args.placements, args.seed)
        results.append(r)
        if not args.json:
            print(
                f"{r['name']:<24} {r['nodes']:>6} nodes {r['clusters']:>3} clusters  "
                f"{r['placements_per_s']:>9.1f} placements/s  p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms",
                flush=True,
            )
    if args.json:
        print(json.dumps({"fleets": results}))
    else:
        base = [r for r in results if r["name"].startswith("spot-")]
        if len(base) > 1:
            b0 = base[0]
            print("scaling (per-decision p50 relative to the smallest federation):")
            for r in base:
                ratio_nodes = r["nodes"] / b0["nodes"]
                ratio_time = r["p50_ms"] / b0["p50_ms"] if b0["p50_ms"] else 0.0
                print(f"  {r['nodes']:>6} nodes: x{ratio_nodes:.1f} nodes -> x{ratio_time:.2f} time per decision")
    return 0


__all__ = ["register", "run"]
