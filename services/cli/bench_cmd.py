"""Sub-commands: ``fedsched bench ...``, benchmarks that print figures (never assertions).

Each area owns its benchmark module; this one only gathers them under ``bench``.
"""

from __future__ import annotations

import argparse
import importlib

BENCH_MODULES = (
    "events.bench.log",
    "services.bench.scheduler",
    "services.bench.verify",
    "services.bench.e2e",
    "projections.bench.throughput",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = sub.add_parser("bench", help="benchmarks that print figures")
    bench_sub = bench.add_subparsers(dest="bench", metavar="WHAT")
    for name in BENCH_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise
            continue
        module.register(bench_sub)
