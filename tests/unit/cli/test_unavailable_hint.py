"""The CLI asks "is the API running at ...?" only when no server answered: not when the API itself said
it is unavailable (its database is down), nor when a watch that was following a job was cut off."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from services.api.client import CallError, call_error
from services.api.errors import Unavailable, trailing_metadata
from services.cli.main import CliError
from services.cli.people_cmd import _failed, watch_job

pytestmark = pytest.mark.timeout(10)

HINT = "is the API running at 127.0.0.1:51551?"


def cli_args(**more: object) -> argparse.Namespace:
    return argparse.Namespace(json=False, server="127.0.0.1:51551", **more)


def message_of(error: CallError, **kwargs: Any) -> str:
    with pytest.raises(CliError) as raised:
        _failed(cli_args(), error, **kwargs)
    assert raised.value.exit_code == 6
    return str(raised.value)


def test_no_server_answering_gets_the_hint() -> None:
    refused = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        "failed to connect to all addresses; last error: Connection refused",
    )
    assert message_of(call_error(refused)).endswith(HINT)


def test_the_api_saying_its_database_is_down_gets_no_hint() -> None:
    outage = Unavailable("the event log or the database is unavailable; retry later")
    answered = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing_metadata(outage)), str(outage)
    )
    message = message_of(call_error(answered))
    assert "database is unavailable" in message and "is the API running" not in message


class CutOffWatch:
    """A client whose watch delivers one event, then loses the connection as an API restart does."""

    jobs = SimpleNamespace(WatchJob=None)

    def stream(self, method: object, request: object) -> AsyncIterator[Any]:
        async def events() -> AsyncIterator[Any]:
            yield SimpleNamespace(time_ms=0, event="JobStarted", status="running", reason="", message="")
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), None, "Socket closed")

        return events()


@pytest.mark.asyncio
async def test_a_watch_cut_off_after_events_says_so_without_the_hint(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CliError) as raised:
        await watch_job(cli_args(job_id="j1", skip_history=False), CutOffWatch())  # type: ignore[arg-type]
    message = str(raised.value)
    assert "is the API running" not in message
    assert "the watch ended after 1 events: the API stopped or restarted" in message
    assert "JobStarted" in capsys.readouterr().out
