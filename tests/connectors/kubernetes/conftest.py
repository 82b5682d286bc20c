"""Fixtures for the tests against the real kube-apiserver (see ``support`` for what they hand out)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from connectors.kubernetes import KubeApi
from connectors.kubernetes.throttle import RateLimiter
from events.catalog.topics import INVENTORY, JOBS, TOPICS
from events.log import EventLog, TopicPartition
from events.log.publisher import Publisher

from .support import Kube, Running, Tap


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def kube(kube_config: str) -> AsyncIterator[Kube]:
    api = await KubeApi.from_kubeconfig(kube_config, limiter=RateLimiter(500.0, 1000))
    yield Kube(api, Path(kube_config).parent)
    await api.close()


@pytest_asyncio.fixture(loop_scope="session")
async def tap(event_log: EventLog) -> AsyncIterator[Tap]:
    await event_log.create_topics(TOPICS)
    reader = await event_log.reader()
    positions = {}
    for spec in (INVENTORY, JOBS):
        for partition in range(await event_log.partitions(spec.name)):
            tp = TopicPartition(spec.name, partition)
            positions[tp] = await reader.end_offset(tp)
    yield Tap(event_log, reader, positions)
    await reader.close()


@pytest_asyncio.fixture(loop_scope="session")
async def scheduler(event_log: EventLog) -> AsyncIterator[Publisher]:
    """Publishes what the scheduler and the API would: submissions, decisions, requests."""
    await event_log.create_topics(TOPICS)
    publisher = Publisher(event_log, "urn:fedsched:test-scheduler")
    await publisher.start()
    yield publisher
    await publisher.close()


@pytest_asyncio.fixture(loop_scope="session")
async def connectors(event_log: EventLog, kube_config: str) -> AsyncIterator[Running]:
    running = Running(event_log, kube_config)
    yield running
    await running.stop_all()
