"""Closing a Kafka consumer in the middle of an outage returns, rather than raising a cancellation that
was never aimed at its caller (the stop-28 soak: a simulated cluster closing its group member to start
over after a broker restart had its loop end there, silently, and 63 running jobs never ended).

aiokafka's consumer ``stop()`` cancels the fetcher's pending tasks (a position lookup retrying through
the outage) and then awaits them, so it raises their ``CancelledError`` (aiokafka#647). The test leaves
such a task pending the way an outage does, with one that never finishes, and closes each kind of
consumer the log adapter has. Real broker.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from events.log import TopicPartition
from events.log.kafka import KafkaEventLog
from tests.integration.kafka_support import a_topic

pytestmark = [pytest.mark.kafka, pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

_BOUND_S = 30.0
"""Far longer than a close takes; only a hang reaches it."""


def _pending_lookup(consumer: Any) -> asyncio.Future[Any]:
    """A fetcher task that will not finish by itself, as a position lookup through an outage."""
    never = asyncio.ensure_future(asyncio.Event().wait())
    consumer._fetcher._pending_tasks.add(never)
    return never


async def test_a_group_member_closed_mid_outage_returns(kafka: KafkaEventLog) -> None:
    topic = await a_topic(kafka, "stop")
    member = await kafka.group_consumer(f"test-stop-{uuid.uuid4().hex[:8]}", (topic,), member_name="m")
    await member.poll(timeout_s=0.2)
    lookup = _pending_lookup(member._consumer)
    await asyncio.wait_for(member.close(), _BOUND_S)
    assert lookup.cancelled()


async def test_a_tail_closed_mid_outage_returns(kafka: KafkaEventLog) -> None:
    topic = await a_topic(kafka, "stop")
    tail = await kafka.tail({TopicPartition(topic, 0): 0})
    await tail.poll(timeout_s=0.1)
    lookup = _pending_lookup(tail._consumer)
    await asyncio.wait_for(tail.close(), _BOUND_S)
    assert lookup.cancelled()


async def test_a_reader_closed_mid_outage_returns(kafka: KafkaEventLog) -> None:
    topic = await a_topic(kafka, "stop")
    reader = await kafka.reader()
    await reader.read(TopicPartition(topic, 0), 0, max_records=1, timeout_s=0.1)
    lookups = [_pending_lookup(consumer) for consumer, _ in reader._consumers.values()]
    assert lookups, "the reader opened no consumer to close"
    await asyncio.wait_for(reader.close(), _BOUND_S)
    assert all(lookup.cancelled() for lookup in lookups)


async def test_cancelling_a_close_still_cancels_its_caller(kafka: KafkaEventLog) -> None:
    topic = await a_topic(kafka, "stop")
    member = await kafka.group_consumer(f"test-stop-{uuid.uuid4().hex[:8]}", (topic,), member_name="m")
    real_stop = member._consumer.stop
    stopping = asyncio.Event()

    async def slow_stop() -> None:  # a stop that waits on the broker, say
        stopping.set()
        await asyncio.Event().wait()

    member._consumer.stop = slow_stop
    closing = asyncio.create_task(member.close())
    await asyncio.wait_for(stopping.wait(), _BOUND_S)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(closing, _BOUND_S)
    await real_stop()
