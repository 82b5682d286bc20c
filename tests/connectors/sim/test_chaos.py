"""``fedsched connector sim`` SIGKILLed in the middle of its work and started again: no lifecycle event is
lost or doubled, runs that spanned the kill keep their exact runtimes, and what was asked while it was
down (a placement, a cancel) is carried out after the restart."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

from connectors.sim import load_nodes
from events.catalog.inventory import NodeObserved, NodeRemoved
from events.catalog.jobs import JobCancelled, JobFailed, JobStarted, JobSucceeded
from events.log import EventLog

from .builders import FIXTURES, a_job, a_placement, cancel_request
from .logtools import Client, Tail, drain, unique

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.chaos, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[3]
NODES = FIXTURES / "sim_openb_nodes.csv"
JOBS = 12
TERMINAL = (JobSucceeded, JobFailed, JobCancelled)


async def spawn(log_url: str, cluster: str, stderr: Path) -> asyncio.subprocess.Process:
    with stderr.open("ab") as sink:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", "connector", "sim", "--cluster", cluster, "--nodes",
            str(NODES), "--log", log_url, "--speed", "200", "--seed", "5", "--start-delay-s", "5",
            "--stop-delay-s", "2", cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.DEVNULL, stderr=sink,
        )  # fmt: skip


def slots() -> list[tuple[str, int]]:
    """(node, GPU) pairs of the trace slice, one per job."""
    return [(n.name, g) for n in load_nodes(NODES).nodes for g in range(n.gpus)][:JOBS]


async def test_a_killed_connector_restarts_without_losing_or_doubling_lifecycle_events(
    sim_log: EventLog, log_url: str, tmp_path: Path
) -> None:
    cluster, stderr = unique("sim-chaos"), tmp_path / "connector.stderr"
    jobs = [f"{cluster}-job-{i}" for i in range(JOBS)]
    runtimes = {job: 20 + 25 * i for i, job in enumerate(jobs)}
    placements = [
        a_placement(job).cluster(cluster).on(node, gpu) for job, (node, gpu) in zip(jobs, slots(), strict=True)
    ]
    child = None
    async with Tail(sim_log, cluster) as tail, Client(sim_log) as client:
        try:
            await client.send(*(a_job(job).gpus(1).runtime(runtimes[job]).submitted() for job in jobs))
            child = await spawn(log_url, cluster, stderr)
            await tail.wait_for(lambda: len(tail.of(NodeObserved)) >= 24, "the first registration", timeout_s=60)
            await client.send(*(p.placed() for p in placements[:10]))

            def finished() -> set[str]:
                return {e.job_id for kind in TERMINAL for e in tail.events(kind)}  # type: ignore[attr-defined]

            def running() -> set[str]:
                return {e.job_id for e in tail.events(JobStarted)} - finished()  # type: ignore[attr-defined]

            await tail.wait_for(lambda: len(finished()) >= 3 and len(running()) >= 3, "work under way")
            child.send_signal(signal.SIGKILL)
            assert await child.wait() == -signal.SIGKILL
            # While it is down: two more placements and a cancel of the longest running job.
            await client.send(*(p.placed() for p in placements[10:]), cancel_request(jobs[9]))
            child = await spawn(log_url, cluster, stderr)
            await tail.wait_for(lambda: len(finished()) == JOBS, "every job to end", timeout_s=60)
            child.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(child.wait(), 30) == 0
            await drain(tail)
        except BaseException:
            print(stderr.read_text()[-5000:])
            raise
        finally:
            if child is not None and child.returncode is None:
                child.kill()
                await child.wait()

    started = Counter(e.job_id for e in tail.events(JobStarted))
    ended = Counter(e.job_id for kind in TERMINAL for e in tail.events(kind))  # type: ignore[attr-defined]
    assert started == Counter(jobs) and ended == Counter(jobs)
    assert [e.job_id for e in tail.events(JobCancelled)] == [jobs[9]]
    begun = {e.data.job_id: e.time_ms for e in tail.of(JobStarted)}  # type: ignore[attr-defined]
    for envelope in tail.of(JobSucceeded):
        job = envelope.data.job_id  # type: ignore[attr-defined]
        assert envelope.time_ms - begun[job] == runtimes[job] * 1000, job
    ids = Counter(e.id for e in tail.envelopes)
    assert [i for i, n in ids.items() if n > 1] == []
    generations: dict[str, list[int]] = {}
    for envelope in tail.envelopes:
        if isinstance(envelope.data, NodeObserved | NodeRemoved):
            generations.setdefault(envelope.data.node, []).append(envelope.data.generation)
    assert all(g == sorted(set(g)) for g in generations.values()), generations
