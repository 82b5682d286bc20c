"""The archiver and the governance host on the real PostgreSQL (the embedded log and the archive) ride out
an outage: the test cuts their network path to the server (a TCP relay it stops: open connections are
reset, new ones refused, as when the server goes down) and restores it. Nothing is lost or doubled."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio

from events.audit.archive import AuditArchiver, verify_chain
from events.catalog.topics import TOPICS, Cleanup, TopicSpec
from events.log import OutRecord
from events.log.postgres import PostgresEventLog
from events.plumbing.metrics import Metrics

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(90)]


class Relay:
    """A TCP relay to the PostgreSQL server that the test can cut (connections reset, new ones refused)
    and restore on the same port."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        self._server = None
        for writer in list(self._pipes):
            writer.transport.abort()
        self._pipes.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._pipes |= {writer, up_writer}
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        sink.transport.abort()
        self._pipes.discard(sink)


def through(dsn: str, relay: Relay) -> str:
    parts = urlsplit(dsn)
    netloc = parts.netloc.rsplit("@", 1)
    auth = netloc[0] + "@" if len(netloc) == 2 else ""
    return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{relay.port}"))


@pytest_asyncio.fixture(loop_scope="session")
async def relay(fresh_database: str) -> AsyncIterator[Relay]:
    parts = urlsplit(fresh_database)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 5432)
    await relay.start()
    yield relay
    with contextlib.suppress(AssertionError):
        await relay.cut()


async def wait_until(condition: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.02)


async def append(log: PostgresEventLog, topic: str, start: int, count: int) -> None:
    producer = await log.producer()
    await producer.append(
        [OutRecord(topic, value=f"v{i}".encode(), key=f"k{i}".encode()) for i in range(start, start + count)]
    )
    await producer.close()


async def test_archiver_rides_out_a_database_outage_and_archives_everything_once(
    fresh_database: str, relay: Relay
) -> None:
    direct = PostgresEventLog(fresh_database)  # the test's own writer, not cut off
    await direct.start()
    topic = "outage.archive"
    await direct.create_topics([TopicSpec(topic, 2, "test key", Cleanup.DELETE, -1, "test")])
    await append(direct, topic, 0, 50)

    event_log = PostgresEventLog(through(fresh_database, relay), pool_size=2)
    await event_log.start()
    pool = await asyncpg.create_pool(through(fresh_database, relay), min_size=1, max_size=2)
    archiver = AuditArchiver(event_log, pool, [topic], batch=7)
    metrics = Metrics()
    stop = asyncio.Event()
    run = asyncio.create_task(archiver.run(stop, idle_wait_s=0.05))
    try:
        await wait_until(lambda: archiver.archived_total == 50, "the first 50 are archived")

        await relay.cut()
        await append(direct, topic, 50, 30)  # committed while the archiver cannot reach the server
        await wait_until(lambda: run.done() or metrics.failing(), "health reports the outage")
        assert not run.done(), run  # the old archiver ended here with ConnectionRefusedError
        assert set(metrics.failing()) <= {"log", "postgres"}

        await relay.start()
        await wait_until(lambda: archiver.archived_total >= 80 and not metrics.failing(), "it caught up")
        assert not run.done()
    finally:
        stop.set()
        await asyncio.wait_for(run, 30)
        await archiver.close()
        await pool.close()
        await event_log.close()

    check = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    try:
        rows = await check.fetch("SELECT value FROM fedsched_audit WHERE topic = $1", topic)
        assert sorted(bytes(r["value"]).decode() for r in rows) == sorted(f"v{i}" for i in range(80))
        assert (await verify_chain(check)).ok
    finally:
        await check.close()
        await direct.close()


async def test_governance_rides_out_an_outage_of_the_embedded_log(fresh_database: str, relay: Relay) -> None:
    from services.governance.host import GovernanceHost

    direct = PostgresEventLog(fresh_database)
    await direct.start()
    await direct.create_topics(TOPICS)
    await direct.close()

    event_log = PostgresEventLog(through(fresh_database, relay), pool_size=2)
    await event_log.start()
    host = GovernanceHost(event_log)
    await host.start()
    metrics = Metrics()
    stop = asyncio.Event()
    run = asyncio.create_task(host.run(stop, poll_s=0.05))
    try:
        await wait_until(lambda: host.follower.reading, "it follows the log")
        await relay.cut()
        await wait_until(lambda: run.done() or "log" in metrics.failing(), "health reports the log")
        assert not run.done(), run  # the old host ended here
        await relay.start()
        await wait_until(lambda: not metrics.failing(), "health is ok again")
        assert not run.done()
    finally:
        stop.set()
        await asyncio.wait_for(run, 30)
        await host.close()
        await event_log.close()
