"""The faust host's PostgreSQL sink: one transaction of read-model rows per stage batch.

Called by the stage agents of ``projections.faust_app``. Calls asyncpg through
``projections.readmodels`` (the same tables and row converters as the in-process runner).

No log positions are written: in this host the positions an entity has applied live in the entity
itself (its faust table), and the rows written are a pure function of the entity, replaced whole,
so writing the same entity again writes the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from projections import readmodels


class Sink:
    def __init__(self, dsn: str, schema: str, *, pool_size: int = 10) -> None:
        self._dsn = dsn
        self.schema = schema
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self.writes = 0

    async def start(self) -> None:
        if self._pool is None:
            self._pool = await asyncpg.create_pool(self._dsn, min_size=1, max_size=self._pool_size)
            await readmodels.ensure_schema(self._pool, self.schema)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def write(self, stage: str, entities: Mapping[str, Any]) -> None:
        if self._pool is None:
            raise RuntimeError("the read-model sink is not started")
        changed = [(stage, key) for key in entities]
        await readmodels.flush(self._pool, self.schema, changed, {stage: entities}, {})
        self.writes += 1
