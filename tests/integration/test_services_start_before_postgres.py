"""Services started while their database is away wait for it (issue 19: no component exits on an
outage): ``fedsched scheduler`` and ``fedsched audit archive`` on the embedded log, started with their
PostgreSQL stopped, log the dependency as unreachable, keep running, and do their work once it is back.
The full-size soak saw the archiver, the API and the scheduler exit when a kill's restart met an outage.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.topics import TOPICS
from events.log.postgres import PostgresEventLog
from events.log.publisher import Publisher
from services.runtime import embedded_pg

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


@pytest_asyncio.fixture(loop_scope="session")
async def stopped_postgres(tmp_path: Path) -> AsyncIterator[tuple[Path, str]]:
    """A PostgreSQL of this test's own, made and then stopped: the test starts it again when it wants."""
    folder = tmp_path / "pg"
    dsn = await asyncio.to_thread(embedded_pg.start, folder)
    await asyncio.to_thread(embedded_pg.stop, folder)
    try:
        yield folder, dsn
    finally:
        await asyncio.to_thread(embedded_pg.stop, folder)


async def spawn(tmp_path: Path, name: str, dsn: str, *argv: str) -> tuple[asyncio.subprocess.Process, Path]:
    out = tmp_path / f"{name}.log"
    env = {**os.environ, "FEDSCHED_LOG": dsn, "FEDSCHED_POSTGRES_DSN": dsn, "PYTHONPATH": str(ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *argv,
        cwd=ROOT,
        env=env,
        stdout=out.open("w"),
        stderr=asyncio.subprocess.STDOUT,
    )
    return process, out


async def publish_one(dsn: str) -> None:
    log = PostgresEventLog(dsn)
    await log.start()
    await log.create_topics(TOPICS)
    publisher = Publisher(log, "urn:test")
    await publisher.start()
    try:
        event = ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR")
        await publisher.publish([publisher.envelope(event)])
    finally:
        await publisher.close()
        await log.close()


async def eventually(check, what: str, timeout_s: float = 90) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        assert loop.time() < deadline, f"{what}: not in time"
        await asyncio.sleep(0.2)


async def test_a_scheduler_and_an_archiver_started_before_their_database_wait_for_it(
    stopped_postgres: tuple[Path, str], tmp_path: Path
) -> None:
    folder, dsn = stopped_postgres
    scheduler, scheduler_out = await spawn(tmp_path, "scheduler", dsn, "scheduler")
    archiver, archiver_out = await spawn(tmp_path, "archiver", dsn, "audit", "archive")
    try:

        async def both_waiting() -> bool:
            texts = [scheduler_out.read_text(), archiver_out.read_text()]
            return all("event=dependency_unreachable" in text for text in texts)

        await eventually(both_waiting, "both say the database is unreachable")
        assert scheduler.returncode is None and archiver.returncode is None  # waiting, not exited

        assert await asyncio.to_thread(embedded_pg.start, folder) == dsn

        await publish_one(dsn)

        async def working() -> bool:
            assert scheduler.returncode is None and archiver.returncode is None, "a service exited"
            connection = await asyncpg.connect(dsn)
            try:
                archived = await connection.fetchval("SELECT count(*) FROM fedsched_audit")
            except asyncpg.UndefinedTableError:
                archived = 0
            finally:
                await connection.close()
            return bool(archived) and "event=leader_elected" in scheduler_out.read_text()

        await eventually(working, "both start their work once it is back")
        for out in (scheduler_out, archiver_out):
            assert "event=dependency_recovered" in out.read_text()
    finally:
        for process in (scheduler, archiver):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in (scheduler, archiver):
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
