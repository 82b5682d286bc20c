"""A recorded stream from the openb trace through the projections, on real Kafka and the embedded
log, into real PostgreSQL read models, checked against answers computed independently."""

from __future__ import annotations

import pickle
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
import pytest_asyncio

from events.catalog.topics import DEAD_LETTERS, TOPICS, Cleanup, TopicSpec
from events.log import EventLog, OutRecord, TopicPartition
from events.log.deadletter import SOURCE
from events.log.publisher import to_record
from events.log.reading import read_to_end
from projections.inprocess.runner import ProjectionRunner
from projections.readmodel import writer as readmodels
from tests.projections.recorded import FAILED_NODE, Expected, build

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]


@pytest_asyncio.fixture(loop_scope="session")
async def pool(fresh_database: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=4)
    yield pool
    await pool.close()


async def isolated_topics(event_log: EventLog, prefix: str) -> dict[str, str]:
    """Fresh copies of the source topics, so this test sees only its own stream."""
    names = {}
    specs = []
    for spec in TOPICS:
        name = f"{prefix}.{spec.name}"
        names[spec.name] = name
        specs.append(TopicSpec(name, spec.partitions, spec.key, Cleanup.DELETE, -1, spec.purpose))
    await event_log.create_topics(specs)
    return names


async def append_stream(event_log: EventLog, names: dict[str, str], chunk: int = 200) -> None:
    envelopes, _ = build()
    producer = await event_log.producer()
    records = [to_record(envelope) for envelope in envelopes]
    records = [type(r)(names[r.topic], value=r.value, key=r.key, headers=r.headers) for r in records]
    for start in range(0, len(records), chunk):
        await producer.append(records[start : start + chunk])
    await producer.close()


async def read_models(pool: asyncpg.Pool, schema: str) -> dict[str, list[asyncpg.Record]]:
    return {
        name: await pool.fetch(f"SELECT * FROM {schema}.{name}")
        for name in ("read_jobs", "read_nodes", "read_quota", "read_usage", "read_clusters", "read_shapes")
    }


def check(models: dict[str, list[asyncpg.Record]], expected: Expected) -> None:
    jobs = {row["entity_key"]: row for row in models["read_jobs"]}
    assert {job: row["status"] for job, row in jobs.items()} == expected.statuses
    nodes = {(row["cluster"], row["node"]): row for row in models["read_nodes"]}
    assert len(nodes) == expected.nodes
    allocated = {key: row["gpu_allocated_milli"] for key, row in nodes.items() if row["gpu_allocated_milli"]}
    assert allocated == expected.node_allocated
    failed = nodes[FAILED_NODE]
    assert failed["gpu_capacity_milli"] == (failed["gpus"] - 1) * 1000
    assert failed["failures"] == 1 and failed["health_milli"] < 1000
    assert all(row["health_milli"] == 1000 for key, row in nodes.items() if key != FAILED_NODE)
    quota = {row["tenant"]: row for row in models["read_quota"]}
    for tenant, milli_ms in expected.gpu_milli_ms_by_tenant.items():
        assert quota[tenant]["gpu_hours_milli"] == milli_ms // 3_600_000
    assert {f"{t}/default": row["running_jobs"] for t, row in quota.items() if row["running_jobs"]} == dict(
        expected.running_by_queue
    )
    cost: dict[str, int] = defaultdict(int)
    for row in models["read_usage"]:
        cost[row["tenant"]] += row["cost_micro"]
    assert dict(cost) == dict(expected.cost_micro_by_tenant)
    assert len(models["read_clusters"]) == expected.clusters
    assert sum(row["count"] for row in models["read_shapes"]) == len(expected.statuses)


