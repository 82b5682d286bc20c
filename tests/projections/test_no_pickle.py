"""No pickle on anything another process can write (issue 19): a pickle whose ``__reduce__`` would create a
file, put where the projection hosts read, never runs and is refused with the reason.

- in ``projection_state`` on real PostgreSQL (as an entity, as an ended job's view, as the format marker):
  the in-process runner replays the log instead, into the same read models;
- on a faust stage topic, handed to a stage agent: dead-lettered whole with the reason, the batch goes on;
- in a stage table's changelog: held as unreadable, and the agent that reaches it refuses to fold;
- and on real Kafka, through a ``fedsched projections worker`` process: the pack on a stage topic is
  dead-lettered and the read models are those of the stream; the changelog value stops the worker
  with the reason (it never folds onto a state it does not know).
"""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from faust.serializers import codecs

from events.catalog.topics import DEAD_LETTERS, Cleanup, TopicSpec
from events.log import EventLog
from events.log.contract import OutRecord
from events.log.deadletter import REASON
from projections.faust.adapters import StateUnreadable, UnreadableState, readable, state_codec
from projections.faust.app import build_app
from projections.faust.wire import Item, pack, partition_of
from projections.inprocess.runner import ProjectionRunner
from projections.readmodel import writer as readmodels
from projections.stages.codec import StateCodecError
from projections.stages.core import Position
from tests.projections.faust_harness import WorkerProcess
from tests.projections.recorded import build
from tests.projections.test_faust_agents import CONFIG, Capture, FakeSink, submitted
from tests.projections.test_faust_worker import Deployment, kafka_log, read_topic  # noqa: F401 (fixtures)
from tests.projections.test_recorded_stream import append_stream, check, isolated_topics, read_models


class _Touch:
    """What an intruder writes: unpickling it creates ``path`` (any code could run instead)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def crafted(path: Path) -> bytes:
    return pickle.dumps(_Touch(path))


def test_the_crafted_payload_does_run_when_unpickled(tmp_path: Path) -> None:
    """The control: the payload the other tests plant is live."""
    path = tmp_path / "control"
    pickle.loads(crafted(path))
    assert path.exists()


# -- the in-process host, on real PostgreSQL -------------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def pool(fresh_database: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=4)
    yield pool
    await pool.close()


@pytest.mark.timeout(240)
@pytest.mark.asyncio(loop_scope="session")
async def test_a_pickle_in_projection_state_never_runs_and_the_log_is_replayed_instead(
    event_log: EventLog, pool: asyncpg.Pool, make_topic: Any, tmp_path: Path
) -> None:
    names = await isolated_topics(event_log, (await make_topic(1)).replace(".", "-"))
    sources = [names[t] for t in ("fedsched.inventory", "fedsched.jobs", "fedsched.decisions", "fedsched.governance")]
    await append_stream(event_log, names)

    async def runner() -> ProjectionRunner:
        made = ProjectionRunner(event_log, pool, schema="live", topics=sources, publish=False, batch=300)
        await made.start()
        return made

    live = await runner()
    await live.catch_up()
    await live.close()
    _, expected = build()
    check(await read_models(pool, "live"), expected)
    before = await readmodels.checksums(pool, "live")
    state = "live.projection_state"

    # 1. An entity loaded at start: refused, the runner starts from nothing and replays the log.
    touched = tmp_path / "entity"
    row = await pool.fetchrow(f"SELECT stage, entity_key FROM {state} WHERE stage = 'nodes' LIMIT 1")
    assert row is not None
    stage, key = row
    await pool.execute(
        f"UPDATE {state} SET state = $3 WHERE stage = $1 AND entity_key = $2", stage, key, crafted(touched)
    )
    replayed = await runner()
    assert replayed.store.tables == {} and not touched.exists()
    await replayed.catch_up()
    await replayed.close()
    assert await readmodels.checksums(pool, "live") == before and not touched.exists()

    # 2. An ended job's view, read back when an event about the job arrives: the step is refused with
    # the reason, the state is marked for a replay, and the next start replays.
    touched = tmp_path / "ended"
    job = await pool.fetchval(f"SELECT entity_key FROM {state} WHERE stage = $1 LIMIT 1", readmodels.ENDED_JOBS)
    assert isinstance(job, str)
    await pool.execute(
        f"UPDATE {state} SET state = $3 WHERE stage = $1 AND entity_key = $2",
        readmodels.ENDED_JOBS,
        job,
        crafted(touched),
    )
    again = await runner()
    assert job not in again.store.tables.get("jobs", {})
    await append_stream(event_log, names)  # every event again: the ended job's are among them
    with pytest.raises(StateCodecError, match="pickle"):
        await again.catch_up()
    await again.close()
    assert not touched.exists()
    marker = await pool.fetchval(f"SELECT state FROM {state} WHERE stage = '_format'")
    assert job.encode() in marker and b"pickle" in marker
    healed = await runner()
    assert healed.store.tables == {}
    await healed.catch_up()
    await healed.close()
    assert await readmodels.checksums(pool, "live") == before and not touched.exists()

    # 3. The format marker itself.
    touched = tmp_path / "marker"
    await pool.execute(f"UPDATE {state} SET state = $1 WHERE stage = '_format'", crafted(touched))
    marked = await runner()
    assert marked.store.tables == {} and not touched.exists()
    await marked.catch_up()
    await marked.close()
    assert await readmodels.checksums(pool, "live") == before


# -- a faust stage agent, without a broker ------------------------------------------------------------------


class _Message:
    def __init__(self, offset: int, value: bytes) -> None:
        self.topic, self.partition, self.offset = CONFIG.stage_topic("jobs"), 0, offset
        self.key, self.value, self.headers = None, value, [("origin", b"intruder")]


class _Event:
    """What faust hands an agent: the record as ``message`` (weak-referenceable, as faust's events are)."""

    def __init__(self, offset: int, value: bytes) -> None:
        self.message = _Message(offset, value)


def _pack_for(job: str, offset: int) -> bytes:
    envelope = submitted(job)
    return pack([Item(job, envelope.time_ms, Position("u.fedsched.jobs", 0, offset), envelope.data, envelope.id)])


@pytest.mark.timeout(60)
@pytest.mark.asyncio(loop_scope="session")
async def test_a_pickle_on_a_stage_topic_never_runs_and_is_dead_lettered_with_the_reason(tmp_path: Path) -> None:
    outbox, sink = Capture(), FakeSink()
    app: Any = build_app(CONFIG, sink=sink, outbox=outbox)  # type: ignore[arg-type]
    app.finalize()
    touched = tmp_path / "stage"
    events = [_Event(7, crafted(touched)), _Event(8, _pack_for("job-11", 3))]
    stage = app.host.stages["jobs"]
    await app.host.fold_batch(stage, app.host.tables["jobs"], events)
    assert not touched.exists()
    dead = [r for r in outbox.records if r.topic == CONFIG.source(DEAD_LETTERS.name)]
    assert [r.value for r in dead] == [crafted(touched)]  # whole, to be looked at
    headers = dict(dead[0].headers)
    assert b"pickle" in headers[REASON] and headers["origin"] == b"intruder"
    assert [(s, list(entities)) for s, entities in sink.writes] == [("jobs", ["job-11"])]  # the batch went on


@pytest.mark.timeout(60)
@pytest.mark.asyncio(loop_scope="session")
async def test_a_pickle_in_a_changelog_never_runs_and_the_agent_refuses_to_fold_onto_it(tmp_path: Path) -> None:
    touched = tmp_path / "changelog"
    held = codecs.loads(state_codec("jobs"), crafted(touched))  # as faust reads a changelog record
    assert isinstance(held, UnreadableState) and not touched.exists()
    with pytest.raises(StateUnreadable, match=r"job-12.*pickle"):
        readable(held, "jobs", "job-12")

    outbox, sink = Capture(), FakeSink()
    app: Any = build_app(CONFIG, sink=sink, outbox=outbox)  # type: ignore[arg-type]
    app.finalize()
    table = app.host.tables["jobs"]
    table.data["job-12"] = held
    with pytest.raises(StateUnreadable, match="cannot be read from its changelog"):
        await app.host.fold_batch(app.host.stages["jobs"], table, [_Event(1, _pack_for("job-12", 4))])
    assert sink.writes == [] and not outbox.records and not touched.exists()


# -- a worker process, on real Kafka and PostgreSQL ----------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def deployment(
    kafka_bootstrap: str,
    fresh_database: str,
    kafka_log: Any,  # noqa: F811 (the fixture, imported)
    tmp_path: Path,
) -> AsyncIterator[Deployment]:
    deployment = Deployment(kafka_bootstrap, fresh_database, kafka_log, tmp_path)
    await deployment.create_topics()
    yield deployment
    deployment.stop_all()


