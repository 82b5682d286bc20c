"""The EventLog contract suite runs every test on each implementation: Kafka and the embedded log.

Each test gets fresh topics (unique names), so tests do not see each other's records.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from events.log import EventLog, open_log
from events.topics import Cleanup, TopicSpec

_counter = itertools.count()


@pytest.fixture(
    scope="session",
    params=[pytest.param("kafka", marks=pytest.mark.kafka), pytest.param("postgres", marks=pytest.mark.postgres)],
)
def log_url(request: pytest.FixtureRequest) -> str:
    if request.param == "kafka":
        return "kafka://" + request.getfixturevalue("kafka_bootstrap")
    return request.getfixturevalue("postgres_dsn")


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def event_log(log_url: str) -> AsyncIterator[EventLog]:
    log = open_log(log_url)
    await log.start()
    yield log
    await log.close()


@pytest.fixture
def make_topic(event_log: EventLog):  # type: ignore[no-untyped-def]
    async def make(partitions: int = 3) -> str:
        name = f"contract.{os.getpid()}.{next(_counter)}"
        await event_log.create_topics([TopicSpec(name, partitions, "test key", Cleanup.DELETE, -1, "contract test")])
        return name

    return make


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/contract" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.contract)
