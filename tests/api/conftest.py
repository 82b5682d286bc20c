"""The API under test, in process, on a real log (Kafka and the embedded log) and real PostgreSQL.

``stack`` runs once per log for the session: topics and groups under a unique prefix on the shared log,
read models and API tables in a database of its own, the projection runner folding on demand
(``await stack.fold()``), and clients holding tokens (``stack.client(token)``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

from events.log import EventLog
from projections.runner import ProjectionRunner
from services.api.client import Client, ClientConfig
from services.api.config import ApiConfig
from services.api.server import ApiServer, serve
from tests.api.prefixed import PrefixedLog
from tests.api.support import Keys


@pytest.fixture(scope="session")
def keys() -> Keys:
    return Keys.make()


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def api_database(postgres_dsn: str) -> AsyncIterator[str]:
    name = f"api_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    parts = urlsplit(postgres_dsn)
    yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


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
    api = await serve(config, log=log, pool=pool)  # type: ignore[arg-type]
    runner = ProjectionRunner(log, pool, schema=config.read_schema, publish=False)  # type: ignore[arg-type]
    await runner.start()
    built = Stack(kind, api, log, pool, runner, keys, config)
    yield built
    for client in built.clients:
        await client.close()
    await runner.close()
    await api.stop()
    await pool.close()
