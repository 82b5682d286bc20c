"""People's quota commands as events: request more quota, approve or reject a request.

Called by ``fedsched gov quota ...``, and by the API's ``DecideQuotaRequest`` through
``services.governance.quota_rules`` (the request as recorded). Calls the log (to read the governance
topic and append) and the pure ``services.governance.core.quota.decide``.
The governance host does the rest: it approves small requests by rule, and publishes the ``QuotaSet``
when an approved grant starts and when it expires.
"""

from __future__ import annotations

from events.catalog.errors import EventError
from events.catalog.governance import QuotaRequestApproved, QuotaRequestRejected, QuotaRequestSubmitted
from events.catalog.topics import GOVERNANCE
from events.log.contract import EventLog, TopicPartition
from events.log.publisher import Publisher
from events.log.reading import read_to_end
from events.wire.codec import decode
from events.wire.envelope import Envelope
from services.governance.core.quota import RequestIdInUse, RequestNotFound, decide, same_request
from services.governance.core.state import GovState, Request


async def governance_state(event_log: EventLog, *, namespace: str = "") -> GovState:
    """The quota requests and their decisions, read from the governance topic up to its end now."""
    state = GovState()
    reader = await event_log.reader()
    try:
        tp = TopicPartition((f"{namespace}." if namespace else "") + GOVERNANCE.name, 0)
        async for batch in read_to_end(reader, tp):
            for record in batch:
                try:
                    state.fold(decode(record.headers, record.value))
                except EventError:
                    continue
    finally:
        await reader.close()
    return state


async def request_quota(publisher: Publisher, request: QuotaRequestSubmitted) -> Envelope:
    """Publish a tenant's request (the id is the request's own, so a retried call is recognisable)."""
    envelope = publisher.envelope(request, id=f"quota-request:{request.request_id}", tenant=request.tenant)
    await publisher.publish([envelope])
    return envelope


async def submit_request(
    event_log: EventLog, publisher: Publisher, request: QuotaRequestSubmitted, *, any_start: bool = False
) -> tuple[QuotaRequestSubmitted, bool]:
    """Publish a request unless its id is taken: ``(the request as recorded, whether this call recorded
    it)``. A retry of the same request (``same_request``; ``any_start`` when its start defaulted to now)
    answers with the recorded one; another request under the same id raises ``RequestIdInUse``: the log
    keeps the first event of an id, so publishing it would be reported as done and silently dropped.
    The topic is read again after publishing, so a concurrent request under the same id is caught too."""
    recorded = (await governance_state(event_log)).requests.get(request.request_id)
    created = recorded is None
    if recorded is None:
        await request_quota(publisher, request)
        recorded = (await governance_state(event_log)).requests.get(request.request_id)
        if recorded is None:
            return request, True
    if not same_request(recorded.submitted, request, any_start=any_start):
        first = recorded.submitted
        raise RequestIdInUse(
            f"quota request id {request.request_id} is already used by another request"
            f" ({first.tenant}, {first.amount} {first.resource.value}, by {first.requester})"
        )
    return recorded.submitted, created


async def decide_request(
    event_log: EventLog,
    publisher: Publisher,
    request_id: str,
    *,
    approve: bool,
    by: str,
    comment: str = "",
    approved_amount: int | None = None,
    effective_from_ms: int | None = None,
    expires_ms: int | None = None,
) -> QuotaRequestApproved | QuotaRequestRejected:
    """Check and publish a person's decision on a pending request; ``DecisionError`` if it cannot be."""
    state = await governance_state(event_log)
    request = find_request(state, request_id)
    decision = decide(
        request.submitted,
        approve=approve,
        by=by,
        comment=comment,
        approved_amount=approved_amount,
        effective_from_ms=effective_from_ms,
        expires_ms=expires_ms,
        already_decided=request.decision is not None,
    )
    envelope = publisher.envelope(decision, id=f"quota-decision:{request_id}", tenant=request.submitted.tenant)
    await publisher.publish([envelope])
    return decision


def find_request(state: GovState, request_id: str) -> Request:
    request = state.requests.get(request_id)
    if request is None:
        raise RequestNotFound(f"no quota request {request_id}")
    return request
