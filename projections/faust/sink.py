"""The faust host's PostgreSQL sink: one transaction of read-model rows per stage batch.

Called by the stage agents of ``projections.faust.app``. Calls the read-model writer
(``projections.readmodel.writer.replace_rows``: the same read models as the in-process runner writes).

Only rows are written. In this host the positions an entity has applied, and the entity itself,
live in the stage's faust table (its changelog), not in ``projection_state``/``projection_positions``;
the rows are a pure function of the entity and replaced whole, so writing an entity again writes
the same rows.

So a write that failed can simply be tried again: while PostgreSQL is away, ``write`` retries with
backoff (``events.plumbing.outage``; ``/healthz`` says ``postgres``) and the stage's batch waits, unacknowledged,
instead of the worker crashing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from events.plumbing.outage import Outage, transient
from projections.readmodel import writer as readmodels


class Sink:
    def __init__(self, dsn: str, schema: str, *, pool_size: int = 10) -> None:
        self._dsn = dsn
        self.schema = schema
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self.writes = 0
        self.outage = Outage("projections")

    async def start(self) -> None:
        if self._pool is None:
            self._pool = await asyncpg.create_pool(self._dsn, min_size=1, max_size=self._pool_size)
            await readmodels.ensure_schema(self._pool, self.schema)

    async def close(self) -> None:
        self.outage.forget()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def write(self, stage: str, entities: Mapping[str, Any]) -> None:
        """Replace the rows of these entities of one stage (None: the entity is gone), once PostgreSQL
        answers."""
        while True:
            try:
                await self._write(stage, entities)
            except Exception as error:
                if not transient(error):
                    raise
                await self.outage.wait("postgres", error)
            else:
                self.outage.recovered()
                return

    async def _write(self, stage: str, entities: Mapping[str, Any]) -> None:
        if self._pool is None:
            raise RuntimeError("the read-model sink is not started")
        await readmodels.replace_rows(self._pool, self.schema, stage, entities)
        self.writes += 1
