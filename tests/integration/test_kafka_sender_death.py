"""A Kafka producer whose aiokafka sender routine has died raises instead of hanging (issue 19's soak:
a simulated cluster whose sender died around a broker restart stayed alive and silent, its jobs never
ending). aiokafka fails what was queued when the routine dies but leaves later waits (a producer id, a
transaction's end, a send's delivery) pending forever; ``events.log.kafka`` races them against the
routine and raises ``ProducerBroken``, an outage to the hosts, which open a new producer.

The routine is killed the way it dies on its own: a produce request that raises an error it does not
expect ("Unexpected error in sender routine"). Real broker.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiokafka.errors import KafkaError

from events.log import OutRecord, TopicPartition
from events.log.kafka import KafkaEventLog, KafkaProducer, ProducerBroken
from events.plumbing.outage import transient
from tests.integration.kafka_support import a_topic

pytestmark = [pytest.mark.kafka, pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(120)]

_BOUND_S = 30.0
"""Far longer than any of these steps takes; only a hang reaches it."""


def _kill_sender(producer: KafkaProducer) -> None:
    sender: Any = producer._producer._sender

    async def unexpected(*_: object) -> None:
        raise RuntimeError("a produce request failed in a way aiokafka does not expect")

    sender._send_produce_req = unexpected


async def _read_all(log: KafkaEventLog, topic: str) -> list[bytes]:
    reader = await log.reader()
    try:
        records = await reader.read(TopicPartition(topic, 0), 0, max_records=100, timeout_s=1.0)
    finally:
        await reader.close()
    return [r.value for r in records]


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "idempotent"])
async def test_a_producer_whose_sender_died_raises_and_a_new_one_carries_on(
    kafka: KafkaEventLog, transactional: bool
) -> None:
    topic = await a_topic(kafka, "sender")
    txn = f"test-sender-{uuid.uuid4().hex[:8]}" if transactional else None
    producer = await kafka.producer(txn)
    try:
        await producer.append([OutRecord(topic, value=b"before", key=b"k")])
        _kill_sender(producer)
        # The append in flight fails with the batch (aiokafka's error) or with the routine (ours)...
        with pytest.raises(KafkaError) as raised:
            await asyncio.wait_for(producer.append([OutRecord(topic, value=b"lost", key=b"k")]), _BOUND_S)
        assert transient(raised.value)  # an outage to every host: it drops the producer and opens a new one
        # ... and every later one with the routine, where aiokafka alone would wait forever.
        for _ in range(2):
            with pytest.raises(ProducerBroken, match="sender routine") as broken:
                await asyncio.wait_for(producer.append([OutRecord(topic, value=b"again", key=b"k")]), _BOUND_S)
            assert transient(broken.value)
    finally:
        await asyncio.wait_for(producer.close(), _BOUND_S)

    successor = await kafka.producer(txn)
    try:
        await successor.append([OutRecord(topic, value=b"after", key=b"k")])
    finally:
        await successor.close()
    values = await _read_all(kafka, topic)
    assert values[0] == b"before" and values[-1] == b"after"
    if transactional:  # what the broken producer left open was aborted by its successor's start
        assert values == [b"before", b"after"]
