"""What a PostgreSQL restart does to a client is an outage, not a bug: the hosts ride it out and the API
answers UNAVAILABLE (which clients retry), for every error asyncpg raises on a terminated session."""

from __future__ import annotations

import asyncpg
import pytest

from events.plumbing.outage import transient
from services.api.errors import Unavailable, classify

pytestmark = [pytest.mark.timeout(30)]

RESTART = [
    asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
    asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
    ConnectionRefusedError(111, "Connect call failed"),
]


@pytest.mark.parametrize("error", RESTART, ids=lambda e: type(e).__name__)
def test_a_restarts_errors_are_an_outage_for_hosts_and_api(error: BaseException) -> None:
    assert transient(error)
    assert isinstance(classify(error), Unavailable)


def test_a_bug_is_still_a_bug() -> None:
    assert not transient(KeyError("x")) and not isinstance(classify(KeyError("x")), Unavailable)
    assert not transient(asyncpg.exceptions.UniqueViolationError("duplicate key"))
