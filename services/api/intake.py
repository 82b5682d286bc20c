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
step validates and authorises each request, a ``LogSink`` commits the rejections and dead letters with
the group's offsets, and ``ride_out`` keeps it going through an outage of the log or the database.

One answer per request: rejections and dead letters are appended in the transaction that commits the
request's offset, so they are in the log once or not at all. An accepted submission is published by
``JobCommands`` inside the API store's transaction that records its request id, so a request delivered
again after a restart (its offset was not committed yet) finds it recorded and publishes nothing; only
when that store commit fails after the append is the answer published again, under the same id
(``submit-<job id>``): a duplicate recognisable by its id. An accepted cancellation is published again on
such a redelivery, under the same id derived from the job and the request. No answer is ever new.

Faults, one by one. While the database or the log is away (a transient error), the intake keeps the
request it was handling and what it polled after it, commits what it had finished, and retries the
same request after a capped backoff instead of refusing it; ``/healthz`` names the dependency
meanwhile. A poll or commit that fails starts the group member over (a new connection, resuming at the
committed offsets). Any other error on one request is a bug of ours: the request is dead-lettered with
the reason (``HandlingFailed``) and the intake goes on. Whatever still ends the loop is restarted with
backoff and counted (``events.plumbing.tasks.Supervised``), and ``reading`` is false until the intake
reads again: the API reports it NOT_SERVING meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import asyncpg
from pydantic import TypeAdapter, ValidationError

from events.catalog.errors import EventError, MalformedRecord, UnknownEventType
from events.catalog.jobs import JobCancelRequested, JobRejected, JobSubmitted
from events.catalog.reasons import ReasonCode
from events.catalog.topics import INTAKE
from events.catalog.types import Id, JobId, RequestId, TenantId
from events.hosting.follower import GroupFollower
from events.hosting.loop import ride_out
from events.hosting.sink import LogSink
from events.log.contract import EventLog, LogRecord, OutRecord, TopicPartition
from events.log.deadletter import dead_letter
from events.log.publisher import Publisher, to_record
from events.plumbing.metrics import Sample
from events.plumbing.outage import Outage, Unreachable, reaching, transient
from events.plumbing.tasks import Supervised
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


class HandlingFailed(EventError):
    """A request the intake failed on through a fault of its own (a bug): kept whole in the dead letters
    with the error, so it can be replayed once fixed; the server log has the traceback."""

    reason_code = ReasonCode.UNKNOWN.value

    def __init__(self, error: BaseException) -> None:
        self.field = "request"
        super().__init__(f"the intake failed on this request: {type(error).__name__}: {str(error)[:512]}")


