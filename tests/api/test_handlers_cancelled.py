"""A call whose client gave up (deadline passed, or cancelled) is counted and logged as such, not as OK:
a submission the client was told failed must not read as answered in the API's metrics and logs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from services.api.handlers import REQUESTS, _method_handler
from services.api.pb import jobs_pb2

pytestmark = pytest.mark.asyncio

SERVICE = jobs_pb2.DESCRIPTOR.services_by_name["JobService"]


class Context:
    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


async def never_answered(request: object, context: object) -> jobs_pb2.Job:
    raise asyncio.CancelledError


async def stream_never_answered(request: object, context: object) -> AsyncIterator[jobs_pb2.JobEvent]:
    raise asyncio.CancelledError
    yield jobs_pb2.JobEvent()


@pytest.mark.parametrize(("remaining", "code"), [(0.0, "DEADLINE_EXCEEDED"), (12.5, "CANCELLED"), (None, "CANCELLED")])
async def test_a_call_ended_by_its_client_is_counted_with_why(remaining: float | None, code: str) -> None:
    unary = _method_handler(SERVICE, SERVICE.methods_by_name["GetJob"], never_answered)
    name = "/fedsched.v1.JobService/GetJob"
    before = dict(REQUESTS)
    with pytest.raises(asyncio.CancelledError):
        await unary.unary_unary(jobs_pb2.GetJobRequest(job_id="j-1"), Context(remaining))
    assert REQUESTS[(name, code)] == before.get((name, code), 0) + 1
    assert REQUESTS[(name, "OK")] == before.get((name, "OK"), 0)

    stream = _method_handler(SERVICE, SERVICE.methods_by_name["WatchJob"], stream_never_answered)
    name = "/fedsched.v1.JobService/WatchJob"
    with pytest.raises(asyncio.CancelledError):
        async for _ in stream.unary_stream(jobs_pb2.WatchJobRequest(job_id="j-1"), Context(remaining)):
            pass
    assert REQUESTS[(name, code)] == before.get((name, code), 0) + 1
    assert REQUESTS[(name, "OK")] == before.get((name, "OK"), 0)
