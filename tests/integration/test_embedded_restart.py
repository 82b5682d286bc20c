"""``fedsched up``'s composition (``services.runtime.up.start``) recovers from a PostgreSQL restart by itself.

The stack runs on a PostgreSQL of the test's own (``services.runtime.embedded_pg``, which
deploy/local/postgres.py runs), so the test can stop it and start it again on the same port. Jobs are
submitted over gRPC and through the intake topic before and after the restart. Then: every job is placed
exactly once, every intake request has exactly one answer, health is back to SERVING and no component is
left dead; the scheduler leads again (its election connection was rebuilt). A second test kills the
server ``fedsched up`` started itself: up starts it again. A third makes a component crash: health names
it while it is down, and a fresh instance replaces it, counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from events.catalog.topics import DECISIONS
from events.log.postgres import PostgresEventLog
from events.plumbing.tasks import Ended
from services.api.client import CallError, Client, ClientConfig
from services.api.pb import jobs_pb2
from services.api.server import INTAKE_HEALTH
from services.runtime import embedded_pg, up
from tests.integration.restart_support import (
    NOT_SERVING,
    SERVING,
    answers,
    ce_of,
    eventually,
    health,
    publish,
    read_topic,
    submission,
    unique,
)

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(300)]

NODES = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "proj_nodes.csv"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest_asyncio.fixture(loop_scope="session")
async def own_postgres(tmp_path: Path) -> AsyncIterator[tuple[Path, str]]:
    """A PostgreSQL server of this test's own, which it may stop and start (never the shared one)."""
    folder = tmp_path / "pg"
    dsn = await asyncio.to_thread(embedded_pg.start, folder)
    try:
        yield folder, dsn
    finally:
        await asyncio.to_thread(embedded_pg.stop, folder)


class Stack:
    def __init__(self, running: up.Running) -> None:
        self.running = running
        self.api = running.config.api_listen
        assert running.api_token is not None
        self.token = running.api_token
        self.client = Client(ClientConfig(server=self.api, token=self.token, timeout_s=10))
        self.jobs: list[str] = []
        self.requests: list[str] = []  # ce_ids of intake requests

    async def submit_grpc(self, count: int) -> None:
        for _ in range(count):
            spec = jobs_pb2.JobSpec(
                name="train",
                tenant="team-a",
                expected_runtime_s=60,
                resources=jobs_pb2.Resources(cpu_milli=1000, memory_mib=1024, gpus=1),
            )
            request = jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=unique("grpc"))
            for attempt in range(20):  # a client retries with the same request id: one job whatever happens
                try:
                    response = await self.client.call(self.client.jobs.SubmitJob, request)
                    break
                except CallError:
                    if attempt == 19:
                        raise
                    await asyncio.sleep(0.5)
            self.jobs.append(response.job_id)

    async def submit_intake(self, count: int) -> None:
        records = [submission(unique("intake"), self.token) for _ in range(count)]
        log = PostgresEventLog(self.running.dsn, pool_size=2)
        await log.start()
        try:
            await publish(log, records)
        finally:
            await log.close()
        self.requests += [ce_of(record) for record in records]

    async def placements(self) -> Counter[str]:
        log = PostgresEventLog(self.running.dsn, pool_size=2)
        await log.start()
        try:
            records = await read_topic(log, DECISIONS.name)
            found = await answers(log)
        finally:
            await log.close()
        for ce_id in self.requests:
            for ident, kind in found.records.get(ce_id, []):
                if kind == "JobSubmitted" and ident.startswith("submit-"):
                    job = ident.removeprefix("submit-")
                    if job not in self.jobs:
                        self.jobs.append(job)
        self._answers = found
        placed = [json.loads(r.value)["job_id"] for r in records if r.header("ce_type") == b"io.fedsched.JobPlaced"]
        return Counter(placed)

    async def all_placed(self) -> bool:
        placed = await self.placements()
        return self._answers.answered(self.requests) and all(placed[job] >= 1 for job in self.jobs)

    async def serving(self) -> bool:
        return (
            self.running.metrics.failing() == []
            and await health(self.api, "") == SERVING
            and await health(self.api, INTAKE_HEALTH) == SERVING
        )

    async def not_serving(self) -> bool:
        return bool(self.running.metrics.failing()) and await health(self.api, "") == NOT_SERVING


@contextlib.asynccontextmanager
async def started(config: up.UpConfig) -> AsyncIterator[Stack]:
    running = await up.start(config)
    stack = Stack(running)
    try:
        yield stack
    finally:
        await stack.client.close()
        await up.stop(running)


def config_in(folder: Path, dsn: str | None) -> up.UpConfig:
    return up.UpConfig(
        data_dir=folder,
        dsn=dsn,
        metrics_listen="127.0.0.1:0",
        sim_nodes=NODES,
        sim_speed=200.0,
        api_listen=f"127.0.0.1:{free_port()}",
    )