@dataclass(frozen=True, slots=True)
class Request:
    record: LogRecord
    kind: str
    ce_id: str
    request_id: str
    body: dict[str, Any]
    token: str | None
    ce_tenant: str | None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one request came to: ``accepted`` (answered by ``JobCommands``), ``rejected``,
    ``dead_lettered`` or ``failed`` (dead-lettered: a fault of ours), and the records to commit with its
    offset (its answer when it is not accepted)."""

    kind: str
    records: tuple[OutRecord, ...] = ()


@dataclass
class IntakeStats:
    accepted: int = 0
    rejected: int = 0
    dead_lettered: int = 0
    failed: int = 0
    """Dead-lettered because the intake itself failed on them (a bug), of ``dead_lettered``."""


class Intake:
    def __init__(self, log: EventLog, jobs: JobCommands, config: ApiConfig) -> None:
        self._log = log
        self._jobs = jobs
        self._auth = config.auth
        self._instance = config.instance_name
        self._answers = Publisher(log, "urn:fedsched:intake", clock=config.clock)  # envelopes only
        self._requests = GroupFollower(log, GROUP, [INTAKE.name])
        self._sink = LogSink(log, f"{GROUP}-{self._instance}", group=GROUP)
        self._started = False
        self._joined = False  # a member of the group now (dropped after a failed poll or commit)
        self._pending: list[LogRecord] = []  # polled, not handled yet: kept while a dependency is away
        self._stop = asyncio.Event()
        self.stats = IntakeStats()
        self.outage = Outage("intake")
        self.supervised = Supervised("intake", self._loop, stop=self._stop, restart=self._restart)

    @property
    def reading(self) -> bool:
        """Whether the intake reads its topic now: started, its loop running (not crashed nor waiting for
        its restart), a member of the group, and its latest attempt got through."""
        return self._started and self.supervised.running and self._joined and self.outage.failing is None

    def samples(self) -> list[Sample]:
        """Requests by outcome, whether it reads, and its restarts, for ``/metrics``."""
        out: list[Sample] = [
            ("fedsched_intake_requests_total", {"outcome": outcome}, float(getattr(self.stats, outcome)))
            for outcome in ("accepted", "rejected", "dead_lettered")
        ]
        out.append(("fedsched_intake_reading", {}, 1.0 if self.reading else 0.0))
        return out + self.supervised.samples()

    async def start(self) -> None:
        await self._requests.start()
        self._joined = True
        await self._sink.start()
        self._started = True

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        self._joined = False
        await self._requests.close()
        await self._sink.close()

    async def run(self) -> None:
        """Poll until ``stop()``, supervised: a loop that ends on a bug is started again with backoff
        (``events.plumbing.tasks.Supervised``)."""
        await self.supervised.run()

    async def _loop(self) -> None:
        """An outage of the log or the database is ridden out (``events.hosting.loop``), and ``/healthz``
        names it meanwhile."""
        await ride_out(lambda: self.poll_once(timeout_s=0.5), self._stop, self.outage, start_over=self._start_over)

    async def _start_over(self) -> None:
        """After a failed poll or commit (or a crash): a new member, resuming at the committed offsets.
        After a request's dependency failed, the member and the requests kept are still good."""
        if self._joined:
            return
        self._pending.clear()  # delivered again from the committed offsets
        await self._requests.close()  # its connection may be dead

    async def _restart(self) -> None:
        """After a crash nothing held in memory is trusted: a new member, from the committed offsets."""
        self._joined = False
        await self._start_over()
        await self._sink.drop()

    async def _join(self) -> None:
        if not self._joined:
            await self._requests.close()
            await self._requests.start()
            self._joined = True

    async def poll_once(self, *, timeout_s: float = 1.0) -> IntakeStats:
        """Handle what one poll returns (or what is left of the last one); commit its rejections, dead
        letters and offsets together. Raises ``Unreachable`` when a dependency is away, after committing
        the requests handled before it."""
        assert self._started, "start() first"
        if not self._pending:
            try:
                with reaching("log"):
                    await self._join()
                    self._pending = await self._requests.poll(max_records=200, timeout_s=timeout_s)
            except BaseException:
                self._joined = False
                raise
        done = IntakeStats()
        answers: list[OutRecord] = []
        offsets: dict[TopicPartition, int] = {}
        try:
            while self._pending:
                record = self._pending[0]
                outcome = await self._handle_safely(record)
                setattr(done, outcome.kind, getattr(done, outcome.kind) + 1)
                done.dead_lettered += int(outcome.kind == "failed")
                answers.extend(outcome.records)
                offsets[record.tp] = record.offset + 1
                self._pending.pop(0)
        finally:
            if offsets:
                await self._commit(answers, offsets, done)
        return done

    async def _commit(self, answers: list[OutRecord], offsets: dict[TopicPartition, int], done: IntakeStats) -> None:
        try:
            with reaching("log"):
                await self._sink.commit(answers, offsets)
        except BaseException:
            # In doubt or not written: start over from the committed offsets (what was written is
            # recognised when its request comes again: the store, or the same derived answer).
            self._joined = False
            raise
        for name in ("accepted", "rejected", "dead_lettered", "failed"):
            setattr(self.stats, name, getattr(self.stats, name) + getattr(done, name))

    async def _handle_safely(self, record: LogRecord) -> Outcome:
        """``handle``, with a bug on one request dead-lettering that request rather than ending the loop."""
        try:
            return await self.handle(record)
        except Unavailable as error:
            cause = error.__cause__ or error
            raise Unreachable(_dependency_of(cause), cause) from error
        except Unreachable:
            raise
        except Exception as error:
            if transient(error):
                raise Unreachable(_dependency_of(error), error) from error
            logger.exception("event=intake_failed partition=%d offset=%d", record.partition, record.offset)
            return self._failed(record, error)

    async def handle(self, record: LogRecord) -> Outcome:
        """One request: accepted (answered by ``JobCommands``), rejected or dead-lettered, with the records
        to commit with its offset. Raises ``Unavailable`` when the database or the log is away."""
        try:
            request = parse(record)
        except EventError as error:
            return self._dead(record, error)
        try:
            principal = auth.authenticate(request.token, self._auth)
        except ApiError as error:
            return self._refuse(request, error, None)
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
            if transient(error):  # whatever classify makes of it, the dependency is away: retried
                raise Unreachable(_dependency_of(error), error) from error
            api_error = classify(error)
            if isinstance(api_error, Unavailable):
                raise api_error from error
            if type(api_error) is ApiError:  # not a refusal: classify found a fault of ours (and logged it)
                return self._failed(record, error)
            return self._refuse(request, api_error, principal)
        return Outcome("accepted")

    def _refuse(self, request: Request, error: ApiError, principal: auth.Principal | None) -> Outcome:
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
        logger.info("event=intake_rejected request=%s reason=%s field=%s", request.request_id, error.reason, field)
        return Outcome("rejected", (to_record(envelope),))

    def _failed(self, record: LogRecord, error: BaseException) -> Outcome:
        return Outcome("failed", self._dead(record, HandlingFailed(error)).records)

    def _dead(self, record: LogRecord, error: EventError) -> Outcome:
        logger.warning(
            "event=intake_dead_letter offset=%d code=%s reason=%r", record.offset, error.reason_code, str(error)
        )
        return Outcome("dead_lettered", (dead_letter(without_credentials(record), error, GROUP),))


def _dependency_of(error: BaseException) -> str:
    """What a transient error is blamed on in ``/healthz``: the database's client errors name PostgreSQL
    (the embedded log's too); the rest, the log."""
    if isinstance(error, asyncpg.PostgresError | asyncpg.InterfaceError | asyncpg.InternalClientError):
        return "postgres"
    return "log"


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


__all__ = ["AUTH_HEADER", "GROUP", "HandlingFailed", "Intake", "IntakeStats", "Outcome", "parse", "without_credentials"]
