"""The governance host on the embedded PostgreSQL log: a node's old removal appended again after 100
later records does not lose the node again, and a report stamped in the year 9999 does not move the log
time every rule reads (which would end every job with a runtime limit at once)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from events.catalog.base import Event
from events.catalog.inventory import GpuUsage, NodeRemoved, NodeUsageReported
from events.catalog.jobs import JobStarted
from events.catalog.reasons import ReasonCode
from events.catalog.topics import TOPICS
from events.log import EventLog, OutRecord, open_log
from events.log.reading import SKEW_VARIABLE
from events.wire.codec import encode
from events.wire.envelope import MAX_TIME_MS, Envelope
from services.governance.core.config import GovConfig
from services.governance.host import GovernanceHost
from tests.unit.projections.builders import a_job, a_node, placed

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


def usage(node: str) -> NodeUsageReported:
    return NodeUsageReported(
        cluster="c1", node=node, window_ms=60_000, gpus=(GpuUsage(index=0, utilisation_pct=90, memory_used_mib=1),)
    )


async def test_a_late_repeat_loses_no_node_and_a_far_future_time_ends_no_job(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SKEW_VARIABLE, raising=False)  # the default skew, whatever the environment says
    now = time.time_ns() // 1_000_000
    removed = record(NodeRemoved(cluster="c1", node="n2", generation=2, reason=ReasonCode.NODE_LOST), "gone", now)
    records = [removed, record(a_node(node="n2", generation=3), "back", now + 1)]
    job = a_job("j1", gpus=1).model_copy(update={"max_runtime_s": 3600})  # ended by a rule after an hour
    records += [record(job, "j1", now + 2), record(placed("j1"), "placed", now + 3)]
    records.append(record(JobStarted(job_id="j1", cluster="c1"), "started", now + 4))
    records += [record(usage("n1"), f"later-{i}", now + 5 + i) for i in range(100)]
    producer = await log.producer()
    await producer.append(records)
    await producer.append([removed])  # the old removal again, after 100 later records
    await producer.append([record(usage("n1"), "far-future", MAX_TIME_MS)])
    await producer.close()

    host = GovernanceHost(log, GovConfig(), transactional_id="dup-gov", tick_ms=None)
    await host.start()
    try:
        published = await host.step()
    finally:
        await host.close()

    assert host.metrics.unreadable == 1
    assert host.state.lost_nodes == {}
    assert now <= host.state.now_ms < now + 200  # the log's time, not the year 9999
    assert [o.event.event_type for o in published] == []  # no runtime limit reached, no node lost
    assert "j1" in host.state.active
