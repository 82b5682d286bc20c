"""Waits that stay true, through the real log (issue 20, item 5): the scheduler service publishes a waiting
job's places in its own queue and in the federation's order, its estimated start and the category of its
wait; publishes them again as the jobs ahead start, at most once a minute; the projections fold them into
the jobs' read model, which an older read model (of the format before these columns) gets by replaying
the log; and every cycle verifies identically."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
import pytest_asyncio

from events.catalog.decisions import JobQueued
from events.catalog.jobs import JobStarted, JobSucceeded
from events.log import EventLog
from events.log.reading import SKEW_VARIABLE
from projections.inprocess.runner import ProjectionRunner
from projections.readmodel import writer as readmodels
from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.typed import JobFilter
from services.audit.verify import verify
from services.scheduler.host import SchedulerHost
from tests.services.test_scheduler_host import cluster_c1, decisions, host_topics, wait_for
from tests.unit.projections.builders import a_job, a_node

pytestmark = pytest.mark.asyncio(loop_scope="session")

T0 = 1_800_000_000_000
MIN = 60_000
NEW_COLUMNS = ("pending_reason", "federation_position", "tenant_queue_position", "estimated_start_ms")


@pytest.fixture(autouse=True)
def _stories_run_ahead_of_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The story's clock is in 2027, ahead of the log's own time (see ``test_scheduler_host``)."""
    monkeypatch.setenv(SKEW_VARIABLE, "off")


@pytest_asyncio.fixture(loop_scope="session")
async def pool(fresh_database: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=4)
    yield pool
    await pool.close()


def a_long_job(name: str, tenant: str) -> Any:
    return a_job(name, tenant=tenant, gpus=8).model_copy(update={"expected_runtime_s": 600})


def where(events: list[Any]) -> dict[str, tuple[int | None, int | None, int | None, str | None]]:
    """The latest published wait of each job: places in its queue and the federation, ETA (s), category."""
    out = {}
    for e in events:
        if isinstance(e, JobQueued):
            eta = None if e.estimated_start_ms is None else (e.estimated_start_ms - T0) // 1000
            category = None if e.pending_reason is None else e.pending_reason.value
            out[e.job_id] = (e.tenant_queue_position, e.federation_position, eta, category)
    return out


async def queued_rows(pool: asyncpg.Pool, schema: str) -> dict[str, tuple[int | None, int | None, int | None, str]]:
    rows = await ReadModels(pool, schema).jobs(JobFilter(pending_reasons=("capacity",)), None, 100, None)
    return {
        r.job_id: (
            r.tenant_queue_position,
            r.federation_position,
            None if r.estimated_start_ms is None else (r.estimated_start_ms - T0) // 1000,
            r.status,
        )
        for r in rows
    }


async def test_a_waits_places_and_estimate_move_as_the_jobs_ahead_start_and_the_read_model_follows(
    event_log: EventLog, make_topic: Callable[..., Awaitable[str]], pool: asyncpg.Pool
) -> None:
    now = [T0]
    topics, pub = await cluster_c1(event_log, make_topic)
    pub.clock = lambda: now[0]
    txn = f"{topics.prefix}-sched"
    host = SchedulerHost(event_log, namespace=topics.prefix, transactional_id=txn, clock=lambda: now[0])
    sources = [topics.name(t) for t in ("fedsched.inventory", "fedsched.jobs", "fedsched.decisions")]
    runner = ProjectionRunner(event_log, pool, schema="waits", topics=sources, publish=False)
    await runner.start()
    await host.start()
    await wait_for(host.is_leader)

    async def send(seconds: int, *events: Any) -> None:
        now[0] = T0 + seconds * 1000
        await pub.send(*events)

    async def at(seconds: int, *events: Any) -> list[Any]:
        """Publish ``events`` and run a cycle, ``seconds`` into the story; the decisions it published."""
        now[0] = T0 + seconds * 1000
        if events:
            await pub.send(*events)
        before = len(await decisions(event_log, topics))
        await host.follow()
        await host.cycle()
        return (await decisions(event_log, topics))[before:]

    try:
        await send(0, a_node(node="n1", gpus=8), a_long_job("a1", "team-a"))
        await at(1)  # a1 placed ...
        await at(2, JobStarted(job_id="a1", cluster="c1", run=1))  # ... and runs from here: ends at 602 s
        for second, (name, tenant) in enumerate((("b1", "team-b"), ("a2", "team-a"), ("b2", "team-b")), start=3):
            await send(second, a_long_job(name, tenant))
        first = await at(10)
        assert where(first) == {
            "b1": (1, 1, 602, "capacity"),
            "a2": (1, 2, 602, "capacity"),
            "b2": (2, 3, 602, "capacity"),
        }
        await runner.catch_up()
        assert await queued_rows(pool, "waits") == {
            "b1": (1, 1, 602, "queued"),
            "a2": (1, 2, 602, "queued"),
            "b2": (2, 3, 602, "queued"),
        }

        moved = await at(601, JobSucceeded(job_id="a1", cluster="c1", run=1))  # b1 placed: both move up
        assert where(moved) == {"a2": (1, 1, None, "capacity"), "b2": (1, 2, None, "capacity")}
        assert where(await at(630, JobStarted(job_id="b1", cluster="c1", run=1))) == {}  # within the minute
        later = await at(665)
        assert where(later) == {"a2": (1, 1, 1230, "capacity"), "b2": (1, 2, 1230, "capacity")}
        assert where(await at(900)) == {}  # nothing moved since
        await runner.catch_up()
        live = await queued_rows(pool, "waits")
        assert live == {"a2": (1, 1, 1230, "queued"), "b2": (1, 2, 1230, "queued")}  # b1 placed: in none
        before = await readmodels.checksums(pool, "waits")
    finally:
        await host.close()
        await pub.close()
        await runner.close()

    waits = [e for e in await decisions(event_log, topics) if isinstance(e, JobQueued)]
    assert len(waits) == 3 + 2 + 2  # not one per cycle per job
    report = await verify(event_log, topics=tuple(topics.name(t) for t in host_topics()))
    # The cycles that published something are recorded (1, 10, 601 and 665 s); each verifies identically.
    assert report.cycles == 4 and report.identical_pct == 100.0, report.differences

    # A read model made before these columns: the new code adds them and replays the log into them, once.
    for column in NEW_COLUMNS:
        await pool.execute(f"ALTER TABLE waits.read_jobs DROP COLUMN {column}")
    marker = '{"format": 7, "layout": "0123456789abcdef"}'
    await pool.execute("UPDATE waits.projection_state SET state = $1 WHERE stage = '_format'", marker.encode())
    upgraded = ProjectionRunner(event_log, pool, schema="waits", topics=sources, publish=False)
    await upgraded.start()
    try:
        assert upgraded.store.tables == {}  # the entities of the old format were not loaded: a replay
        await upgraded.catch_up()
    finally:
        await upgraded.close()
    assert await queued_rows(pool, "waits") == live
    assert await readmodels.checksums(pool, "waits") == before