async def test_recorded_stream_gives_the_independently_computed_read_models_and_rebuild_equals_live(
    event_log: EventLog, pool: asyncpg.Pool, make_topic
) -> None:  # type: ignore[no-untyped-def]
    prefix = (await make_topic(1)).replace(".", "-")
    names = await isolated_topics(event_log, prefix)
    sources = [names[t] for t in ("fedsched.inventory", "fedsched.jobs", "fedsched.decisions", "fedsched.governance")]
    live = ProjectionRunner(event_log, pool, schema="live", topics=sources, publish=False, batch=300)
    await live.start()
    await append_stream(event_log, names)
    await live.catch_up()
    _, expected = build()
    check(await read_models(pool, "live"), expected)
    # Only open jobs stay in memory; ended ones are read back when an event about them arrives.
    in_memory = live.store.tables.get("jobs", {})
    open_jobs = {job for job, status in expected.statuses.items() if status not in ("succeeded", "failed", "cancelled")}
    assert set(in_memory) == open_jobs and len(open_jobs) < len(expected.statuses)

    # Deliver every event twice: the read models do not change.
    before = await readmodels.checksums(pool, "live")
    await append_stream(event_log, names)
    await live.catch_up()
    assert await readmodels.checksums(pool, "live") == before
    await live.close()

    # Entities stored by a version of the stages with another layout: replayed from the start, same tables.
    await pool.execute("UPDATE live.projection_state SET state = $1 WHERE stage = '_format'", pickle.dumps(1))
    replayed = ProjectionRunner(event_log, pool, schema="live", topics=sources, publish=False, batch=300)
    await replayed.start()
    assert replayed.store.tables == {}
    await replayed.catch_up()
    await replayed.close()
    assert await readmodels.checksums(pool, "live") == before

    # A rebuild from offset 0 into fresh tables equals the live tables.
    rebuild = ProjectionRunner(event_log, pool, schema="rebuild", topics=sources, publish=False, batch=5000)
    await rebuild.start()
    await rebuild.catch_up()
    await rebuild.close()
    assert await readmodels.checksums(pool, "rebuild") == before


async def test_a_stream_written_in_transactions_is_folded_without_waiting_on_its_markers(
    event_log: EventLog, make_topic: Callable[..., Awaitable[str]], pool: asyncpg.Pool
) -> None:
    """As the scheduler and the API write: each append a transaction, which leaves a marker after its
    records in every partition it wrote to. The runner once read each partition that ended on a marker
    with a one-second wait for records that never came, and ran four times slower (bench projections)."""
    prefix = (await make_topic(1)).replace(".", "-")
    names = await isolated_topics(event_log, prefix)
    envelopes, expected = build()
    records = [to_record(envelope) for envelope in envelopes]
    records = [type(r)(names[r.topic], value=r.value, key=r.key, headers=r.headers) for r in records]
    producer = await event_log.producer(f"recorded-{prefix}")
    for start in range(0, len(records), 200):
        await producer.append(records[start : start + 200])
    await producer.close()
    sources = [names[t] for t in ("fedsched.inventory", "fedsched.jobs", "fedsched.decisions", "fedsched.governance")]
    waited_for_nothing: list[object] = []

    class Watched:
        """The log, with every reader's empty long waits noted (the embedded log reads every partition
        in one query: only Kafka's runner uses a reader here)."""

        def __getattr__(self, name: str) -> object:
            return getattr(event_log, name)

        async def reader(self) -> object:
            reader = await event_log.reader()
            real = reader.read

            async def read(tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0) -> list:
                got = await real(tp, offset, max_records=max_records, timeout_s=timeout_s)
                if not got and timeout_s >= 1.0:
                    waited_for_nothing.append((tp, offset))
                return got

            reader.read = read  # type: ignore[method-assign]
            return reader

    runner = ProjectionRunner(Watched(), pool, schema="txn", topics=sources, publish=False, batch=300)  # type: ignore[arg-type]
    await runner.start()
    await runner.catch_up()
    await runner.close()
    check(await read_models(pool, "txn"), expected)
    assert waited_for_nothing == []


async def test_a_rebuild_writes_nothing_to_the_log_not_even_dead_letters(
    event_log: EventLog, make_topic: Callable[..., Awaitable[str]], pool: asyncpg.Pool
) -> None:
    """A rebuild re-reads what the live host already handled: its dead letters are written once, by the
    live host (every rebuild wrote them again, under the live host's group name)."""
    await event_log.create_topics(TOPICS)  # the dead-letter topic is the deployment's, not a private copy
    prefix = (await make_topic(1)).replace(".", "-")
    names = await isolated_topics(event_log, prefix)
    jobs = names["fedsched.jobs"]
    producer = await event_log.producer()
    await producer.append([OutRecord(jobs, value=b"{not json", key=b"j-bad")])
    await producer.close()

    async def letters() -> int:
        reader = await event_log.reader()
        try:
            records = []
            async for batch in read_to_end(reader, TopicPartition(DEAD_LETTERS.name, 0)):
                records += batch
        finally:
            await reader.close()
        return sum(1 for r in records if (r.header(SOURCE) or b"").startswith(jobs.encode()))

    for schema, publish, written in (("rebuilt", False, 0), ("served", True, 1)):
        runner = ProjectionRunner(event_log, pool, schema=schema, topics=[jobs], publish=publish)
        await runner.start()
        await runner.catch_up()
        await runner.close()
        assert runner.dead_lettered_total == 1 and await letters() == written, schema
