"""PostgreSQL read models, written transactionally (``projections.readmodel.reader`` reads them).

Called by the projection hosts. Calls asyncpg, with the tables of ``projections.readmodel.rows.tables`` and
the row converters of ``projections.readmodel.rows.entities``. One ``flush`` writes, in one transaction, the rows of
every changed entity, the entities' state (so a restarted host resumes without replaying history) and
the log positions they cover. A replayed or duplicated event is therefore either before the stored
position (skipped by the host) or already inside the entity's own applied positions (ignored by the
reducer): the read models change exactly once per event.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncpg

from events.catalog.lifecycle import FINAL_STATUSES
from events.log.contract import TopicPartition
from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.entities import TABLES
from projections.readmodel.rows.tables import POSITIONS, STATE, bookkeeping_ddl
from projections.stages.codec import ENTITY_TYPES, LAYOUT, StateCodecError, dumps, loads
from projections.stages.jobs import STAGE as JOB_STAGE
from projections.stages.jobs import JobView

if TYPE_CHECKING:  # asyncpg's pool proxy is generic in its stubs only
    from asyncpg.pool import PoolConnectionProxy

    PooledConnection = PoolConnectionProxy[asyncpg.Record]

log = logging.getLogger("fedsched.projections")

_SCHEMA_LOCK = 7_215_003


def _qualified(schema: str, table: str) -> str:
    return f"{schema}.{table}"


async def ensure_schema(pool: asyncpg.Pool, schema: str) -> None:
    """Create what is missing, columns added since a table was made included. Nothing else of an
    existing table is touched: even ``IF NOT EXISTS`` DDL takes locks that would deadlock against a
    running writer, so the check comes first. (A new column is filled by the replay a new
    ``STATE_FORMAT`` starts.)"""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        for table in TABLES.values():
            if await conn.fetchval("SELECT to_regclass($1)", f"{schema}.{table.name}") is None:
                await conn.execute(table.ddl(schema))
            else:
                present = {
                    row["column_name"]
                    for row in await conn.fetch(
                        "SELECT column_name FROM information_schema.columns"
                        " WHERE table_schema = $1 AND table_name = $2",
                        schema,
                        table.name,
                    )
                }
                for name, sql in table.columns:
                    if name not in present:
                        await conn.execute(f"ALTER TABLE {schema}.{table.name} ADD COLUMN {name} {sql}")
            for name, ddl in table.index_ddl(schema):  # also on tables made before the index existed
                if await conn.fetchval("SELECT to_regclass($1)", name) is None:
                    await conn.execute(ddl)
        if await conn.fetchval("SELECT to_regclass($1)", f"{schema}.{STATE}") is None:
            await conn.execute(bookkeeping_ddl(schema))


async def drop_schema(pool: asyncpg.Pool, schema: str) -> None:
    await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def load_positions(pool: asyncpg.Pool, schema: str) -> dict[tuple[str, int], int]:
    rows = await pool.fetch(f"SELECT topic, partition, next_offset FROM {schema}.{POSITIONS}")
    return {(row["topic"], row["partition"]): row["next_offset"] for row in rows}


STATE_FORMAT = 13
"""The format of the stored entities: raise it whenever a fold changes what the read models say (the log
is then replayed into them). A change of a stored class's fields needs no raise: the stage codec's layout
fingerprint (``projections.stages.codec.LAYOUT``) is stored beside it in the marker and changes by itself,
and a marker of another format or layout means the same replay; classes may move between modules freely
(the codec names them by tag).
1: up to the batch folding of the projections; 2: running totals and plain published facts; 3: the
quota's holdings and released runs and the fleet's nodes and pending jobs in persistent collections;
4: the job view keeps its facts in job order (and what waits), so its answer does not depend on the
order its partitions are read in; 5: replicas sharing a node count there (one allocation per node and
job), a run's start and cluster are the current run's, and the jobs table has ``queued_since_ms``; 6: the
stages moved to ``projections.stages`` (the same fields); 7: an event appended again changes nothing (no
window of recent ids; the latest report and the lifecycle steps taken are kept per entity), and the
entities are stored in the stage codec's format (``projections.stages.codec``), no longer as pickles, with
a JSON marker (``{"format": 7, "layout": ...}``); 8: a waiting job's view keeps where it stands (the
category of its wait, its places in the federation's order and in its own queue, its estimated start:
``JobQueued`` v2), in four columns of the jobs table, and the runtime each job was submitted with (what a
budget's projection expects a running job to hold), so the jobs it had are filled in by the replay; 9: the
NPUs a placement holds (the job's placement, the node's allocation, its free NPUs and NPU model in three
columns of the nodes table); a
run that failed for a cause that may be retried leaves its job queued for the scheduler's verdict (not
failed), and the jobs table counts the ``retries``; 10: NPU time is counted (a run that held NPUs reports
NPU time apart from its GPU time, priced at the cluster's rate for the NPU model), usage buckets are kept
per device kind (``tenant|cluster|kind|model|hour``) and the usage table has a ``kind`` column; a node keeps
its failed NPUs (never free) and the nodes table counts its ``npus_healthy``; a queue counts its NPU-hours
(``QuotaUsageUpdated`` v2, the quota table's ``npu_hours_milli``); 11: a run grows by
``JobReplicasAdded`` (the job's placement, its nodes' allocations and its queue hold count every replica it
holds; a queue holds what a run holds, not what its job asks; its device time counts an added replica from
when it was added); 12: NPU health is folded as GPU health is (a health report's NPU samples; a failed NPU
counts among the node's failures and lowers its health and its cluster's stability), and the nodes table
counts its ``npus_degraded``; 13: a spread inference service's run lives in parts, one per cluster
(``JobReplicasAdded`` v2 naming another cluster opens one; a run-end event ends only its cluster's part;
``JobRunClosed`` ends the run), each replica names its cluster (the placement's fifth entry), the jobs
table has the ``clusters`` the run holds replicas in, its ``parts`` and the ``spread_clusters`` it asked,
and a queue holds a run's part by cluster and node (a run spread over clusters may hold nodes of one name
in two of them: one part's release gave back the other's hold, and its GPU time was not counted)."""
_FORMAT_KEY = ("_format", "")
ENDED_JOBS = f"{JOB_STAGE}.ended"
"""The stage name an ended job's view is stored under: not loaded at start (the in-process host keeps
only open jobs in memory, and reads an ended one back when an event about it arrives)."""


def ended(stage: str, entity: Any) -> bool:
    """Whether an entity is a job view that has ended (kept out of memory by the in-process host)."""
    return stage == JOB_STAGE and isinstance(entity, JobView) and entity.status in FINAL_STATUSES


_MARKER = json.dumps({"format": STATE_FORMAT, "layout": LAYOUT}, sort_keys=True).encode()
"""What the format row holds: the format and layout the entities beside it were written in."""


def _marker_problem(stored: bytes | None) -> str | None:
    """Why entities stored beside the format row ``stored`` cannot be loaded (None: they can)."""
    if stored is None:
        return "no format marker beside stored entities"
    try:
        marker = json.loads(stored)
    except (ValueError, RecursionError):  # a pickle (format 6 and before), or anything else: never unpickled
        return "a format marker of an older format (not JSON)"
    if not isinstance(marker, dict):
        return "a format marker that is not a JSON object"
    if marker.get("replay"):
        return f"marked for a replay: {marker['replay']}"
    if marker.get("format") != STATE_FORMAT or marker.get("layout") != LAYOUT:
        found = f"format {marker.get('format')!r}, layout {marker.get('layout')!r}"
        return f"entities of {found}; this code writes format {STATE_FORMAT}, layout {LAYOUT}"
    return None


def _entity_type(stage: str) -> type:
    entity = ENTITY_TYPES.get(JOB_STAGE if stage == ENDED_JOBS else stage)
    if entity is None:
        raise StateCodecError("stage", f"no stage is named {stage[:80]!r}")
    return entity


async def load_state(pool: asyncpg.Pool, schema: str) -> dict[str, dict[str, Any]] | None:
    """The stored entities, by stage and key; None when they were written in another ``STATE_FORMAT`` or
    layout, or one of them cannot be read (the caller then replays the log into fresh read models: see
    ``reset``). The read models come from the log: a state row altered by someone else costs a replay,
    never a wrong read model, and never a crash at every start."""
    stored = await pool.fetchval(
        f"SELECT state FROM {schema}.{STATE} WHERE stage = $1 AND entity_key = $2", *_FORMAT_KEY
    )
    if stored is None and await pool.fetchval(f"SELECT count(*) FROM {schema}.{STATE}") == 0:
        return {}
    problem = _marker_problem(stored)
    if problem is not None:
        log.warning("event=projection_state_replay schema=%s reason=%r", schema, problem)
        return None
    tables: dict[str, dict[str, Any]] = {}
    async with pool.acquire() as conn, conn.transaction():
        async for row in conn.cursor(
            f"SELECT stage, entity_key, state FROM {schema}.{STATE} WHERE stage <> $1 AND stage <> $2",
            _FORMAT_KEY[0],
            ENDED_JOBS,
        ):
            stage, key = row["stage"], row["entity_key"]
            try:
                tables.setdefault(stage, {})[key] = loads(row["state"], _entity_type(stage))
            except StateCodecError as error:
                reason = f"{stage}/{key}: {error}"
                log.error("event=projection_state_unreadable schema=%s reason=%r replay=true", schema, reason)
                return None
    return tables


async def ended_job_keys(pool: asyncpg.Pool, schema: str) -> set[str]:
    """The jobs whose views are stored as ended (their keys only)."""
    rows = await pool.fetch(f"SELECT entity_key FROM {schema}.{STATE} WHERE stage = $1", ENDED_JOBS)
    return {row["entity_key"] for row in rows}


async def load_ended_jobs(pool: asyncpg.Pool, schema: str, keys: Iterable[str]) -> dict[str, Any]:
    """The stored views of ended jobs among ``keys``. One that cannot be read marks the stored state for a
    replay (the next ``load_state`` returns None) and raises its ``StateCodecError``: the host stops
    rather than fold onto a view it does not know, and its next start replays the log."""
    rows = await pool.fetch(
        f"SELECT entity_key, state FROM {schema}.{STATE} WHERE stage = $1 AND entity_key = ANY($2::text[])",
        ENDED_JOBS,
        sorted(keys),
    )
    views: dict[str, Any] = {}
    for row in rows:
        try:
            views[row["entity_key"]] = loads(row["state"], JobView)
        except StateCodecError as error:
            reason = f"{ENDED_JOBS}/{row['entity_key']}: {error}"
            log.error("event=projection_state_unreadable schema=%s reason=%r replay=next_start", schema, reason)
            await pool.execute(
                f"UPDATE {schema}.{STATE} SET state = $3 WHERE stage = $1 AND entity_key = $2",
                *_FORMAT_KEY,
                json.dumps({"replay": reason[:1000]}).encode(),
            )
            raise
    return views


async def reset(pool: asyncpg.Pool, schema: str) -> None:
    """Forget every entity, row and position, so the host folds the log again from its start."""
    async with pool.acquire() as conn, conn.transaction():
        for table in TABLES.values():
            await conn.execute(f"DELETE FROM {_qualified(schema, table.name)}")
        await conn.execute(f"DELETE FROM {schema}.{STATE}")
        await conn.execute(f"DELETE FROM {schema}.{POSITIONS}")


async def flush(
    pool: asyncpg.Pool,
    schema: str,
    changed: Iterable[tuple[str, str]],
    entities: Mapping[str, Mapping[str, Any]],
    positions: Mapping[tuple[str, int], int],
) -> None:
    by_stage: dict[str, list[str]] = {}
    for stage, key in sorted(changed):
        by_stage.setdefault(stage, []).append(key)
    async with pool.acquire() as conn, conn.transaction():
        for stage, keys in by_stage.items():
            of_stage = entities.get(stage, {})
            await _replace_rows(conn, schema, stage, keys, _rows(stage, keys, of_stage))
            states: list[tuple[str, str, bytes]] = []
            gone: list[str] = []
            for key in keys:
                entity = of_stage.get(key)
                if entity is None:
                    gone.append(key)
                    continue
                states.append((ENDED_JOBS if ended(stage, entity) else stage, key, dumps(entity)))
            if stage == JOB_STAGE:  # a job view is stored under one of two names: the other one goes
                await conn.execute(
                    f"DELETE FROM {schema}.{STATE} WHERE stage = ANY($1::text[]) AND entity_key = ANY($2::text[])",
                    [JOB_STAGE, ENDED_JOBS],
                    keys,
                )
            if states:
                await conn.executemany(
                    f"INSERT INTO {schema}.{STATE} (stage, entity_key, state) VALUES ($1, $2, $3)"
                    " ON CONFLICT (stage, entity_key) DO UPDATE SET state = EXCLUDED.state",
                    states,
                )
            if gone and stage != JOB_STAGE:
                await conn.execute(
                    f"DELETE FROM {schema}.{STATE} WHERE stage = $1 AND entity_key = ANY($2::text[])",
                    stage,
                    gone,
                )
        await conn.execute(
            f"INSERT INTO {schema}.{STATE} (stage, entity_key, state) VALUES ($1, $2, $3)"
            " ON CONFLICT (stage, entity_key) DO UPDATE SET state = EXCLUDED.state",
            *_FORMAT_KEY,
            _MARKER,
        )
        if positions:
            items = sorted(positions.items())
            await conn.execute(
                f"INSERT INTO {schema}.{POSITIONS} (topic, partition, next_offset)"
                " SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[])"
                " ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
                [tp[0] for tp, _ in items],
                [tp[1] for tp, _ in items],
                [offset for _, offset in items],
            )


@dataclass(frozen=True, slots=True)
class Changes:
    """What a projection step changed: the (stage, key) of every entity it touched, and every entity
    by stage and key (a touched one that is gone is absent)."""

    changed: Iterable[tuple[str, str]]
    entities: Mapping[str, Mapping[str, Any]]


class ReadModelSink:
    """The in-process projection host's sink (``events.hosting.sink.Sink``): a step's changed entities
    (rows and states) and the log positions they cover, in one transaction (``flush``)."""

    def __init__(self, pool: asyncpg.Pool, schema: str) -> None:
        self.pool = pool
        self.schema = schema

    async def commit(self, outputs: Changes, positions: Mapping[TopicPartition, int]) -> None:
        stored = {(tp.topic, tp.partition): offset for tp, offset in positions.items()}
        await flush(self.pool, self.schema, outputs.changed, outputs.entities, stored)


async def replace_rows(pool: asyncpg.Pool, schema: str, stage: str, entities: Mapping[str, Any]) -> None:
    """Replace, in one transaction, the rows of these entities of one stage (None: the entity is gone):
    the faust host's write, whose entities and positions live in its changelogs, not here."""
    keys = sorted(entities)
    rows = _rows(stage, keys, entities)  # made first: the transaction stays open for the writes only
    async with pool.acquire() as conn, conn.transaction():
        await _replace_rows(conn, schema, stage, keys, rows)


def _rows(stage: str, keys: list[str], entities: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """The rows of these entities, in key order (a gone entity, None, has none)."""
    table = TABLES[stage]
    return [row for key in keys if (entity := entities.get(key)) is not None for row in table.rows(key, entity)]


async def _replace_rows(
    conn: PooledConnection, schema: str, stage: str, keys: list[str], rows: list[tuple[Any, ...]]
) -> None:
    """Every row of these entities goes and their rows come back whole, so writing an entity again
    writes the same rows."""
    table = TABLES[stage]
    await conn.execute(f"DELETE FROM {_qualified(schema, table.name)} WHERE entity_key = ANY($1::text[])", keys)
    if rows:
        await conn.copy_records_to_table(
            table.name, schema_name=schema, records=rows, columns=[c for c, _ in table.columns]
        )


async def checksums(pool: asyncpg.Pool, schema: str) -> dict[str, str]:
    """A digest of each read-model table's content, independent of physical row order (the reader's)."""
    return await ReadModels(pool, schema).checksums()