async def _plant(
    deployment: Deployment, topic: str, cleanup: Cleanup, key: bytes | None, value: bytes, partition: int = 0
) -> None:
    config = deployment.config
    partitions = config.stage_partitions("jobs")
    retention = -1 if cleanup is Cleanup.COMPACT else 7 * 24 * 3600 * 1000
    await deployment.log.create_topics([TopicSpec(topic, partitions, "entity", cleanup, retention, "planted")])
    producer = await deployment.log.producer()
    try:
        await producer.append([OutRecord(topic, value, key, (("origin", b"intruder"),), partition)])
    finally:
        await producer.close()


async def _exited(worker: WorkerProcess, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while worker.alive:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the worker did not stop; its log ends:\n{worker.tail(80)}")
        await asyncio.sleep(0.2)


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.asyncio(loop_scope="session")
async def test_a_worker_dead_letters_a_pickle_planted_on_its_stage_topic(
    deployment: Deployment, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    touched = tmp_path / "worker-stage"
    await _plant(deployment, deployment.config.stage_topic("jobs"), Cleanup.DELETE, None, crafted(touched))
    envelopes, expected = build()
    deployment.worker("w1")
    await deployment.append(envelopes)
    await deployment.quiet()

    assert not touched.exists() and all(w.alive for w in deployment.workers)
    check(await read_models(pool, "live"), expected)
    dead = await read_topic(deployment.log, deployment.names[DEAD_LETTERS.name])
    assert [r.value for r in dead] == [crafted(touched)]
    assert b"pickle" in (dead[0].header(REASON) or b"")


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.asyncio(loop_scope="session")
async def test_a_worker_refuses_to_fold_onto_a_pickle_planted_in_its_changelog(
    deployment: Deployment, tmp_path: Path
) -> None:
    touched = tmp_path / "worker-changelog"
    envelopes, _ = build()
    job = next(e.data.job_id for e in envelopes if hasattr(e.data, "job_id"))
    changelog = deployment.config.changelog_topic("jobs")
    partition = partition_of(job, deployment.config.stage_partitions("jobs"))
    await _plant(deployment, changelog, Cleanup.COMPACT, f'"{job}"'.encode(), crafted(touched), partition)
    worker = deployment.worker("w1")
    await deployment.append(envelopes)
    await _exited(worker, 180)

    assert not touched.exists()
    said = worker.tail(400)
    assert f"the stored state of '{job}' cannot be read from its changelog" in said and "pickle" in said, said
    assert "worker_stuck_after_crash" not in said, said  # faust's orderly stop ended it, not the watchdog
