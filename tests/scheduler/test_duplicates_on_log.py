"""The scheduler host on the embedded PostgreSQL log: a cluster's old "unreachable" report appended again
after 100 later records keeps no job from it, a submission stamped in the year 9999 is folded like any
other (the scheduler's decisions are a function of the log alone: no setting bounds event times there)
and costs nothing out of the ordinary, and a record read again at its position is folded once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from events.catalog.base import Event
from events.catalog.decisions import JobPlaced, JobQueued, SchedulingCycleCompleted
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuHealthReported,
    GpuHealthSample,
)
from events.catalog.reasons import ReasonCode
from events.catalog.topics import DECISIONS, TOPICS
from events.catalog.types import Health
from events.log import EventLog, OutRecord, TopicPartition, open_log
from events.log.reading import SKEW_VARIABLE, read_to_end
from events.wire.codec import decode, encode
from events.wire.envelope import MAX_TIME_MS, Envelope
from services.scheduler.host import SchedulerHost
from tests.unit.projections.builders import a_job, a_node

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(120)]


@pytest_asyncio.fixture(loop_scope="session")
async def log(fresh_database: str) -> AsyncIterator[EventLog]:
    log = open_log(fresh_database)
    await log.start()
    await log.create_topics(TOPICS)
    yield log
    await log.close()


def record(event: Event, event_id: str, time_ms: int) -> OutRecord:
    wire = encode(Envelope(id=event_id, time_ms=time_ms, data=event))
    return OutRecord(wire.topic, value=wire.value, key=wire.key, headers=wire.headers)


def status(value: ClusterStatus) -> ClusterStatusChanged:
    return ClusterStatusChanged(cluster="c1", status=value, reason=ReasonCode.CLUSTER_UNREACHABLE)


async def decisions(log: EventLog) -> list[Event]:
    reader = await log.reader()
    out = [
        decode(r.headers, r.value).data async for b in read_to_end(reader, TopicPartition(DECISIONS.name, 0)) for r in b
    ]
    await reader.close()
    return out


async def test_a_late_repeat_and_a_far_future_event_change_no_decision(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SKEW_VARIABLE, raising=False)  # the default skew, whatever the environment says
    now = time.time_ns() // 1_000_000
    registered = ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR")
    gone = record(status(ClusterStatus.UNREACHABLE), "gone", now + 2)
    records = [record(registered, "c1", now), record(a_node(gpus=8), "n1", now + 1), gone]
    records.append(record(status(ClusterStatus.REACHABLE), "back", now + 3))
    healthy = GpuHealthReported(
        cluster="c1", node="n1", gpus=(GpuHealthSample(index=0, health=Health.OK, xid_errors=0),)
    )
    records += [record(healthy, f"later-{i}", now + 4 + i) for i in range(100)]
    producer = await log.producer()
    await producer.append(records)
    await producer.append([gone])  # the old "unreachable" again, after 100 later records
    await producer.append([record(a_job("j1", gpus=1), "j1", now + 200)])
    await producer.append([record(a_job("j9", gpus=1), "far-future", MAX_TIME_MS)])
    await producer.close()

    host = SchedulerHost(log, transactional_id="dup-sched")
    await host.start()
    try:
        await host.follow()
        folded = host.metrics.folded
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not await host.is_leader():
            assert loop.time() < deadline, "never elected"
            await asyncio.sleep(0.05)
        assert await host.cycle() == 2  # j1 and j9 placed
        # Read again from the start at the same positions (a catch-up over what a tail handed out): nothing
        # is folded twice.
        events_before = host.state.events
        host.follower.positions = dict.fromkeys(host.follower.positions, 0)
        await host.follow()
        assert host.state.events == events_before
    finally:
        await host.close()

    assert folded == len(records) + 3 and host.metrics.unreadable == 0  # the year 9999 too
    assert host.state.cluster_status["c1"] == "reachable"
    decided = await decisions(log)
    placed = [e for e in decided if isinstance(e, JobPlaced)]
    assert sorted(p.job_id for p in placed) == ["j1", "j9"]
    assert not [e for e in decided if isinstance(e, JobQueued)]  # no job waits
    assert [type(e) for e in decided][-1] is SchedulingCycleCompleted
