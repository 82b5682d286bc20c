"""Sub-commands: ``fedsched simulate``, the trace simulator that drives the scheduling core.

``--mode arrival`` reproduces the FGD paper's experiment (pods arrive, never depart) and prints the
unallocated-GPU table per policy; ``--mode timed`` replays creation and deletion times through the full
scheduling cycle (queueing, fairness, preemption), with ``--config`` under a configuration of documents
(tenants, quotas, GPU-hour budgets, the policy). Heavy modules are imported inside the handlers
(``simulate_run``, ``simulate_timed``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT_POLICIES = "fgd,fgd-paper,bestfit,packing,clustering,spread,random,dotprod"
DEFAULT_SEEDS = "42-51"


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part[1:]:
            lo, hi = part.split("-", 1)
            seeds.extend(range(int(lo), int(hi) + 1))
        else:
            seeds.append(int(part))
    if not seeds:
        raise argparse.ArgumentTypeError("no seeds")
    return seeds


def coverage_pct(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 100, not {text!r}") from None
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be from 1 to 100, not {value}")
    return value


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "simulate",
        help="replay real cluster traces through the scheduling core and measure placement quality",
        description=(
            "Replay the Alibaba openb traces through the scheduling core. Traces are read from "
            "$FEDSCHED_TRACES, else <repo>/../shared/traces."
        ),
    )
    p.add_argument("--mode", choices=["arrival", "timed"], default="arrival")
    p.add_argument("--nodes", help="node list CSV (default: openb GPU nodes)")
    p.add_argument(
        "--pods",
        default="default",
        help="pod list CSV, or trace names (default, multigpu50, gpushare40, gpuspec20, cpu050; comma-separated)",
    )
    p.add_argument(
        "--policy",
        help=f"node policies (default: {DEFAULT_POLICIES}; timed mode with a Policy document: the document's)",
    )
    p.add_argument(
        "--seeds",
        type=parse_seeds,
        help=f"e.g. 42-51 or 42,43 (default: {DEFAULT_SEEDS}; timed mode, which runs the first, with a Policy "
        "document: the document's seed)",
    )
    p.add_argument("--clusters", type=int, default=1, help="split the fleet into K clusters (federation)")
    p.add_argument("--workers", type=int, default=1, help="runs in parallel processes")
    p.add_argument(
        "--tiebreak",
        choices=["seeded", "name"],
        default="seeded",
        help="order among equally good nodes: a permutation seeded per run (default), or the node name "
        "order the FGD authors' simulator uses",
    )
    p.add_argument(
        "--typical-coverage",
        type=coverage_pct,
        metavar="PCT",
        help="arrival mode: the fragmentation policies score against the most common shapes covering PCT%% of "
        "the pods (default 95, the FGD authors'; 100: every shape), fgd also against a filler per GPU-share "
        "size below their smallest; the reported fragmentation stays at 95%%",
    )
    p.add_argument("--plot", help="write unallocated GPU %% against arrived %% to this PNG")
    p.add_argument("--placements-out", help="write every placement as CSV")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--max-pods", type=int, default=0, help="timed mode: replay only the first N pods")
    p.add_argument(
        "--config",
        action="append",
        metavar="FILE|DIR",
        help="timed mode: fedsched.io/v1 documents, as fedsched apply -f takes them (Tenant, Quota, Budget, "
        "Policy): the trace's jobs are dealt to the Tenants, hard budgets hold jobs back by the calendar's "
        "window at the simulated time, and the report has a budgets section; repeatable",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Fill in the defaults, noting which of ``--policy`` and ``--seeds`` were given (a Policy document
    gives them in timed mode otherwise)."""
    args.given = {name for name in ("policy", "seeds") if getattr(args, name) is not None}
    args.policy = args.policy or DEFAULT_POLICIES
    args.seeds = args.seeds or parse_seeds(DEFAULT_SEEDS)
    if args.mode == "timed":
        if args.typical_coverage is not None:
            print("fedsched simulate: --typical-coverage is for --mode arrival", file=sys.stderr)
            return 2
        from services.cli.simulate_timed import run_timed

        return run_timed(args)
    if args.config:
        print("fedsched simulate: --config is for --mode timed", file=sys.stderr)
        return 2
    if args.typical_coverage is None:
        args.typical_coverage = 95
    from services.cli.simulate_run import run_arrival_cli

    return run_arrival_cli(args)


__all__: list[Any] = ["coverage_pct", "parse_seeds", "register"]
