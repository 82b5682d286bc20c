"""The real-broker tests of the Kafka log adapter share these: the adapter on the session's broker, and a
fresh one-partition topic per test. Called by ``test_kafka_sender_death`` and ``test_kafka_consumer_stop``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest_asyncio

from events.catalog.topics import Cleanup, TopicSpec
from events.log.kafka import KafkaEventLog


@pytest_asyncio.fixture(loop_scope="session")
async def kafka(kafka_bootstrap: str) -> AsyncIterator[KafkaEventLog]:
    log = KafkaEventLog(kafka_bootstrap)
    await log.start()
    yield log
    await log.close()


async def a_topic(log: KafkaEventLog, prefix: str) -> str:
    name = f"test.{prefix}.{uuid.uuid4().hex[:12]}"
    await log.create_topics([TopicSpec(name, 1, "test key", Cleanup.DELETE, -1, "test")])
    return name
