"""The distributed projection host on real Kafka and PostgreSQL: `fedsched projections worker` processes
fed the recorded openb stream, checked against the independently computed answers and against a clean
rebuild by the in-process runner; crashed with SIGKILL mid-stream; two of them sharing and handing over
partitions; every event delivered twice; upgraded over what a worker of another entity layout left."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as KafkaPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import OffsetAndMetadata

from events.catalog.topics import DEAD_LETTERS, PROFILES, QUOTA_USAGE, Cleanup, TopicSpec
from events.log.contract import LogRecord, OutRecord, TopicPartition
from events.log.deadletter import REASON
from events.log.kafka import KafkaEventLog
from events.log.publisher import to_record
from events.log.reading import read_to_end
from events.wire.codec import decode
from events.wire.envelope import Envelope
from projections.bench.throughput import synthetic
from projections.bench.workers import STAGES
from projections.faust.config import WorkerConfig
from projections.inprocess.runner import ProjectionRunner
from projections.readmodel import writer as readmodels
from tests.projections.faust_harness import WorkerProcess, append_causally, wait_members, wait_quiet
from tests.projections.recorded import build
from tests.projections.test_recorded_stream import check, isolated_topics, read_models
from tests.services.test_up_embedded import free_port

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

QUIET_S = 120.0


@pytest_asyncio.fixture(loop_scope="session")
async def kafka_log(kafka_bootstrap: str) -> AsyncIterator[KafkaEventLog]:
    log = KafkaEventLog(kafka_bootstrap)
    await log.start()
    yield log
    await log.close()


@pytest_asyncio.fixture(loop_scope="session")
async def pool(fresh_database: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=4)
    yield pool
    await pool.close()


class Deployment:
    """One isolated deployment: its own topics under a prefix, app id (consumer group) and schema."""

    def __init__(self, bootstrap: str, dsn: str, log: KafkaEventLog, tmp_path: Path) -> None:
        tag = uuid.uuid4().hex[:10]
        self.log = log
        self.tmp_path = tmp_path
        self.config = WorkerConfig(
            broker=bootstrap,
            dsn=dsn,
            app_id=f"fw-{tag}",
            topic_prefix=f"fw{tag}",
            schema="live",
            partitions=4,
            session_timeout_s=6.0,
        )
        self.names: dict[str, str] = {}
        self.workers: list[WorkerProcess] = []

    async def create_topics(self) -> None:
        self.names = await isolated_topics(self.log, self.config.topic_prefix)

    def worker(self, name: str, extra: tuple[str, ...] = ()) -> WorkerProcess:
        data_dir = self.tmp_path / name
        data_dir.mkdir(exist_ok=True)
        config = WorkerConfig(**{**self.config.__dict__, "data_dir": data_dir})
        worker = WorkerProcess(config, self.tmp_path / f"{name}.log", extra)
        worker.start()
        self.workers.append(worker)
        return worker

    async def append(self, envelopes: list[Envelope]) -> None:
        await append_causally(self.log, self.names, envelopes)

    async def quiet(self) -> None:
        await wait_quiet(self.config, timeout_s=QUIET_S, workers=[w for w in self.workers if w.alive])

    async def rebuild(self, pool: asyncpg.Pool, schema: str = "rebuild") -> dict[str, str]:
        """A clean rebuild from offset 0 by the in-process runner, into another schema."""
        sources = [self.names[spec] for spec in ("fedsched.inventory", "fedsched.jobs", "fedsched.decisions")]
        sources.append(self.names["fedsched.governance"])
        runner = ProjectionRunner(self.log, pool, schema=schema, topics=sources, publish=False)
        await runner.start()
        await runner.catch_up()
        await runner.close()
        return await readmodels.checksums(pool, schema)

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.alive:
                worker.kill()


@pytest_asyncio.fixture(loop_scope="session")
async def deployment(
    kafka_bootstrap: str, fresh_database: str, kafka_log: KafkaEventLog, tmp_path: Path
) -> AsyncIterator[Deployment]:
    deployment = Deployment(kafka_bootstrap, fresh_database, kafka_log, tmp_path)
    await deployment.create_topics()
    yield deployment
    deployment.stop_all()


async def wait_for(condition: Callable[[], object], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():  # type: ignore[misc]
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def jobs_projected(pool: asyncpg.Pool) -> int:
    try:
        return int(await pool.fetchval("SELECT count(*) FROM live.read_jobs"))
    except asyncpg.UndefinedTableError:
        return 0


async def read_topic(log: KafkaEventLog, topic: str) -> list[LogRecord]:
    reader = await log.reader()
    try:
        out: list[LogRecord] = []
        for partition in range(await log.partitions(topic)):
            async for batch in read_to_end(reader, TopicPartition(topic, partition), max_records=5000):
                out.extend(batch)
        return out
    finally:
        await reader.close()


@pytest.mark.timeout(240)
async def test_one_worker_gives_the_computed_read_models_publishes_versioned_outputs_and_dead_letters_junk(
    deployment: Deployment, pool: asyncpg.Pool
) -> None:
    envelopes, expected = build()
    producer = await deployment.log.producer()
    junk = OutRecord(deployment.names["fedsched.jobs"], b"{not json", b"job-junk", (("ce_specversion", b"1.0"),))
    await producer.append([junk])
    await producer.close()
    deployment.worker("w1")
    await deployment.append(envelopes)
    await deployment.quiet()

    check(await read_models(pool, "live"), expected)

    # The unreadable record went to the dead letters, whole and with the reason; the rest went on.
    dead = await read_topic(deployment.log, deployment.names[DEAD_LETTERS.name])
    assert [record.value for record in dead] == [b"{not json"]
    assert b"ce_id" in (dead[0].header(REASON) or b"")
    # Every changelog is compacted and never expires by time; every internal topic has its partitions.
    admin = AIOKafkaAdminClient(bootstrap_servers=deployment.config.broker)
    await admin.start()
    try:
        config = deployment.config
        changelogs = [config.changelog_topic(stage) for stage in STAGES]
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in changelogs])
        for response in described:
            for _, _, _, topic, entries in response.resources:
                settings = {entry[0]: entry[1] for entry in entries}
                assert (settings["cleanup.policy"], settings["retention.ms"]) == ("compact", "-1"), topic
        topics = {
            t["topic"]: len(t["partitions"])
            for t in await admin.describe_topics([*changelogs, config.stage_topic("nodes")])
        }
        assert topics[config.stage_topic("nodes")] == topics[config.changelog_topic("nodes")] == config.partitions
        assert topics[config.changelog_topic("fleet")] == 1
    finally:
        await admin.close()
    # Profiles and quota usage were published once each, versioned, in the CloudEvents binding.
    for spec in (PROFILES, QUOTA_USAGE):
        published = [decode(r.headers, r.value) for r in await read_topic(deployment.log, deployment.names[spec.name])]
        assert published and len({e.id for e in published}) == len(published)
        assert all(getattr(e.data, "version", 0) >= 1 for e in published)


@pytest.mark.chaos
@pytest.mark.timeout(240)
async def test_a_worker_killed_mid_stream_and_restarted_ends_equal_to_a_clean_rebuild(
    deployment: Deployment, pool: asyncpg.Pool
) -> None:
    envelopes, expected = build()
    half = len(envelopes) // 2
    first = deployment.worker("w1")
    await deployment.append(envelopes[:half])
    await wait_for(lambda: _more_than(pool, 40), "the worker to project some jobs")
    first.kill()  # mid-stream: records taken, some folded, sent or written, offsets not all committed
    await deployment.append(envelopes[half:])
    deployment.worker("w1-again")
    await deployment.quiet()

    check(await read_models(pool, "live"), expected)
    assert await readmodels.checksums(pool, "live") == await deployment.rebuild(pool)


async def _more_than(pool: asyncpg.Pool, jobs: int) -> bool:
    return await jobs_projected(pool) > jobs


@pytest.mark.timeout(240)
async def test_two_workers_share_the_partitions_and_one_takes_over_when_the_other_stops(
    deployment: Deployment, pool: asyncpg.Pool
) -> None:
    envelopes, expected = build()
    setup = [e for e in envelopes if e.time_ms < envelopes[0].time_ms + 60_000]  # clusters, quotas, nodes
    rest = envelopes[len(setup) :]
    deployment.worker("w1")
    second = deployment.worker("w2")
    await wait_members(deployment.config, 2, timeout_s=60)
    await deployment.append(setup)
    await deployment.quiet()
    await deployment.append(rest[: len(rest) // 2])
    await wait_for(lambda: _more_than(pool, 40), "the workers to project some jobs")
    second.stop()  # graceful: it commits what it acknowledged and leaves; the other takes its partitions
    await deployment.append(rest[len(rest) // 2 :])
    await deployment.quiet()

    models = await read_models(pool, "live")
    check(models, expected)
    rebuilt = await deployment.rebuild(pool)
    live = await readmodels.checksums(pool, "live")
    # Nothing lost or counted twice: the totals (usage and cost, shapes, clusters) equal a rebuild's.
    for table in ("read_usage", "read_shapes", "read_clusters", "read_fleet_models"):
        assert live[table] == rebuilt[table], table


@pytest.mark.timeout(240)
async def test_every_event_delivered_twice_changes_nothing(deployment: Deployment, pool: asyncpg.Pool) -> None:
    envelopes, expected = build()
    deployment.worker("w1")
    await deployment.append(envelopes)
    await deployment.quiet()
    once = await readmodels.checksums(pool, "live")

    await deployment.append(envelopes)  # the same events (same ids) at new offsets
    await deployment.quiet()
    assert await readmodels.checksums(pool, "live") == once
    check(await read_models(pool, "live"), expected)


# An entity pickled in a layout this code cannot load (a class that is gone): loading it raises.
UNLOADABLE = b"\x80\x02cprojections.jobs\nJobViewV1\n)\x81}b."


@pytest.mark.timeout(240)
async def test_a_worker_upgraded_over_the_changelogs_of_another_entity_layout_rebuilds_from_the_start(
    deployment: Deployment, pool: asyncpg.Pool
) -> None:
    envelopes, expected = build()
    await deployment.append(envelopes)
    # What a worker of the previous layout left under the names it used (the app id alone): changelogs
    # holding entities this code cannot load, and its group committed at the end of every source.
    config, log = deployment.config, deployment.log
    old = {stage: f"{config.app_id}-{config.table_name(stage)}-changelog" for stage in STAGES}
    specs = [TopicSpec(t, config.stage_partitions(s), "entity", Cleanup.COMPACT, -1, "old") for s, t in old.items()]
    await log.create_topics(specs)
    producer = await log.producer()
    await producer.append([OutRecord(name, UNLOADABLE, b'"job-1"', (), 0) for name in old.values()])
    await producer.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=config.broker, group_id=config.app_id, enable_auto_commit=False)
    await consumer.start()
    try:
        sources = [KafkaPartition(t, p) for t in config.source_topics for p in range(await log.partitions(t))]
        consumer.assign(sources)
        ends = await consumer.end_offsets(sources)
        await consumer.commit({tp: OffsetAndMetadata(end, "") for tp, end in ends.items()})
    finally:
        await consumer.stop()
    assert config.group != config.app_id and config.changelog_topic("jobs") != old["jobs"]

    worker = deployment.worker("upgraded")
    await deployment.quiet()

    assert worker.alive
    check(await read_models(pool, "live"), expected)
    assert await readmodels.checksums(pool, "live") == await deployment.rebuild(pool)


@pytest.mark.timeout(240)
async def test_a_worker_serves_its_consumer_lag_and_a_transactional_backlog_is_folded_to_its_end(
    deployment: Deployment, pool: asyncpg.Pool
) -> None:
    """``fedsched_consumer_lag{component="projections"}`` of a worker: the records of the source and stage
    partitions it holds that it has not committed. A backlog written before it starts shows, and the
    gauge reads 0 once everything is folded, though each source partition ends on a transaction marker
    the group never commits past. (Those markers once kept the router holding the last records of a
    burst: its check that only markers were left lost a race with a 500 ms fetch wait, every time.)"""
    envelopes = synthetic(40, 1500)  # about 6,000 events, appended before the worker starts
    producer = await deployment.log.producer("lag-backlog")  # transactional: markers follow the records
    try:
        records = [to_record(e) for e in envelopes]
        await producer.append([OutRecord(deployment.names[r.topic], r.value, r.key, r.headers) for r in records])
    finally:
        await producer.close()
    port = free_port()
    worker = deployment.worker("w1", ("--metrics", f"127.0.0.1:{port}", "--lag-every-s", "0.2"))

    scraped: dict[str, str] = {}

    async def scrape() -> tuple[float | None, float]:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return None, 0.0  # not serving yet
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        body = (await asyncio.wait_for(reader.read(), 10)).decode()
        writer.close()
        values = dict(line.rsplit(" ", 1) for line in body.splitlines() if line and not line.startswith("#"))
        scraped.update(values)
        lag = values.get('fedsched_consumer_lag{component="projections"}')
        return (None if lag is None else float(lag)), float(
            values.get('fedsched_events_folded_total{component="projections"}', 0)
        )

    seen: list[float] = []
    # About 10 s here. The stalled router took over a minute (once more than two): until a check won the race.
    deadline = time.monotonic() + 60
    while True:
        assert worker.alive, worker.tail()
        lag, folded = await scrape()
        if lag is not None:
            seen.append(lag)
        if seen and max(seen) > 0 and lag == 0 and folded > 0:
            break
        assert time.monotonic() < deadline, f"lag never came down to 0 after a backlog: {seen[-20:]}\n{worker.tail()}"
        await asyncio.sleep(0.1)
    assert max(seen) >= 100  # the backlog was counted, not a record or a marker
    # Dead letters are counted as the in-process runner counts them (none in this backlog).
    assert float(scraped['fedsched_dead_lettered_total{component="projections"}']) == 0
    assert await jobs_projected(pool) == 1500  # and at 0 every job of it is in the read models
    await deployment.quiet()  # the group's committed offsets agree: the end, or short of it by markers only


@pytest.mark.timeout(240)
async def test_a_stopped_worker_has_committed_every_transaction_it_folded(
    deployment: Deployment, pool: asyncpg.Pool
) -> None:
    """Each transaction leaves a marker in every partition it wrote, a gap in the offsets a worker reads.
    faust counted the record after each gap twice, and each commit then went past one transaction only
    (a worker that had folded everything committed it over as many seconds as there were transactions,
    and a restart read it all again). Once everything is folded, the commit made when the worker stops
    covers all of it: each source partition ends committed, or short of its end by markers only."""
    envelopes = synthetic(20, 600)  # about 2,500 events, in about 50 transactions
    producer = await deployment.log.producer("many-transactions")
    try:
        records = [to_record(e) for e in envelopes]
        out = [OutRecord(deployment.names[r.topic], r.value, r.key, r.headers) for r in records]
        for start in range(0, len(out), 50):
            await producer.append(out[start : start + 50])
    finally:
        await producer.close()
    worker = deployment.worker("w1")

    async def folded() -> bool:
        assert worker.alive, worker.tail()
        try:
            done = await pool.fetchval("SELECT count(*) FROM live.read_jobs WHERE status = 'succeeded'")
        except asyncpg.UndefinedTableError:
            return False
        return int(done) == 600  # each job's last event, and so every source record, folded

    await wait_for(folded, "the jobs in the read models", timeout_s=120)
    worker.stop()
    # Nothing commits any more: the offsets either are at the end now or never will be. (The stage
    # topics may still have held inputs the stop cut short: they are read again by the next worker.)
    await wait_quiet(deployment.config, timeout_s=5, topics=deployment.config.source_topics)
