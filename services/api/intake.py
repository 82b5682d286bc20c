"""The event intake: MLOps tools submit and cancel jobs by publishing CloudEvents on ``fedsched.intake``.

Called by the API process (``services.api.server`` runs it beside the gRPC server) and by ``fedsched
intake``. Validates and authorises each request with the same code as the gRPC path
(``JobCommands``) and answers on the jobs topic, correlated by the request id.

A request is a CloudEvent in the Kafka binary binding, the same shape as every event of ours:
- ``ce_type`` ``io.fedsched.JobSubmitted`` (body: a ``JobSubmitted`` without ``job_id``, which the
  intake derives from tenant and request id) or ``io.fedsched.JobCancelRequested`` (body: ``job_id``,
  optional ``reason``);
- ``ce_id``, ``ce_source``, ``ce_specversion: 1.0`` (``ce_time`` optional);
- the credential in the CloudEvents extension attribute ``authorization`` (header
  ``ce_authorization``): ``Bearer <JWT>``, checked like the gRPC ``authorization`` metadata;
- the request id: the body's ``client_request_id``, else ``ce_id``. Record key: the request id.

Answers (topic ``fedsched.jobs``, ``ce_correlationid`` = the request id, ``ce_causationid`` = the
request's ``ce_id``): ``JobSubmitted`` for an accepted submission (a retry with the same request id
answers nothing new: the first answer already carries that correlation id); ``JobRejected`` with the
reason code and the field for a refused one (its ``job_id`` is a rejection id, ``r-...``, never a real
job's); ``JobCancelRequested`` for an accepted cancellation. A refused cancellation, and a record that is
not a request at all, go to the dead-letter topic with the reason (a ``JobRejected`` keyed by the job
would mark the job itself rejected). The ``ce_authorization`` header is removed from everything the
intake writes, dead letters included.

The intake has every host's shape (``events.hosting``): a ``GroupFollower`` reads the intake topic, the
step validates and authorises each request, a ``LogSink`` commits the dead letters with the group's
offsets, and ``ride_out`` keeps it going through an outage of the log.

Delivery is at least once: answers carry ids derived from the request, so a redelivered request is a
recognisable duplicate; offsets and dead letters commit in one transaction. While the database or the
log is unavailable the intake retries the same request with a bounded backoff instead of refusing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from events.catalog.errors import EventError, MalformedRecord, UnknownEventType
from events.catalog.jobs import JobCancelRequested, JobRejected, JobSubmitted
from events.catalog.topics import INTAKE
from events.catalog.types import Id, JobId, RequestId, TenantId
from events.hosting.follower import GroupFollower
from events.hosting.loop import ride_out
from events.hosting.sink import LogSink
from events.log.contract import EventLog, LogRecord, OutRecord, TopicPartition
from events.log.deadletter import dead_letter
from events.log.publisher import Publisher
from events.plumbing.outage import Outage
from events.wire.envelope import SPEC_VERSION
from services.api import auth
from services.api.commands import JobCommands, derived_id
from services.api.config import ApiConfig
from services.api.errors import ApiError, InvalidArgument, Unavailable, classify, field_path

logger = logging.getLogger("fedsched.intake")

GROUP = "fedsched-intake"
AUTH_HEADER = "ce_authorization"
SUBMIT = JobSubmitted.event_type
CANCEL = JobCancelRequested.event_type
MAX_BODY = 1_048_576
_ID = TypeAdapter(Id)
_REQUEST_ID = TypeAdapter(RequestId)


class Refused(EventError):
    """A request the intake refused without a ``JobRejected`` (a cancellation, or an unattributable one)."""

    def __init__(self, error: ApiError) -> None:
        self.reason_code = error.reason.value
        self.field = error.field or "request"
        super().__init__(f"refused: {error}")


@dataclass(frozen=True, slots=True)
class Request:
    record: LogRecord
    kind: str
    ce_id: str
    request_id: str
    body: dict[str, Any]
    token: str | None
    ce_tenant: str | None


@dataclass
class IntakeStats:
    accepted: int = 0
    rejected: int = 0
    dead_lettered: int = 0


class Intake:
    def __init__(self, log: EventLog, jobs: JobCommands, config: ApiConfig) -> None:
        self._log = log
        self._jobs = jobs
        self._auth = config.auth
        self._instance = config.instance_name
        self._answers = Publisher(log, "urn:fedsched:intake", clock=config.clock)
        self._requests = GroupFollower(log, GROUP, [INTAKE.name])
        self._sink = LogSink(log, f"{GROUP}-{self._instance}", group=GROUP)
        self._started = False
        self._stop = asyncio.Event()
        self.stats = IntakeStats()
        self.outage = Outage("intake")

    async def start(self) -> None:
        await self._requests.start()
        await self._sink.start()
        await self._answers.start()
        self._started = True

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        await self._requests.close()
        await self._sink.close()
        await self._answers.close()

    async def run(self) -> None:
        """Poll until ``stop()``; an outage of the log is ridden out (``events.hosting.loop``): the group
        member starts over from the offsets committed with the last answers, and ``/healthz`` names the
        log meanwhile."""
        await ride_out(lambda: self.poll_once(timeout_s=0.5), self._stop, self.outage, start_over=self._start_over)

    async def _start_over(self) -> None:
        await self._requests.close()  # its connection may be dead; a new member resumes at the group's offsets
        await self._requests.start()

    async def poll_once(self, *, timeout_s: float = 1.0) -> IntakeStats:
        """Handle what one poll returns; commit dead letters and offsets together."""
        assert self._started, "start() first"
        records = await self._requests.poll(max_records=200, timeout_s=timeout_s)
        done = IntakeStats()
        dead: list[OutRecord] = []
        offsets: dict[TopicPartition, int] = {}
        for record in records:
            outcome = await self._handle_with_retry(record)
            if outcome is None:  # stopping during an outage: leave the rest for the next owner
                break
            if isinstance(outcome, OutRecord):
                dead.append(outcome)
                done.dead_lettered += 1
            elif outcome:
                done.accepted += 1
            else:
                done.rejected += 1
            offsets[record.tp] = record.offset + 1
        if offsets:
            await self._sink.commit(dead, offsets)
        for name in ("accepted", "rejected", "dead_lettered"):
            setattr(self.stats, name, getattr(self.stats, name) + getattr(done, name))
        return done

    async def _handle_with_retry(self, record: LogRecord) -> OutRecord | bool | None:
        delay = 0.1
        while True:
            try:
                return await self.handle(record)
            except Unavailable as error:
                logger.warning("event=intake_retry offset=%d reason=%r", record.offset, str(error))
            if self._stop.is_set():
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=delay)
            delay = min(delay * 2, 5.0)

    async def handle(self, record: LogRecord) -> OutRecord | bool:
        """One record: ``True`` accepted, ``False`` answered with ``JobRejected``, or a dead letter."""
        try:
            request = parse(record)
        except EventError as error:
            return self._dead(record, error)
        try:
            principal = auth.authenticate(request.token, self._auth)
        except ApiError as error:
            return await self._refuse(request, error, None)
        try:
            if request.kind == SUBMIT:
                spec = {k: v for k, v in request.body.items() if k not in ("client_request_id", "submitted_by")}
                await self._jobs.submit(principal, spec, request.request_id, causation_id=request.ce_id)
            else:
                job_id, reason = request.body.get("job_id"), request.body.get("reason", "")
                if not isinstance(job_id, str) or not isinstance(reason, str):
                    raise InvalidArgument("job_id" if not isinstance(job_id, str) else "reason", "must be a string")
                await self._jobs.cancel(principal, job_id, reason, request.request_id, causation_id=request.ce_id)
        except Exception as error:
            api_error = classify(error)
            if isinstance(api_error, Unavailable):
                raise api_error from error
            return await self._refuse(request, api_error, principal)
        return True

    async def _refuse(self, request: Request, error: ApiError, principal: auth.Principal | None) -> OutRecord | bool:
        tenant = _tenant_for(request, principal)
        if request.kind != SUBMIT or tenant is None:
            return self._dead(request.record, Refused(error))
        field = field_path(error.field) if error.field else None
        rejected = JobRejected(
            job_id=JobId(derived_id("r", tenant, request.request_id)),
            tenant=TenantId(tenant),
            reason=error.reason,
            message=str(error)[:4096],
            field=field,
            client_request_id=request.request_id,
        )
        source = f"{request.record.topic}/{request.record.partition}/{request.record.offset}"
        envelope = self._answers.envelope(
            rejected,
            id=derived_id("rejected", source, request.ce_id),
            tenant=tenant,
            correlation_id=request.request_id,
            causation_id=request.ce_id,
        )
        await self._answers.publish([envelope])
        logger.info("event=intake_rejected request=%s reason=%s field=%s", request.request_id, error.reason, field)
        return False

    def _dead(self, record: LogRecord, error: EventError) -> OutRecord:
        logger.warning(
            "event=intake_dead_letter offset=%d code=%s reason=%r", record.offset, error.reason_code, str(error)
        )
        return dead_letter(without_credentials(record), error, GROUP)


def parse(record: LogRecord) -> Request:
    """A record as an intake request; ``EventError`` (a dead letter) when it is not one."""
    headers: dict[str, str] = {}
    for name, raw in record.headers:
        try:
            headers[name] = raw.decode()
        except UnicodeDecodeError:
            raise MalformedRecord(name, "header value is not UTF-8") from None
    for name in ("ce_id", "ce_source", "ce_type", "ce_specversion"):
        if not headers.get(name):
            raise MalformedRecord(name, "required CloudEvents header is missing")
    if headers["ce_specversion"] != SPEC_VERSION:
        raise MalformedRecord("ce_specversion", f"must be {SPEC_VERSION}")
    kind = headers["ce_type"]
    if kind not in (SUBMIT, CANCEL):
        if kind.startswith("io.fedsched."):
            raise MalformedRecord("ce_type", f"the intake takes {SUBMIT} and {CANCEL}, not {kind[:128]}")
        raise UnknownEventType(kind[:128])
    ce_id = headers["ce_id"]
    if len(ce_id) > 256:
        raise MalformedRecord("ce_id", "longer than 256 characters")
    if len(record.value) > MAX_BODY:
        raise MalformedRecord("data", f"body larger than {MAX_BODY} bytes")
    try:
        body = json.loads(record.value)
    except ValueError as error:
        raise MalformedRecord("data", f"body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise MalformedRecord("data", "body must be a JSON object")
    authorization = headers.get(AUTH_HEADER, "")
    token = auth.strip_bearer(authorization) or (authorization.strip() or None)
    return Request(record, kind, ce_id, _request_id(body, ce_id), body, token, headers.get("ce_tenant"))


def _request_id(body: dict[str, Any], ce_id: str) -> str:
    for candidate in (body.get("client_request_id"), ce_id):
        if isinstance(candidate, str) and _valid(_REQUEST_ID, candidate):
            return candidate
    return derived_id("ce", ce_id)


def _tenant_for(request: Request, principal: auth.Principal | None) -> str | None:
    """Whom a rejection is about: the body's tenant, else the ``ce_tenant`` attribute, else the token's
    only tenant. ``None``: it cannot be attributed."""
    for candidate in (request.body.get("tenant"), request.ce_tenant):
        if isinstance(candidate, str) and _valid(_ID, candidate):
            return candidate
    if principal is not None and len(principal.tenants) == 1 and not principal.all_tenants:
        return next(iter(principal.tenants))
    return None


def _valid(adapter: TypeAdapter[str], value: str) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


def without_credentials(record: LogRecord) -> LogRecord:
    headers = tuple((k, v) for k, v in record.headers if k != AUTH_HEADER)
    return LogRecord(
        record.topic, record.partition, record.offset, record.key, record.value, headers, record.timestamp_ms
    )


__all__ = ["AUTH_HEADER", "GROUP", "Intake", "IntakeStats", "parse", "without_credentials"]
