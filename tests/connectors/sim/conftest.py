"""Fixtures of the simulated-cluster tests on the real log (Kafka and the embedded PostgreSQL log)."""

from __future__ import annotations

import pytest_asyncio

from events.catalog.topics import TOPICS
from events.log import EventLog


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def sim_log(event_log: EventLog) -> EventLog:
    """The session's log with every catalogue topic created."""
    await event_log.create_topics(TOPICS)
    return event_log
