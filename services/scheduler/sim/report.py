"""Tables, JSON, plots and CSV for simulator runs. Called by ``fedsched simulate``."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.scheduler.sim.arrival import ArrivalRun

# The FGD paper's results (unallocated GPU % at 100% arrived): default trace, median of seeds 42-51,
# per baseline; other traces, FGD only, mean of 10 seeds.
PAPER_DEFAULT = {
    "random": 13.75,
    "dotprod": 9.44,
    "clustering": 8.42,
    "packing": 8.19,
    "bestfit": 7.09,
    "fgd": 4.77,
}
PAPER_FGD_MEAN = {"gpushare40": 6.04, "multigpu50": 2.91, "gpuspec20": 5.34, "cpu050": 5.00}


def paper_reference(trace: str, policy: str) -> float | None:
    base = "fgd" if policy.startswith("fgd") else policy
    if trace == "default":
        return PAPER_DEFAULT.get(base)
    return PAPER_FGD_MEAN.get(trace) if base == "fgd" else None


def summarise(runs: Sequence[ArrivalRun]) -> dict[str, dict[str, Any]]:
    by_policy: dict[str, list[ArrivalRun]] = {}
    for r in runs:
        by_policy.setdefault(r.policy, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for policy, rs in by_policy.items():
        rs = sorted(rs, key=lambda r: r.seed)
        vals = [r.unallocated_at(100) for r in rs]
        curves = [dict(r.curve()) for r in rs]
        buckets = sorted(set().union(*curves)) if curves else []
        curve = [
            [a, round(100.0 - statistics.median(c[a] for c in curves if a in c), 2)]
            for a in buckets
            if any(a in c for c in curves)
        ]
        out[policy] = {
            "unallocated_gpu_pct_at_100": round(statistics.median(vals), 2),
            "mean_unallocated_gpu_pct_at_100": round(statistics.mean(vals), 2),
            "per_seed": {str(r.seed): v for r, v in zip(rs, vals, strict=True)},
            "frag_gpu_pct_at_100": round(statistics.median(r.frag_pct_at(100) for r in rs), 2),
            "wall_s_per_run": round(statistics.mean(r.wall_s for r in rs), 3),
            "pods_per_run": round(statistics.mean(r.pods for r in rs), 1),
            "placed_per_run": round(statistics.mean(r.placed for r in rs), 1),
            "curve": curve,
        }
    return out


def table(trace: str, summary: dict[str, dict[str, Any]], nodes: int, clusters: int) -> str:
    head = (
        f"trace {trace}: {nodes} nodes, {clusters} cluster(s); unallocated GPU % when arrived GPU demand "
        f"= 100% of capacity"
    )
    cols = f"{'policy':<11} {'median':>7} {'mean':>6} {'min':>6} {'max':>6} {'frag%':>6} {'paper':>6} {'s/run':>6}"
    lines = [head, cols, "-" * len(cols)]
    for policy, s in summary.items():
        vals = list(s["per_seed"].values())
        ref = paper_reference(trace, policy)
        lines.append(
            f"{policy:<11} {s['unallocated_gpu_pct_at_100']:>7.2f} {s['mean_unallocated_gpu_pct_at_100']:>6.2f} "
            f"{min(vals):>6.2f} {max(vals):>6.2f} {s['frag_gpu_pct_at_100']:>6.2f} "
            f"{'' if ref is None else f'{ref:.2f}':>6} {s['wall_s_per_run']:>6.2f}"
        )
    if trace == "default":
        lines.append(
            "paper (ATC'23, median of seeds 42-51): " + ", ".join(f"{k} {v}" for k, v in PAPER_DEFAULT.items())
        )
    elif trace in PAPER_FGD_MEAN:
        lines.append(f"paper FGD (mean of 10 seeds): {PAPER_FGD_MEAN[trace]}")
    return "\n".join(lines)


def write_placements(path: Path, runs: Sequence[ArrivalRun], trace: str) -> int:
    n = 0
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trace", "seed", "policy", "pod", "node", "gpu_indices", "gpu_milli_each"])
        for r in runs:
            for p in r.placements:
                w.writerow(
                    [trace, p.seed, p.policy, p.pod, p.node, "|".join(map(str, p.gpu_indices)), p.gpu_milli_each]
                )
                n += 1
    return n


def plot(path: Path, per_trace: dict[str, dict[str, dict[str, Any]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(per_trace)
    fig, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4.5), squeeze=False)
    for ax, trace in zip(axes[0], traces, strict=True):
        xs = list(range(0, 131))
        ax.plot(xs, [max(0.0, 100.0 - x) for x in xs], "k--", linewidth=1, label="ideal")
        for policy, s in per_trace[trace].items():
            pts = s["curve"]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{policy} ({s['unallocated_gpu_pct_at_100']})")
        ax.set_xlim(60, 130)
        ax.set_ylim(0, 45)
        ax.axvline(100, color="grey", linewidth=0.5)
        ax.set_xlabel("arrived GPU demand (% of GPU capacity)")
        ax.set_ylabel("unallocated GPU (%)")
        ax.set_title(f"openb {trace}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["paper_reference", "plot", "summarise", "table", "write_placements"]