async def check_recovered(stack: Stack) -> None:
    await eventually(stack.serving, "health is back to SERVING with nothing failing", timeout_s=90)
    await stack.submit_grpc(4)
    await stack.submit_intake(4)
    await eventually(stack.all_placed, "the jobs submitted after the restart are placed", timeout_s=90)
    placed = await stack.placements()
    assert len(stack.jobs) == 16
    assert {job: placed[job] for job in stack.jobs} == dict.fromkeys(stack.jobs, 1)  # each placed once
    assert {c: stack._answers.kinds(c) for c in stack.requests} == {c: ["JobSubmitted"] for c in stack.requests}
    running = stack.running
    assert running.scheduler.metrics.leader, "the scheduler leads again: its election connection was rebuilt"
    assert not [name for name, s in running.supervised.items() if s.down]
    assert not [t.get_name() for t in running.tasks if t.done()], "a component's task ended"
    assert await stack.serving()


async def test_the_embedded_stack_rides_out_a_postgres_restart(own_postgres: tuple[Path, str], tmp_path: Path) -> None:
    folder, dsn = own_postgres
    async with started(config_in(tmp_path / "up", dsn)) as stack:
        await stack.submit_grpc(4)
        await stack.submit_intake(4)
        await eventually(stack.all_placed, "the first jobs are placed", timeout_s=90)
        leader_before = stack.running.scheduler

        await asyncio.to_thread(embedded_pg.stop, folder)
        await eventually(stack.not_serving, "health reports the database gone", timeout_s=60)
        assert await asyncio.to_thread(embedded_pg.start, folder) == dsn  # the same port
        await check_recovered(stack)
        assert stack.running.scheduler is leader_before  # ridden out, not restarted
        assert sum(s.attempts for s in stack.running.supervised.values()) == 0


async def test_up_starts_its_own_postgres_again_when_the_server_dies(tmp_path: Path) -> None:
    folder = tmp_path / "up"
    async with started(config_in(folder, None)) as stack:
        await stack.submit_grpc(4)
        await stack.submit_intake(4)
        await eventually(stack.all_placed, "the first jobs are placed", timeout_s=90)
        pid = int((folder / "postgres" / "pgdata" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)  # a crash: nobody starts it but fedsched up
        await eventually(
            lambda: asyncio.sleep(0, result=stack.running.supervised["postgres"].attempts >= 1),
            "up notices the server is gone and starts it again",
        )
        await check_recovered(stack)
        assert stack.running.supervised["postgres"].restarts


async def test_a_crashed_component_is_reported_down_replaced_and_counted(
    fresh_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from projections.inprocess.runner import ProjectionRunner

    crashing = asyncio.Event()
    real_step = ProjectionRunner.step

    async def step(self: ProjectionRunner, *, timeout_s: float = 0.0) -> object:
        if crashing.is_set():
            raise KeyError("a bug in a projection")
        return await real_step(self, timeout_s=timeout_s)

    monkeypatch.setattr(ProjectionRunner, "step", step)
    async with started(config_in(tmp_path / "up", fresh_database)) as stack:
        running = stack.running
        first = running.projections
        await stack.submit_grpc(2)
        await eventually(stack.all_placed, "the first jobs are placed", timeout_s=90)
        with caplog.at_level(logging.INFO, logger="fedsched.supervisor"):
            crashing.set()

            async def down() -> bool:
                return "projections" in running.metrics.failing() and running.supervised["projections"].down

            await eventually(down, "health names the crashed component", timeout_s=30)
            crashing.clear()

            async def back() -> bool:
                return running.metrics.failing() == [] and running.projections is not first

            await eventually(back, "a fresh instance runs in its place", timeout_s=60)
        assert running.supervised["projections"].restarts[Ended.CRASHED] >= 1
        lines = [r.getMessage() for r in caplog.records if "component_restarted" in r.getMessage()]
        assert lines[0] == "event=component_restarted name=projections attempt=1 reason=crashed", lines
        body = running.metrics.render()
        assert 'fedsched_component_restarts_total{component="projections",reason="crashed"}' in body
        assert 'fedsched_component_up{component="projections"} 1' in body
        # The replacement folds on from the read models: the jobs submitted now show up in them.
        await stack.submit_grpc(2)
        await eventually(stack.all_placed, "the jobs after the restart are placed", timeout_s=90)

        async def in_read_models() -> bool:
            rows = await running.pool.fetch("SELECT entity_key FROM fedsched_rm.read_jobs")
            return {r["entity_key"] for r in rows} >= set(stack.jobs)

        await eventually(in_read_models, "every job is in the read models", timeout_s=60)
        assert not [t.get_name() for t in running.tasks if t.done()]
