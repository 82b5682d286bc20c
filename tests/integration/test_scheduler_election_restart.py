"""The scheduler's election connection is rebuilt, and a leader that lost it is fenced, on the embedded log
and real PostgreSQL.

The leader's lock connection is terminated by the server (``pg_terminate_backend``: what a restart or a
network failure does to one connection): the lock is gone with it, so the instance must stop deciding at
once; a standby takes the lock and leads, fencing it; the old leader joins again as a standby and decides
nothing while the other leads; when that one goes, it holds the lock again and resumes. Every job is
placed once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.topics import DECISIONS, TOPICS
from events.catalog.types import ClusterId
from events.log.postgres import PostgresEventLog
from events.log.publisher import Publisher
from services.scheduler.host import SchedulerHost
from tests.integration.restart_support import eventually, read_topic
from tests.unit.projections.builders import a_job, a_node

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(120)]


@pytest_asyncio.fixture(loop_scope="session")
async def log(fresh_database: str) -> AsyncIterator[PostgresEventLog]:
    event_log = PostgresEventLog(fresh_database)
    await event_log.start()
    await event_log.create_topics(TOPICS)
    yield event_log
    await event_log.close()


class Instance:
    def __init__(self, log: PostgresEventLog) -> None:
        self.host = SchedulerHost(log)
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.cycles_while_not_holding = 0

    async def start(self) -> None:
        await self.host.start()
        real_cycle = self.host.cycle

        async def watched_cycle() -> int:
            # Deciding is allowed only while the lock is held: on a live connection (what the server
            # knows, not what the member believes).
            connection = getattr(self.host._leadership, "_conn", None)
            if connection is None or connection.is_closed():
                self.cycles_while_not_holding += 1
            return await real_cycle()

        self.host.cycle = watched_cycle  # type: ignore[method-assign]
        self.task = asyncio.create_task(self.host.run(self.stop, poll_s=0.02))

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.wait_for(self.task, 30)
        await self.host.close()


async def placements(log: PostgresEventLog) -> Counter[str]:
    records = await read_topic(log, DECISIONS.name)
    return Counter(json.loads(r.value)["job_id"] for r in records if r.header("ce_type") == b"io.fedsched.JobPlaced")


async def lock_holders(dsn: str) -> list[int]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database ="
            " (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return sorted({int(row["pid"]) for row in rows})
    finally:
        await conn.close()


async def terminate(dsn: str, pid: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await conn.close()


async def epoch(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT epoch FROM fedsched_log_producers WHERE transactional_id = $1", "fedsched-scheduler"
            )
        )
    finally:
        await conn.close()


async def test_a_leader_that_loses_its_lock_connection_is_fenced_then_resumes(
    log: PostgresEventLog, fresh_database: str
) -> None:
    publisher = Publisher(log, "urn:test")
    await publisher.start()
    cluster = ClusterRegistered(
        cluster=ClusterId("c1"), kind=ClusterKind.SIMULATED, site="s1", region="eu", currency="EUR"
    )
    await publisher.publish([cluster, a_node(node="n1", gpus=8), a_node(node="n2", gpus=8)])
    first, second = Instance(log), Instance(log)
    try:
        await first.start()

        async def first_leads() -> bool:
            return first.host.metrics.leader

        await eventually(first_leads, "the first instance leads")
        await second.start()  # a standby: the lock is taken
        await publisher.publish([a_job("j1")])

        async def placed(*jobs: str) -> bool:
            found = await placements(log)
            return all(found[job] >= 1 for job in jobs)

        await eventually(lambda: placed("j1"), "the first leader places j1")
        assert not second.host.metrics.leader and second.host.metrics.cycles == 0
        await eventually(lambda: asyncio.sleep(0, first.host.metrics.cycles >= 1), "its cycle is counted")
        cycles_of_first = first.host.metrics.cycles

        # The server ends the leader's lock connection: the lock goes with it.
        [holder] = await lock_holders(fresh_database)
        leadership = first.host._leadership
        assert leadership is not None
        fenced_at = await epoch(fresh_database)
        await terminate(fresh_database, holder)
        await publisher.publish([a_job("j2")])  # work for a leader at once: the old one must not take it

        async def second_leads() -> bool:
            return second.host.metrics.leader and not first.host.metrics.leader

        await eventually(second_leads, "the standby takes the lock and leads")
        assert not leadership.assignment(), "a member whose connection is lost owns nothing"
        assert await epoch(fresh_database) > fenced_at  # the new leader fenced the old one
        await eventually(lambda: placed("j2"), "the new leader places j2")
        cycles_before = first.host.metrics.cycles

        async def first_rejoined() -> bool:
            return first.host._leadership is not None and first.host._leadership is not leadership

        await eventually(first_rejoined, "the old leader joins again, as a standby")
        assert first.host.metrics.cycles == cycles_before and not first.host.metrics.leader

        # The other leader goes: the first one holds the lock again and resumes.
        await second.close()
        await eventually(first_leads, "the first instance leads again")
        await publisher.publish([a_job("j3")])
        await eventually(lambda: placed("j3"), "the resumed leader places j3")
        assert first.host.metrics.cycles > cycles_before
        assert first.cycles_while_not_holding == 0 and second.cycles_while_not_holding == 0
        assert cycles_before == cycles_of_first  # j2 was decided by the new leader alone
        assert await placements(log) == Counter({"j1": 1, "j2": 1, "j3": 1})
        assert first.task is not None and not first.task.done()
    finally:
        with contextlib.suppress(Exception):
            await second.close()
        await first.close()
        await publisher.close()
