"""The kill-anything soak (issue 19): submissions through gRPC and the intake while components are
SIGKILLed, the scheduler leader is stopped past its session timeout, and PostgreSQL and Kafka are each
stopped and started again; then no request is lost or doubled, no run is placed twice, the cycles are
contiguous and fenced, verify is identical under another PYTHONHASHSEED, the read models equal a rebuild,
the archive equals the log and the cost equals a recomputation from the events.

``make test`` runs the CI size (``tests.soak.plan.CI_SIZE``), ``make soak`` the full size
(``FEDSCHED_SOAK_SIZE=10000``). The soak starts its own Kafka and PostgreSQL in a folder under /tmp,
kept when the soak fails (the components' logs are in its ``logs``) and removed when it passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.soak.backing import KAFKA_SH, POSTGRES_PY, ROOT
from tests.soak.components import Fleet
from tests.soak.plan import SoakPlan
from tests.soak.run import run_soak

PLAN = SoakPlan.from_env()
# The CI size takes about four minutes here; a generous bound, as the machine's other work varies.
TIMEOUT_S = int(300 + 3 * PLAN.load_s + 2 * PLAN.settle_s)

NOTES = 12

pytestmark = [pytest.mark.soak, pytest.mark.chaos, pytest.mark.slow]


@pytest.mark.timeout(TIMEOUT_S)
def test_nothing_is_lost_doubled_or_unverifiable_when_anything_is_killed() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="fedsched-soak-", dir="/tmp"))
    fleets: list[Fleet] = []
    try:
        result = asyncio.run(run_soak(PLAN, workdir, fleets))
    finally:
        _last_resort(workdir, fleets)
    notes = [f"note: {n}" for n in result.notes[:NOTES]]
    notes += [f"note: ... {len(result.notes) - NOTES} more"] if len(result.notes) > NOTES else []
    report = "\n".join(["", *result.figures.lines(), *notes])
    print(report)  # `make soak` runs with -s: the figures are the point of the full run
    details = [line for v in result.violations for line in v.lines()]
    assert not result.violations, "\n".join(
        [f"the soak broke {len(result.violations)} invariants (logs in {workdir}/logs):", *details, report]
    )
    shutil.rmtree(workdir, ignore_errors=True)


def _last_resort(workdir: Path, fleets: list[Fleet]) -> None:
    """If the run was cut short (a timeout), nothing it started may outlive it: its components, its
    broker and its database."""
    for fleet in fleets:
        for component in fleet.components.values():
            if component.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(component.pid, signal.SIGKILL)
    subprocess.run(["bash", str(KAFKA_SH), "stop", str(workdir / "kafka")], cwd=ROOT, capture_output=True, timeout=120)
    subprocess.run(
        [sys.executable, str(POSTGRES_PY), "stop", str(workdir / "postgres")], cwd=ROOT, capture_output=True, timeout=60
    )
