"""One soak, start to finish: the backing services and the components up, the load beside the chaos,
the system left to quiesce, then every invariant checked and the figures taken.

Called by ``tests/soak/test_soak.py``. The recipe:
 1. start the soak's own Kafka and PostgreSQL (``backing``) and every component (``components``);
 2. once the API answers and a scheduler leads, send the load (``load``) while the chaos (``chaos``)
    kills, stops and restarts;
 3. wait until every job has ended (``settle``), stop every writer but the projections worker and the
    archiver, and wait until both are at the end of the log; stop them too;
 4. judge (``judge``): read the log back and hold it to the invariants, the fencing, the replays,
    the archive and the cost.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.api.auth import AuthConfig, issue_token
from tests.soak import replays
from tests.soak.backing import ROOT, Backing
from tests.soak.chaos import Chaos
from tests.soak.components import (
    AUDIENCE,
    CHECKPOINT_EVERY_S,
    CLUSTERS,
    ISSUER,
    PORTS_NEEDED,
    Fleet,
    free_ports,
    specs,
)
from tests.soak.figures import Figures
from tests.soak.invariants import Violation
from tests.soak.judge import Soaked, judge
from tests.soak.load import Load, Outcome
from tests.soak.plan import SoakPlan
from tests.soak.settle import ArchiveWatch, JobEnds, ProjectionsWatch, until

WRITERS = ("sim-a", "sim-b", "api", "intake", "governance", "scheduler-1", "scheduler-2")
_READY_S = 180.0
_CAUGHT_UP_S = 300.0


@dataclass
class SoakResult:
    figures: Figures
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


async def run_soak(plan: SoakPlan, workdir: Path, fleet_out: list[Fleet]) -> SoakResult:
    """``fleet_out`` receives the fleet as soon as it exists, for a caller's last-resort clean-up."""
    began = time.monotonic()
    figures = Figures(size=plan.size, seed=plan.seed, grpc_submissions=plan.size, intake_submissions=plan.intake_size)
    result = SoakResult(figures)
    backing = Backing(workdir)
    fleet: Fleet | None = None
    try:
        await backing.start()
        _write_node_lists(plan, workdir)
        secret = secrets.token_hex(32)
        api_port, *metrics_ports = free_ports(PORTS_NEEDED)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FEDSCHED_")}
        env.update(PYTHONPATH=str(ROOT), FEDSCHED_JWT_SECRET=secret)
        public_key = await replays.keygen(workdir / "audit-signing.key")
        if public_key is None:
            result.notes.append(
                "no signed checkpoints: this fedsched has no `audit keygen`; the chain is verified unsigned"
            )
        else:
            env.update(FEDSCHED_AUDIT_SIGNING_KEY_FILE=str(workdir / "audit-signing.key"))
        ports = [api_port, *metrics_ports]
        fleet = Fleet.build(
            specs(backing, workdir, ports, signing=public_key is not None), env, workdir / "logs", plan.seed
        )
        fleet_out.append(fleet)
        fleet.start()
        token = issue_token(
            AuthConfig(ISSUER, AUDIENCE, hs256_secret=secret.encode()),
            subject="soak",
            tenants=["*"],
            roles=["admin"],
            ttl_s=int(plan.load_s + plan.settle_s) + 3600,
        )
        load = Load(plan, f"127.0.0.1:{api_port}", token, backing.log_url)
        if not await until(lambda: _ready(fleet, load), _READY_S):
            exits = {e.name: f"{e.name} exited {e.code}: {e.tail}" for e in fleet.unplanned()}  # the latest of each
            raise RuntimeError(
                "\n".join(
                    [
                        f"the API or a scheduler leader was not up within {_READY_S:.0f} s ({workdir}/logs)",
                        *exits.values(),
                    ]
                )
            )
        loaded = time.monotonic()
        chaos = Chaos(plan, fleet, backing)
        outcomes, chaos_log = await asyncio.gather(load.run(), chaos.run())
        figures.load_s = time.monotonic() - loaded
        settled = time.monotonic()
        await _settle(plan, fleet, backing, outcomes, result)
        figures.settle_s = time.monotonic() - settled
        soaked = Soaked(plan.seed, fleet, outcomes, chaos_log, public_key, workdir / "checkpoints")
        result.violations += await judge(soaked, backing, figures)
        result.notes += [f"{e.name} exited {e.code} ({e.log.name}): {e.tail}" for e in fleet.unplanned()]
        result.notes += chaos_log.skipped
    finally:
        if fleet is not None:
            await fleet.shutdown()
        await backing.close()
        figures.duration_s = time.monotonic() - began
    return result


async def _ready(fleet: Fleet, load: Load) -> bool:
    return bool(await fleet.leaders()) and await load.api_answers()


async def _settle(
    plan: SoakPlan, fleet: Fleet, backing: Backing, outcomes: dict[str, Outcome], result: SoakResult
) -> None:
    expected = {o.job_id for o in outcomes.values() if o.job_id is not None}
    ends = JobEnds(backing.log_url)
    if not await until(lambda: _all_ended(ends, expected), plan.settle_s):
        result.notes.append(f"{len(expected - ends.ended)} jobs had not ended after {plan.settle_s:.0f} s of settling")
    await fleet.shutdown(list(WRITERS))
    worker = ProjectionsWatch(fleet.components["projections"])
    if not await until(worker.caught_up, _CAUGHT_UP_S):
        result.notes.append(
            f"the projections worker was not at the end of the log within {_CAUGHT_UP_S:.0f} s"
            f" (its last consumer lag: {worker.last})"
        )
    archive = ArchiveWatch(backing.log_url, backing.dsn, quiet_s=CHECKPOINT_EVERY_S + 2)
    if not await until(archive.quiet, _CAUGHT_UP_S):
        result.notes.append(f"the archiver was not at the end of the log within {_CAUGHT_UP_S:.0f} s")
    await fleet.shutdown()


async def _all_ended(ends: JobEnds, expected: set[str]) -> bool:
    return expected <= await ends.look()


def _write_node_lists(plan: SoakPlan, workdir: Path) -> None:
    fleets = {
        CLUSTERS[0]: ("A100-SXM4-80GB", 8, 2_500_000),
        CLUSTERS[1]: ("T4", 4, 400_000),
    }
    for cluster, (model, gpus, rate) in fleets.items():
        (workdir / f"{cluster}.yaml").write_text(
            f"cluster:\n  currency: EUR\n  gpu_rates: {{{model}: {rate}}}\n"
            f"nodes:\n  - {{name: {cluster}-n, count: {plan.nodes_per_cluster}, cpu_milli: 64000,"
            f" memory_mib: 524288, gpus: {gpus}, model: {model}}}\n"
        )
