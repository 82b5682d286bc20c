"""The API's own PostgreSQL tables: idempotency keys of submissions and of quota requests.

Called by ``services.api.commands``. Calls asyncpg. Both tables live in their own schema (default
``fedsched_api``) beside the read models, so every API replica shares them.

The job id is derived from the key, so the key alone (the primary key) decides a conflict: a second
unique index would make a concurrent retry fail on it instead of waiting on the key.

A submission is recorded and published in one database transaction: the row is inserted (``ON CONFLICT
DO NOTHING``), the ``JobSubmitted`` is appended to the log, then the transaction commits. A concurrent
retry with the same key waits on the uncommitted row, then finds it committed and answers with its job;
if the first attempt died before its commit, the row is gone and the retry publishes again, with the
same derived event id, which the projections and the scheduler recognise as a duplicate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from services.api.errors import AlreadyExists

_LOCK = 7_215_101


@dataclass(frozen=True, slots=True)
class Submission:
    job_id: str
    tenant: str
    client_request_id: str
    spec_sha256: str
    event_json: str
    submitted_by: str
    created_ms: int


class ApiStore:
    def __init__(self, pool: asyncpg.Pool, schema: str = "fedsched_api") -> None:
        self._pool = pool
        self.schema = schema

    async def ensure_schema(self) -> None:
        s = self.schema
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK)
            await conn.execute(
                f"""
                CREATE SCHEMA IF NOT EXISTS {s};
                CREATE TABLE IF NOT EXISTS {s}.submissions (
                    tenant text NOT NULL,
                    client_request_id text NOT NULL,
                    job_id text NOT NULL,
                    spec_sha256 text NOT NULL,
                    event_json text NOT NULL,
                    submitted_by text NOT NULL,
                    created_ms bigint NOT NULL,
                    PRIMARY KEY (tenant, client_request_id));
                CREATE INDEX IF NOT EXISTS submissions_job_id ON {s}.submissions (job_id);
                CREATE TABLE IF NOT EXISTS {s}.quota_request_keys (
                    request_id text PRIMARY KEY,
                    tenant text NOT NULL,
                    spec_sha256 text NOT NULL);
                """
            )

    async def submit(self, entry: Submission, publish: Callable[[], Awaitable[object]]) -> tuple[str, bool]:
        """Record ``entry`` and run ``publish`` once per key; returns ``(job_id, created)``.

        The same key with another spec raises ``AlreadyExists``."""
        async with self._pool.acquire() as conn, conn.transaction():
            inserted = await conn.fetchval(
                f"INSERT INTO {self.schema}.submissions (tenant, client_request_id, job_id, spec_sha256, event_json,"
                " submitted_by, created_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)"
                " ON CONFLICT (tenant, client_request_id) DO NOTHING RETURNING job_id",
                entry.tenant,
                entry.client_request_id,
                entry.job_id,
                entry.spec_sha256,
                entry.event_json,
                entry.submitted_by,
                entry.created_ms,
            )
            if inserted is None:
                row = await conn.fetchrow(
                    f"SELECT job_id, spec_sha256 FROM {self.schema}.submissions"
                    " WHERE tenant = $1 AND client_request_id = $2",
                    entry.tenant,
                    entry.client_request_id,
                )
                assert row is not None  # the conflicting row committed before DO NOTHING returned
                if row["spec_sha256"] != entry.spec_sha256:
                    raise AlreadyExists(
                        "was already used for a different job spec; use a new client_request_id",
                        field="client_request_id",
                    )
                return str(row["job_id"]), False
            await publish()
            return entry.job_id, True

    async def submission(self, job_id: str) -> Submission | None:
        row = await self._pool.fetchrow(f"SELECT * FROM {self.schema}.submissions WHERE job_id = $1", job_id)
        return None if row is None else Submission(**dict(row))

    async def record_quota_request(
        self, request_id: str, tenant: str, spec_sha256: str, publish: Callable[[], Awaitable[object]]
    ) -> bool:
        """Record and publish a quota request once; ``False`` for a retry of the same request."""
        async with self._pool.acquire() as conn, conn.transaction():
            inserted = await conn.fetchval(
                f"INSERT INTO {self.schema}.quota_request_keys (request_id, tenant, spec_sha256) VALUES ($1, $2, $3)"
                " ON CONFLICT (request_id) DO NOTHING RETURNING request_id",
                request_id,
                tenant,
                spec_sha256,
            )
            if inserted is None:
                existing = await conn.fetchval(
                    f"SELECT spec_sha256 FROM {self.schema}.quota_request_keys WHERE request_id = $1", request_id
                )
                if existing != spec_sha256:
                    raise AlreadyExists("was already used for a different quota request", field="client_request_id")
                return False
            await publish()
            return True

    @asynccontextmanager
    async def decision_lock(self, request_id: str) -> AsyncIterator[None]:
        """Held while one replica decides a quota request (a transaction-scoped advisory lock)."""
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", _LOCK, request_id)
            yield
