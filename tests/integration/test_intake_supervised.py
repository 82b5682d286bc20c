"""The event intake keeps reading through faults, on the embedded log and real PostgreSQL: every request on
the intake topic gets exactly one answer across a database outage; a bug on one request dead-letters that
request with the reason and the intake goes on; a crash of its loop is restarted with backoff and counted;
gRPC health says NOT_SERVING for the intake while it does not read and SERVING once it does; a request
delivered again after a restart answers nothing new.

The outage is a cut of the intake's network path to the server (a relay the test stops: connections
reset, new ones refused, as when the server goes down); the requests are written around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
import pytest_asyncio

from events.catalog.topics import INTAKE
from events.log.contract import GroupOffsets, TopicPartition
from events.log.postgres import PostgresEventLog
from events.plumbing.metrics import Metrics
from services.api.config import ApiConfig
from services.api.intake import GROUP
from services.api.server import INTAKE_HEALTH, ApiServer, serve
from services.governance.api_reads import GovernanceReports
from services.governance.quota_rules import GovernanceQuotaRules
from tests.api.support import Keys
from tests.integration.restart_support import (
    NOT_SERVING,
    SERVING,
    answers,
    ce_of,
    eventually,
    garbage,
    health,
    publish,
    submission,
    unique,
)
from tests.integration.test_outage_recovery import Relay, through

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(180)]


@dataclass
class Stack:
    api: ApiServer
    direct: PostgresEventLog  # the test's own connection, never cut
    keys: Keys


@pytest_asyncio.fixture(loop_scope="session")
async def relay(fresh_database: str) -> AsyncIterator[Relay]:
    parts = urlsplit(fresh_database)
    relay = Relay(parts.hostname or "127.0.0.1", parts.port or 5432)
    await relay.start()
    yield relay
    with contextlib.suppress(AssertionError):  # cut already
        await relay.cut()


async def start_api(dsn: str, keys: Keys) -> tuple[ApiServer, PostgresEventLog, asyncpg.Pool]:
    log = PostgresEventLog(dsn, pool_size=4)
    await log.start()
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    config = ApiConfig(log_url=dsn, dsn=dsn, auth=keys.auth(), listen="127.0.0.1:0", instance=unique("intake"))
    return (
        await serve(config, quota_rules=GovernanceQuotaRules(), governance=GovernanceReports(), log=log, pool=pool),
        log,
        pool,
    )


@pytest_asyncio.fixture(loop_scope="session")
async def stack(fresh_database: str, relay: Relay) -> AsyncIterator[Stack]:
    keys = Keys.make()
    direct = PostgresEventLog(fresh_database)
    await direct.start()
    api, log, pool = await start_api(through(fresh_database, relay), keys)
    try:
        yield Stack(api, direct, keys)
    finally:
        await api.stop()
        await pool.close()
        await log.close()
        await direct.close()


def intake_down(stack: Stack) -> Any:
    async def check() -> bool:
        return await health(stack.api.address, INTAKE_HEALTH) == NOT_SERVING and "intake" in Metrics().failing()

    return check


def intake_up(stack: Stack) -> Any:
    async def check() -> bool:
        return await health(stack.api.address, INTAKE_HEALTH) == SERVING and "intake" not in Metrics().failing()

    return check


async def test_every_request_is_answered_once_across_a_database_outage(stack: Stack, relay: Relay) -> None:
    token = stack.keys.hs()
    before = [submission(unique("ok"), token) for _ in range(8)] + [submission(unique("bad"), token, gpus=-1)]
    before.append(garbage(unique("junk")))
    await publish(stack.direct, before)
    ce_ids = [ce_of(record) for record in before]

    async def answered() -> bool:
        return (await answers(stack.direct)).answered(ce_ids)

    await eventually(answered, "the first requests are answered")
    assert await health(stack.api.address, INTAKE_HEALTH) == SERVING

    await relay.cut()
    during = [submission(unique("ok"), token) for _ in range(8)] + [submission(unique("bad"), token, gpus=-1)]
    await publish(stack.direct, during)  # written while the intake cannot reach the server
    await eventually(intake_down(stack), "health says the intake does not read")
    assert stack.api._intake_task is not None and not stack.api._intake_task.done()

    await relay.start()
    ce_ids += [ce_of(record) for record in during]
    await eventually(intake_up(stack), "health says the intake reads again")
    # The member that joined again is the same member: no ghost of it holds back a share of the topic.
    consumer = stack.api.intake._requests._consumer if stack.api.intake is not None else None
    assert consumer is not None and len(consumer.assignment()) == await stack.direct.partitions(INTAKE.name)
    await eventually(answered, "every request is answered after the outage")

    found = await answers(stack.direct)
    assert {ce_id: len(found.records[ce_id]) for ce_id in ce_ids} == {ce_id: 1 for ce_id in ce_ids}, found
    assert sum(found.kinds(c) == ["JobSubmitted"] for c in ce_ids) == 16
    assert sum(found.kinds(c) == ["JobRejected"] for c in ce_ids) == 2
    assert sum(found.kinds(c) == ["dead-letter:UnknownEventType"] for c in ce_ids) == 1
    intake = stack.api.intake
    assert intake is not None and intake.supervised.attempts == 0  # ridden out, not crashed
    assert intake.stats.accepted + intake.stats.rejected + intake.stats.dead_lettered >= 19


async def test_a_bug_on_one_request_dead_letters_it_and_a_crashed_loop_is_restarted_and_counted(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    intake = stack.api.intake
    assert intake is not None
    token = stack.keys.hs()
    poison = unique("poison")
    real_submit = intake._jobs.submit

    async def buggy_submit(principal: Any, spec: Any, request_id: Any, **kwargs: Any) -> Any:
        if request_id == poison:
            raise ZeroDivisionError("a bug that only this request meets")
        return await real_submit(principal, spec, request_id, **kwargs)

    intake._jobs.submit = buggy_submit  # type: ignore[method-assign,assignment]
    records = [submission(unique("ok"), token), submission(poison, token), submission(unique("ok"), token)]
    await publish(stack.direct, records)
    ce_ids = [ce_of(record) for record in records]

    async def answered() -> bool:
        return (await answers(stack.direct)).answered(ce_ids)

    await eventually(answered, "the requests around the poisoned one are answered")
    found = await answers(stack.direct)
    assert found.kinds(ce_ids[0]) == ["JobSubmitted"] and found.kinds(ce_ids[2]) == ["JobSubmitted"]
    assert found.kinds(ce_ids[1]) == ["dead-letter:Unknown"]
    assert "ZeroDivisionError" in found.reasons[ce_ids[1]] and "intake failed" in found.reasons[ce_ids[1]]
    assert intake.stats.failed == 1 and intake.supervised.attempts == 0

    # A bug in the loop itself (not in one request): the loop ends, is restarted and counted, and the
    # intake is reported NOT_SERVING until it reads again.
    real_poll = intake._requests.poll
    crashing = asyncio.Event()
    crashing.set()

    async def broken_poll(**kwargs: Any) -> Any:
        if crashing.is_set():
            raise AttributeError("a bug in the loop")
        return await real_poll(**kwargs)

    intake._requests.poll = broken_poll  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="fedsched.supervisor"):
        await eventually(intake_down(stack), "health says the crashed intake does not read")
        assert intake.supervised.attempts >= 1
        crashing.clear()
        late = submission(unique("late"), token)
        await publish(stack.direct, [late])
        await eventually(intake_up(stack), "health says the restarted intake reads")
        late_id = ce_of(late)

        async def late_answered() -> bool:
            return (await answers(stack.direct)).kinds(late_id) == ["JobSubmitted"]

        await eventually(late_answered, "a request after the restart is answered")
    restarts = [r.getMessage() for r in caplog.records if "component_restarted" in r.getMessage()]
    assert restarts and restarts[0] == "event=component_restarted name=intake attempt=1 reason=crashed", restarts
    samples = {(n, labels.get("reason")): v for n, labels, v in stack.api.samples() if "component" in n}
    assert samples[("fedsched_component_restarts_total", "crashed")] == intake.supervised.attempts >= 1
    assert samples[("fedsched_component_up", None)] == 1.0


async def test_a_request_delivered_again_after_a_restart_answers_nothing_new(stack: Stack, fresh_database: str) -> None:
    token = stack.keys.hs()
    records = [submission(unique("ok"), token) for _ in range(3)] + [submission(unique("bad"), token, gpus=-1)]
    await publish(stack.direct, records)
    ce_ids = [ce_of(record) for record in records]

    async def answered() -> bool:
        return (await answers(stack.direct)).answered(ce_ids)

    await eventually(answered, "the requests are answered")
    before = await answers(stack.direct)

    # The API restarts, and its group's offsets are found behind: every request is delivered again.
    await stack.api.stop()
    tps = [TopicPartition(INTAKE.name, p) for p in range(await stack.direct.partitions(INTAKE.name))]
    ends = {tp: await stack.direct.end_offset(tp) for tp in tps}
    producer = await stack.direct.producer()
    await producer.append([], offsets=GroupOffsets(GROUP, dict.fromkeys(tps, 0)))
    await producer.close()
    api, log, pool = await start_api(fresh_database, stack.keys)
    try:

        async def read_again() -> bool:
            committed = {tp: await stack.direct.committed(GROUP, tp) or 0 for tp in ends}
            return all(committed[tp] >= end for tp, end in ends.items())

        await eventually(read_again, "the restarted intake has read everything again")
        after = await answers(stack.direct)
        assert after.ids() == before.ids()  # no answer that was not there already
        submitted = [c for c in ce_ids if before.kinds(c) == ["JobSubmitted"]]
        assert len(submitted) == 3 and all(after.kinds(c) == ["JobSubmitted"] for c in submitted)
        assert await health(api.address, INTAKE_HEALTH) == SERVING
    finally:
        await api.stop()
        await pool.close()
        await log.close()
