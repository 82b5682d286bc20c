"""The API under test, in process, on a real log (Kafka and the embedded log) and real PostgreSQL.

``stack`` runs once per log for the session: topics and groups under a unique prefix on the shared log,
read models and API tables in a database of its own, the projection runner folding on demand
(``await stack.fold()``), and clients holding tokens (``stack.client(token)``).
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

from events.log import EventLog, open_log
from projections.inprocess.runner import ProjectionRunner
from services.api.client import Client, ClientConfig
from services.api.config import ApiConfig
from services.api.server import ApiServer, serve
from services.governance.api_reads import GovernanceReports
from services.governance.quota_rules import GovernanceQuotaRules
from tests.api.prefixed import PrefixedLog
from tests.api.support import AUDIENCE, ISSUER, Keys
from tests.conftest import temporary_database


@pytest.fixture(scope="session")
def keys() -> Keys:
    return Keys.make()


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def api_database(postgres_dsn: str) -> AsyncIterator[str]:
    async with temporary_database(postgres_dsn, "api") as dsn:
        yield dsn


@dataclass
class Stack:
    kind: str
    api: ApiServer
    log: PrefixedLog
    pool: asyncpg.Pool
    runner: ProjectionRunner
    keys: Keys
    config: ApiConfig
    clients: list[Client] = field(default_factory=list)

    def client(self, token: str | None) -> Client:
        client = Client(ClientConfig(server=self.api.address, token=token, timeout_s=30))
        self.clients.append(client)
        return client

    async def fold(self) -> None:
        await self.runner.catch_up()


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def stack(event_log: EventLog, log_url: str, api_database: str, keys: Keys) -> AsyncIterator[Stack]:
    kind = "kafka" if log_url.startswith("kafka://") else "pg"
    prefix = f"api{os.getpid()}-{uuid.uuid4().hex[:6]}-{kind}"
    log = PrefixedLog(event_log, prefix)
    pool = await asyncpg.create_pool(api_database, min_size=2, max_size=24)
    config = ApiConfig(
        log_url=log_url,
        dsn=api_database,
        auth=keys.auth(),
        listen="127.0.0.1:0",
        read_schema=f"rm_{kind}",
        api_schema=f"api_{kind}",
        instance=prefix,
    )
    api = await serve(config, quota_rules=GovernanceQuotaRules(), governance=GovernanceReports(), log=log, pool=pool)  # type: ignore[arg-type]
    runner = ProjectionRunner(log, pool, schema=config.read_schema, publish=False)  # type: ignore[arg-type]
    await runner.start()
    built = Stack(kind, api, log, pool, runner, keys, config)
    yield built
    for client in built.clients:
        await client.close()
    await runner.close()
    await api.stop()
    await pool.close()


@dataclass
class RunningApi:
    """``fedsched api`` running as its own process on the embedded log, in a database of its own."""

    address: str
    dsn: str
    process: subprocess.Popen[str]
    keys: Keys


def _create_database(postgres_dsn: str, name: str, drop: bool = False) -> str:
    async def run() -> None:
        admin = await asyncpg.connect(postgres_dsn)
        try:
            if drop:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            else:
                await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()

    asyncio.run(run())
    parts = urlsplit(postgres_dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def start_api(args: list[str], env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``fedsched api ...``; returns the process and its first stdout lines up to the address."""
    log_file = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "api", *args],
        stdout=subprocess.PIPE,
        stderr=log_file,
        text=True,
        env={**os.environ, **env},
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    wanted = 3 if "--dev" in args else 1  # the address, then the dev token's two lines
    seen: list[str] = []
    while len(seen) < wanted:
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            process.kill()
            raise AssertionError(f"fedsched api did not start in 60 s; see {log_path}") from None
        if line is None:
            raise AssertionError(f"fedsched api exited with {process.wait()}: {log_path.read_text()[-2000:]}")
        if seen or line.startswith("fedsched api: listening on"):
            seen.append(line)
    return process, seen


@pytest_asyncio.fixture(loop_scope="session")
async def runner(api_process: RunningApi) -> AsyncIterator[ProjectionRunner]:
    """The projections of ``api_process``'s database, folding on demand (``await runner.catch_up()``)."""
    log = open_log(api_process.dsn)
    await log.start()
    pool = await asyncpg.create_pool(api_process.dsn, min_size=1, max_size=4)
    projections = ProjectionRunner(log, pool, publish=False)
    await projections.start()
    yield projections
    await projections.close()
    await pool.close()
    await log.close()


def stop_api(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


@pytest.fixture(scope="session")
def api_process(postgres_dsn: str, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    name = f"apiproc_{uuid.uuid4().hex[:12]}"
    dsn = _create_database(postgres_dsn, name)
    folder = tmp_path_factory.mktemp("api-process")
    secret = folder / "jwt-secret"
    secret.write_bytes(keys.secret)
    args = ["--listen", "127.0.0.1:0", "--log", dsn, "--dsn", dsn, "--jwt-secret-file", str(secret)]
    args += ["--issuer", ISSUER, "--audience", AUDIENCE]
    process, lines = start_api(args, {}, folder / "api.log")
    address = lines[0].rsplit(" ", 1)[-1]
    yield RunningApi(address, dsn, process, keys)
    stop_api(process)
    _create_database(postgres_dsn, name, drop=True)
