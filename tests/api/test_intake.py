"""The event intake on a real log: MLOps tools publish CloudEvents requests on fedsched.intake and get
JobSubmitted or JobRejected answers correlated by request id; garbage goes to the dead letters, and no
credential is ever copied out of the intake topic."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from events.catalog.topics import DEAD_LETTERS, INTAKE, JOBS
from events.log.contract import LogRecord, OutRecord
from events.log.deadletter import CODE, REASON
from services.api.commands import job_id_for
from services.api.intake import AUTH_HEADER, CANCEL, SUBMIT
from tests.api.conftest import Stack
from tests.api.support import LogTail, envelope_of, header, new_request_id

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]


def body(**overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": "nightly-eval",
        "tenant": "team-a",
        "resources": {"gpus": 1, "cpu_milli": 4000, "memory_mib": 16384},
        "labels": {"pipeline": "eval"},
    }
    out.update(overrides)
    return {k: v for k, v in out.items() if v is not None}


def request(
    payload: dict[str, Any] | bytes,
    *,
    token: str | None,
    ce_type: str = SUBMIT,
    ce_id: str | None = None,
    key: bytes | None = None,
    drop: tuple[str, ...] = (),
) -> OutRecord:
    ce_id = ce_id or uuid.uuid4().hex
    headers = [
        ("ce_specversion", b"1.0"),
        ("ce_id", ce_id.encode()),
        ("ce_source", b"urn:tool:pipelines"),
        ("ce_type", ce_type.encode()),
        ("ce_time", b"2026-12-02T10:00:00.000Z"),
        ("content-type", b"application/json"),
    ]
    if token is not None:
        headers.append((AUTH_HEADER, f"Bearer {token}".encode()))
    headers = [h for h in headers if h[0] not in drop]
    value = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    if key is None and isinstance(payload, dict):
        key = str(payload.get("client_request_id", ce_id)).encode()
    return OutRecord(INTAKE.name, value=value, key=key, headers=tuple(headers))


async def publish(stack: Stack, *records: OutRecord) -> None:
    producer = await stack.log.producer()
    try:
        await producer.append(list(records))
    finally:
        await producer.close()


def correlated(request_id: str) -> Any:
    return lambda r: header(r, "ce_correlationid") == request_id


async def test_a_valid_request_is_answered_with_job_submitted_correlated_by_request_id(stack: Stack) -> None:
    jobs = await LogTail.of(stack.log, JOBS.name)
    request_id = new_request_id()
    await publish(stack, request(body(client_request_id=request_id), token=stack.keys.hs(), ce_id="ce-1-" + request_id))
    [answer] = await jobs.wait_for(correlated(request_id))
    envelope = envelope_of(answer)
    assert envelope is not None and envelope.type == "io.fedsched.JobSubmitted"
    assert envelope.data.job_id == job_id_for("team-a", request_id)  # type: ignore[attr-defined]
    assert envelope.causation_id == "ce-1-" + request_id
    assert envelope.data.submitted_by == "alice@example.com"  # type: ignore[attr-defined]
    assert answer.header(AUTH_HEADER) is None

    await stack.fold()
    client = stack.client(stack.keys.hs())
    from services.api.pb import jobs_pb2

    job = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=envelope.data.job_id))  # type: ignore[attr-defined]
    assert (job.name, job.status) == ("nightly-eval", "submitted")


async def test_refused_requests_are_answered_with_job_rejected_naming_reason_and_field(stack: Stack) -> None:
    jobs = await LogTail.of(stack.log, JOBS.name)
    keys = stack.keys
    cases = {
        "invalid": (body(resources={"gpus": 99}), keys.hs(), "InvalidRequest", "resources.gpus"),
        "unknown field": (body(colour="blue"), keys.hs(), "InvalidRequest", "colour"),
        "expired": (body(), keys.hs(exp=int(time.time()) - 3600, iat=int(time.time()) - 7200), "Unauthorized", None),
        "no token": (body(), None, "Unauthorized", None),
        "other tenant": (body(tenant="team-b"), keys.hs(), "Unauthorized", "tenant"),
        "viewer": (body(), keys.hs(roles=["viewer"]), "Unauthorized", None),
    }
    ids = {name: new_request_id() for name in cases}
    await publish(
        stack,
        *[
            request({**payload, "client_request_id": ids[name]}, token=token)
            for name, (payload, token, _, _) in cases.items()
        ],
    )
    answers = await jobs.wait_for(lambda r: header(r, "ce_correlationid") in ids.values(), count=len(cases))
    by_id = {header(r, "ce_correlationid"): r for r in answers}
    for name, (payload, _, reason, field_name) in cases.items():
        envelope = envelope_of(by_id[ids[name]])
        assert envelope is not None and envelope.type == "io.fedsched.JobRejected", name
        rejected = envelope.data
        assert (rejected.reason.value, rejected.field) == (reason, field_name), (name, rejected.message)  # type: ignore[attr-defined]
        assert rejected.job_id.startswith("r-") and rejected.client_request_id == ids[name]  # type: ignore[attr-defined]
        assert rejected.tenant == payload["tenant"]  # type: ignore[attr-defined]


async def test_garbage_goes_to_the_dead_letters_without_the_credential(stack: Stack) -> None:
    dead = await LogTail.of(stack.log, DEAD_LETTERS.name)
    token = stack.keys.hs()
    marker = uuid.uuid4().hex
    garbage = [
        request(b"\xff not json", token=token, ce_id=f"{marker}-1", key=b"g1"),
        request(b"[1, 2]", token=token, ce_id=f"{marker}-2", key=b"g2"),
        request(body(), token=token, ce_id=f"{marker}-3", drop=("ce_type",)),
        request(body(), token=token, ce_id=f"{marker}-4", ce_type="com.example.Unknown"),
        request(body(), token=token, ce_id=f"{marker}-5", ce_type="io.fedsched.JobStarted"),
        request({"job_id": "j-does-not-exist"}, token=token, ce_id=f"{marker}-6", ce_type=CANCEL),
    ]
    await publish(stack, *garbage)

    def ours(record: LogRecord) -> bool:
        return (header(record, "ce_id") or "").startswith(marker)

    letters = await dead.wait_for(ours, count=len(garbage))
    codes = {header(r, "ce_id"): header(r, CODE) for r in letters}
    assert codes == {
        f"{marker}-1": "MalformedRecord",
        f"{marker}-2": "MalformedRecord",
        f"{marker}-3": "MalformedRecord",
        f"{marker}-4": "UnknownEventType",
        f"{marker}-5": "MalformedRecord",
        f"{marker}-6": "InvalidRequest",
    }
    assert all(r.header(AUTH_HEADER) is None for r in letters)
    assert all(r.header(REASON) for r in letters)


async def test_cancel_through_the_intake_and_a_retried_submission_make_one_job(stack: Stack) -> None:
    jobs = await LogTail.of(stack.log, JOBS.name)
    token = stack.keys.hs()
    request_id = new_request_id()
    first = request(body(client_request_id=request_id), token=token)
    retry = request(body(client_request_id=request_id), token=token)
    sentinel_id = new_request_id()
    sentinel = request(body(client_request_id=sentinel_id, name="sentinel"), token=token, key=request_id.encode())
    await publish(stack, first, retry, sentinel)
    await jobs.wait_for(correlated(sentinel_id))  # same partition, after both: both were handled
    answers = [r for r in await jobs.read_all() if header(r, "ce_correlationid") == request_id]
    assert len(answers) == 1
    job_id = job_id_for("team-a", request_id)

    cancel_id = new_request_id()
    await publish(
        stack,
        request(
            {"job_id": job_id, "reason": "superseded", "client_request_id": cancel_id}, token=token, ce_type=CANCEL
        ),
    )
    [answer] = await jobs.wait_for(correlated(cancel_id))
    envelope = envelope_of(answer)
    assert envelope is not None and envelope.type == "io.fedsched.JobCancelRequested"
    assert (envelope.data.job_id, envelope.data.reason) == (job_id, "superseded")  # type: ignore[attr-defined]
    assert stack.api.intake is not None and stack.api.intake.stats.accepted >= 3
