"""Waiting for the system to quiesce, each wait a condition with a timeout: every job ended, then the
projections worker and the archiver at the end of a log nobody writes to any more.

Called by the soak's run after the load and the chaos. Calls the event log, the components' ``/metrics``
and the archive's chain heads (``events.audit.archive.ArchiveSink.position``). A wait that times out
returns what it was still waiting for; the invariants then say what that means.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg

from events.audit.archive import ArchiveSink
from events.catalog.lifecycle import JOB_END_EVENTS
from events.catalog.topics import JOBS, TOPICS
from events.log import TopicPartition, open_log
from tests.soak.components import scrape
from tests.soak.supervised import Component

_JOB_ENDS = {cls.event_type.encode() for cls in JOB_END_EVENTS}
_POLL_S = 1.0


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
    """Whether ``condition()`` came true within ``timeout_s`` (asked once a second); errors count as not yet."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            if await condition():
                return True
        except Exception:  # the services may still be coming back
            pass
        if loop.time() > deadline:
            return False
        await asyncio.sleep(_POLL_S)


class JobEnds:
    """The job ids the jobs topic has seen end, read on from where the last look stopped."""

    def __init__(self, log_url: str) -> None:
        self._log_url = log_url
        self.positions = {TopicPartition(JOBS.name, p): 0 for p in range(JOBS.partitions)}
        self.ended: set[str] = set()

    async def look(self) -> set[str]:
        log = open_log(self._log_url)
        await log.start()
        reader = await log.reader()
        try:
            for tp, position in self.positions.items():
                end = await reader.end_offset(tp)
                while position < end:
                    batch = await reader.read(tp, position, max_records=2000, timeout_s=0.2)
                    if not batch:
                        if await reader.caught_up(tp, position):
                            break
                        continue
                    for record in batch:
                        if record.header("ce_type") in _JOB_ENDS and record.key:
                            self.ended.add(record.key.decode())
                    position = batch[-1].offset + 1
                self.positions[tp] = position
        finally:
            await reader.close()
            await log.close()
        return self.ended


class ProjectionsWatch:
    """Whether the projections worker's consumer lag, measured each second, is 0 on three looks in a row;
    ``last`` keeps the latest lag it reported (None: it did not answer), for the report."""

    def __init__(self, worker: Component) -> None:
        assert worker.spec.metrics_port is not None
        self._port = worker.spec.metrics_port
        self.last: float | None = None

    async def caught_up(self) -> bool:
        for _ in range(3):
            self.last = (await scrape(self._port)).get('fedsched_consumer_lag{component="projections"}')
            if self.last != 0.0:
                return False
            await asyncio.sleep(1.1)  # one measurement period between looks
        return True


class ArchiveWatch:
    """Whether the archive is at the end of every catalogue partition, and has stayed there, the log's
    ends unchanged, for longer than the archiver's checkpoint cadence: a checkpoint it signs is a record
    of the log too (``fedsched.audit``), archived on its next pass."""

    def __init__(self, log_url: str, dsn: str, quiet_s: float) -> None:
        self._log_url = log_url
        self._dsn = dsn
        self._quiet_s = quiet_s
        self._since: tuple[float, dict[TopicPartition, int]] | None = None

    async def quiet(self) -> bool:
        now = asyncio.get_running_loop().time()
        ends = await self._caught_up_ends()
        if ends is None or self._since is None or self._since[1] != ends:
            self._since = None if ends is None else (now, ends)
            return False
        return now - self._since[0] >= self._quiet_s

    async def _caught_up_ends(self) -> dict[TopicPartition, int] | None:
        """The end offsets of every catalogue partition if the archive holds everything before them."""
        log = open_log(self._log_url)
        await log.start()
        reader = await log.reader()
        pool = await asyncpg.create_pool(self._dsn, min_size=1, max_size=2)
        try:
            heads = ArchiveSink(pool)
            tps = [TopicPartition(spec.name, p) for spec in TOPICS for p in range(spec.partitions)]
            ends = await reader.end_offsets(tps)
            for tp in tps:
                if not await reader.caught_up(tp, await heads.position(tp)):
                    return None
            return ends
        finally:
            await pool.close()
            await reader.close()
            await log.close()
