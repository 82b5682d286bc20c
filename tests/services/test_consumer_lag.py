"""``fedsched_consumer_lag`` on the real logs: what is committed and not yet folded; a partition whose
only records left are the commit markers of what was folded counts nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from events.hosting.lag import Lag
from events.log import EventLog, OutRecord, TopicPartition

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_lag_counts_what_is_committed_and_not_folded(
    event_log: EventLog, make_topic: Callable[..., Awaitable[str]]
) -> None:
    topic = await make_topic(2)
    producer = await event_log.producer("lag-test-writer")  # transactional: Kafka adds commit markers
    for batch in range(3):
        await producer.append(
            [OutRecord(topic, value=f"v{batch}-{i}".encode(), key=f"k{i}".encode()) for i in range(5)]
        )
    await producer.close()
    parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    reader = await event_log.reader()
    ends, last_record = {}, {}
    for tp in parts:
        ends[tp] = await reader.end_offset(tp)
        records = []
        offset = 0
        while offset < ends[tp]:
            batch = await reader.read(tp, offset, max_records=100, timeout_s=1.0)
            if not batch:
                break
            records += batch
            offset = batch[-1].offset + 1
        last_record[tp] = records[-1].offset + 1 if records else 0
    await reader.close()
    written = 3 * 5

    positions: dict[TopicPartition, int] = {tp: 0 for tp in parts}
    lag = Lag(event_log, "test", lambda: positions)
    assert lag.samples() == []  # nothing measured yet
    behind = await lag.measure()
    assert written <= behind <= written + 3 * len(parts)  # markers count while records are ahead of them
    positions.update(last_record)  # folded everything: only markers (if any) lie ahead
    assert await lag.measure() == 0
    assert lag.samples() == [("fedsched_consumer_lag", {"component": "test"}, 0.0)]
    assert lag.fresh()
    await lag.close()
