"""Quota writes: set a queue's quota (admin), request more (submitter), decide a request (admin).

Called by ``services.api.quota`` (``fedsched gov quota request|approve|reject`` are its clients). Calls
``services.api.auth`` (claim checks), governance's rules through the port ``services.api.quota_rules``
(a new request's check, the request as the governance topic has it, an operator's decision), the API
store (the request's idempotency key, one decider at a time) and ``Publisher`` (events on the governance
topic). Who asked and who decided is the token's subject, never a field of the request.

Ids are derived: a request's id from its tenant and the client's key, its event's id from the request
id, a decision's from the request id, so a retried call is recognisable downstream as the same one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from events.catalog.governance import QuotaRequestApproved, QuotaRequestSubmitted, QuotaSet
from events.log.contract import EventLog
from events.log.publisher import Publisher
from services.api import validation
from services.api.auth import Action, Principal, authorize
from services.api.commands import authorize_on, derived_id, new_request_id
from services.api.errors import FailedPrecondition, InvalidArgument, NotFound
from services.api.pb import quota_pb2
from services.api.quota_requests import record
from services.api.quota_rules import QuotaRules
from services.api.store import ApiStore


@dataclass(frozen=True, slots=True)
class AskedPeriod:
    """A quota request's period as the client gave it: a start (0: now, by the API's clock) and an end,
    or a length. A retry is the same request when it gives the period the same way: the same ends, or
    the same length from "now", whenever the retry comes."""

    start_ms: int = 0
    end_ms: int = 0
    length_ms: int = 0

    def resolved(self, now_ms: int) -> tuple[int, int]:
        for name, value in (("period_start_ms", self.start_ms), ("period_ms", self.length_ms)):
            if value < 0:
                raise InvalidArgument(name, "must not be negative")
        if self.length_ms and self.end_ms:
            raise InvalidArgument("period_ms", "give period_end_ms or period_ms, not both")
        if not (self.length_ms or self.end_ms):
            raise InvalidArgument("period_end_ms", "is required (or period_ms, the period's length)")
        start = self.start_ms or now_ms
        return start, self.end_ms or start + self.length_ms

    def digest(self, request: QuotaRequestSubmitted) -> str:
        """What makes two requests under one key the same: every field but who asked, the period as given."""
        if self.start_ms and self.end_ms:  # both ends given: the event's own period
            text = request.model_dump_json(exclude={"requester"})
        else:
            asked = [self.start_ms or "now", self.end_ms or f"+{self.length_ms}"]
            text = request.model_dump_json(exclude={"requester", "period_start_ms", "period_end_ms"}) + json.dumps(
                asked
            )
        return hashlib.sha256(text.encode()).hexdigest()


class QuotaCommands:
    """Requests and decisions follow the governance service's own rules (``rules``, its side of the port)
    and event ids: a decision is checked against the request as the governance topic has it (a request
    the governance host already approved by rule is decided), one decider at a time."""

    def __init__(self, publisher: Publisher, store: ApiStore, log: EventLog, rules: QuotaRules) -> None:
        self._publisher = publisher
        self._store = store
        self._log = log
        self._rules = rules

    async def set_quota(self, principal: Principal, body: Mapping[str, Any]) -> str:
        authorize_on(principal, Action.SET_QUOTA, body.get("tenant"))
        event = validation.event_from(QuotaSet, {**body, "set_by": principal.subject}, whole="request")
        envelope = self._publisher.envelope(event, tenant=event.tenant)
        await self._publisher.publish([envelope])
        return envelope.id

    async def request_quota(
        self, principal: Principal, body: Mapping[str, Any], period: AskedPeriod, client_request_id: str | None
    ) -> tuple[quota_pb2.QuotaRequestRecord, bool]:
        """The request as recorded (by the first call with this key, for a retry) and whether this call
        recorded it. ``AlreadyExists`` (field ``client_request_id``) for another request under the key."""
        tenant = body.get("tenant")
        authorize_on(principal, Action.REQUEST_QUOTA, tenant)
        key = client_request_id or new_request_id()
        request_id = derived_id("q", str(tenant), key)
        now = self._publisher.clock()  # the API's clock (config.clock)
        start, end = period.resolved(now)
        body = {**body, "period_start_ms": start, "period_end_ms": end}
        event = validation.event_from(
            QuotaRequestSubmitted, {**body, "request_id": request_id, "requester": principal.subject}, whole="request"
        )
        problem = self._rules.problem(event, now)
        if problem is not None:
            raise InvalidArgument(*problem)
        digest = period.digest(event)
        if await self._store.record_quota_request(request_id, event.tenant, digest, lambda: self._publish(event)):
            return record(event, now, None), True
        found = await self._rules.recorded(self._log, request_id)
        return (
            record(event, now, None) if found is None else record(found.submitted, found.submitted_ms, found.decision)
        ), False

    async def _publish(self, request: QuotaRequestSubmitted) -> None:
        envelope = self._publisher.envelope(request, id=f"quota-request:{request.request_id}", tenant=request.tenant)
        await self._publisher.publish([envelope])

    async def decide(
        self,
        principal: Principal,
        request_id: str,
        *,
        approve: bool,
        approved_amount: int,
        effective_from_ms: int,
        expires_ms: int | None,
        comment: str,
    ) -> quota_pb2.QuotaRequestRecord:
        """The request with the decision this call published."""
        request_id = validation.identifier("request_id", request_id)
        async with self._store.decision_lock(request_id):
            found = await self._rules.recorded(self._log, request_id)
            if found is None or not principal.sees(found.submitted.tenant):
                raise NotFound(f"no quota request {request_id}", field="request_id")
            asked = found.submitted
            authorize(principal, Action.DECIDE_QUOTA, asked.tenant)
            if found.decision is not None:
                earlier = "approved" if isinstance(found.decision, QuotaRequestApproved) else "rejected"
                raise FailedPrecondition(f"quota request {request_id} was already {earlier}", field="request_id")
            if approve and approved_amount > asked.amount:
                raise InvalidArgument("approved_amount", f"is more than the {asked.amount} that was asked")
            try:
                decision = self._rules.decision(
                    asked,
                    approve=approve,
                    by=principal.subject,
                    comment=comment,
                    approved_amount=approved_amount or None,
                    effective_from_ms=effective_from_ms or None,
                    expires_ms=expires_ms,
                )
            except ValidationError as error:  # a ValueError too: the narrower one first
                raise InvalidArgument(*_first_error(error)) from None
            except ValueError as error:  # the rules refuse the amount or the window, naming which
                raise InvalidArgument(getattr(error, "field", "request"), str(error)) from None
            envelope = self._publisher.envelope(decision, id=f"quota-decision:{request_id}", tenant=asked.tenant)
            await self._publisher.publish([envelope])
        return record(asked, found.submitted_ms, decision)


def _first_error(error: ValidationError) -> tuple[str, str]:
    first = error.errors(include_url=False)[0]
    return ".".join(str(part) for part in first["loc"]) or "request", str(first["msg"])


__all__ = ["AskedPeriod", "QuotaCommands"]
