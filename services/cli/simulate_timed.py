"""``fedsched simulate --mode timed``: a trace's creation and deletion times replayed through full scheduling
cycles, under a configuration of documents if one is given, and the report (a table, or ``--json``).

Called by ``simulate_cmd`` (which registers it and fills in the defaults). Calls ``simulate_run.chosen``
(the traces and node policies asked for), ``config_cmd.read_documents`` (the files of ``--config``, read as
``fedsched apply -f`` reads them), ``services.scheduler.sim.config`` (the documents applied as the scheduler
applies them) and ``services.scheduler.sim.timed``.

Under a configuration with a Policy document the command line decides only what it names: ``--policy``
the node policies run (else the document's one), ``--seeds`` the seed (else the document's); every other
setting is the document's.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from events.catalog.documents import DocumentError
from services.cli.config_cmd import read_documents
from services.cli.main import CliError
from services.cli.simulate_run import chosen
from services.scheduler.sim.config import SimConfig, sim_config
from services.scheduler.sim.timed import NO_CONFIGURATION
from services.scheduler.sim.timed import run_timed as simulate_timed
from services.scheduler.sim.traces import default_nodes_csv, load_openb_nodes, load_pods

COLUMNS = ("jobs", "completed", "dropped", "preemptions", "mean_queue_s", "p99_queue_s", "mean_jct_s",
           "gpu_utilisation_pct", "wall_s")  # fmt: skip


def run_timed(args: argparse.Namespace) -> int:
    picked = chosen(args)
    if picked is None:
        return 2
    traces, policies = picked
    configuration = configuration_of(args.config) if args.config else NO_CONFIGURATION
    seed = args.seeds[0]
    if configuration.policy is not None:
        policies = policies if "policy" in args.given else [configuration.policy.node_policy]
        seed = seed if "seeds" in args.given else configuration.policy.seed
    nodes = load_openb_nodes(Path(args.nodes) if args.nodes else default_nodes_csv(), args.clusters)
    trace, path = traces[0]
    pods = [p for p in load_pods(path) if p.creation_s is not None]
    if not pods:
        print(f"fedsched simulate: {path} has no creation times", file=sys.stderr)
        return 2
    out: dict[str, Any] = {}
    for pol in policies:
        m = simulate_timed(nodes, pods, pol, seed, args.max_pods, configuration)
        out[pol.value] = m
        print(f"{trace} {pol.value}: {m['completed']}/{m['jobs']} done in {m['wall_s']} s", file=sys.stderr)
    if args.json:
        print(json.dumps({"mode": "timed", "trace": trace, "policies": out}))
        return 0
    print(f"timed replay of {trace} ({len(nodes)} nodes, {args.clusters} cluster(s), seed {seed})")
    print(f"{'policy':<10} " + " ".join(f"{c:>14}" for c in COLUMNS))
    for name, m in out.items():
        print(f"{name:<10} " + " ".join(f"{m[c]:>14}" for c in COLUMNS))
    for name, m in out.items():
        if m["budgets"]:
            print(f"\nbudgets under {name} (windows by the calendar from the trace's time 0, 1970-01-01T00:00Z):")
            print("\n".join(budget_lines(m["budgets"])))
    return 0


def configuration_of(paths: list[str]) -> SimConfig:
    """The documents of ``paths`` applied; ``CliError`` (exit 2) naming the file, document or zone at fault."""
    try:
        return sim_config(read_documents(paths))
    except (DocumentError, ValueError) as error:
        raise CliError(f"--config: {error}", 2) from None


def budget_lines(budgets: list[dict[str, Any]]) -> list[str]:
    """One row per budget and window: limit and use (GPU-hours), when 80% and 100% were crossed, the jobs
    held back, for how long in all (hours) and the longest."""
    head = ("budget", "mode", "window", "limit", "used", "used%", "80% at", "100% at", "held", "held h", "max h")
    rows = [head]
    for b in budgets:
        rows.append(
            (
                b["budget"], b["mode"], b["window"], str(b["limit_gpu_hours"]), f"{b['used_gpu_hours']:.1f}",
                str(b["used_pct"]), _moment(b["crossed_80_s"]), _moment(b["crossed_100_s"]), str(b["jobs_held"]),
                f"{b['held_s'] / 3600:.1f}", f"{b['longest_held_s'] / 3600:.1f}",
            )
        )  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return [
        "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    ]


def _moment(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%MZ")


__all__ = ["budget_lines", "configuration_of", "run_timed"]
