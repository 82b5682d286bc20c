"""The event intake on Kafka rides out a restart of the broker: every request on the intake topic gets
exactly one answer, gRPC health says NOT_SERVING for the intake while the broker is away and SERVING once
it reads again, and nothing was restarted (the outage was ridden out, not crashed through).

The broker is the test's own (``deploy/local/kafka.sh start|stop DIR``: same ports on restart), never
the shared one; the API's tables are in a fresh database on the shared PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from events.log import EventLog, open_log
from services.api.config import ApiConfig
from services.api.server import INTAKE_HEALTH, serve
from services.governance.api_reads import GovernanceReports
from services.governance.quota_rules import GovernanceQuotaRules
from tests.api.support import Keys
from tests.integration.restart_support import (
    NOT_SERVING,
    SERVING,
    Broker,
    answers,
    ce_of,
    eventually,
    garbage,
    health,
    publish,
    submission,
    unique,
)

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]


@pytest_asyncio.fixture(loop_scope="session")
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    own = Broker(tmp_path / "kafka")
    await own.start()
    try:
        yield own
    finally:
        await own.stop()


async def opened(url: str) -> EventLog:
    log = open_log(url)
    await log.start()
    return log


async def test_every_request_is_answered_once_across_a_broker_restart(broker: Broker, fresh_database: str) -> None:
    url = f"kafka://{broker.bootstrap}"
    keys = Keys.make()
    token = keys.hs()
    log = await opened(url)
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=4)
    config = ApiConfig(
        log_url=url, dsn=fresh_database, auth=keys.auth(), listen="127.0.0.1:0", instance=unique("kafka")
    )
    api = await serve(config, quota_rules=GovernanceQuotaRules(), governance=GovernanceReports(), log=log, pool=pool)
    try:
        requests = [submission(unique("ok"), token) for _ in range(6)]
        requests += [submission(unique("bad"), token, gpus=-1), garbage(unique("junk"))]
        writer = await opened(url)
        try:
            await publish(writer, requests)
        finally:
            await writer.close()
        ce_ids = [ce_of(r) for r in requests]

        async def answered() -> bool:
            reader = await opened(url)
            try:
                return (await answers(reader)).answered(ce_ids)
            finally:
                await reader.close()

        await eventually(answered, "the first requests are answered", timeout_s=90)

        await broker.stop()

        async def intake_not_serving() -> bool:
            return await health(api.address, INTAKE_HEALTH) == NOT_SERVING

        await eventually(intake_not_serving, "health says the intake does not read", timeout_s=60)
        assert await broker.start() == broker.bootstrap  # the same address

        async def intake_serving() -> bool:
            return await health(api.address, INTAKE_HEALTH) == SERVING

        await eventually(intake_serving, "health says the intake reads again", timeout_s=120)
        more = [submission(unique("ok"), token) for _ in range(6)] + [submission(unique("bad"), token, gpus=-1)]
        writer = await opened(url)
        try:
            await publish(writer, more)
        finally:
            await writer.close()
        ce_ids += [ce_of(r) for r in more]
        await eventually(answered, "every request is answered after the restart", timeout_s=120)

        reader = await opened(url)
        try:
            found = await answers(reader)
        finally:
            await reader.close()
        assert {c: len(found.records[c]) for c in ce_ids} == dict.fromkeys(ce_ids, 1), found.records
        assert sum(found.kinds(c) == ["JobSubmitted"] for c in ce_ids) == 12
        assert sum(found.kinds(c) == ["JobRejected"] for c in ce_ids) == 2
        assert api.intake is not None and api.intake.supervised.attempts == 0
        assert api._intake_task is not None and not api._intake_task.done()
    finally:
        await api.stop()
        await pool.close()
        await log.close()
