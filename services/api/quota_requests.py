"""Quota requests as the API shows them: one ``QuotaRequestRecord`` per request, and the list of them.

Called by ``services.api.quota`` (``ListQuotaRequests``, ``fedsched gov quota list``) and by
``services.api.quota_commands`` (the request or the decision a call answers with). Reads the requests
through governance's port (``QuotaRules.requests``), scoped to the caller's tenants: another tenant's
request is in no page, and a filter naming another tenant is refused before anything is read.
"""

from __future__ import annotations

from events.catalog.governance import QuotaRequestApproved, QuotaRequestSubmitted
from events.log.contract import EventLog
from services.api import validation
from services.api.auth import Principal, check_scope
from services.api.errors import InvalidArgument
from services.api.paging import BoundedPage, position
from services.api.pb import quota_pb2
from services.api.quota_rules import Decision, QuotaRules

STATUSES = ("pending", "approved", "rejected")


def status_of(decision: Decision | None) -> str:
    if decision is None:
        return "pending"
    return "approved" if isinstance(decision, QuotaRequestApproved) else "rejected"


def record(
    submitted: QuotaRequestSubmitted, submitted_ms: int, decision: Decision | None
) -> quota_pb2.QuotaRequestRecord:
    out = quota_pb2.QuotaRequestRecord(
        request_id=submitted.request_id,
        tenant=submitted.tenant,
        queue=submitted.queue,
        resource=submitted.resource.value,
        gpu_model=submitted.gpu_model or "",
        amount=submitted.amount,
        period_start_ms=submitted.period_start_ms,
        period_end_ms=submitted.period_end_ms,
        justification=submitted.justification,
        requester=submitted.requester,
        submitted_ms=submitted_ms,
        status=status_of(decision),
    )
    if decision is not None:
        out.decided_by, out.rule, out.comment = decision.decided_by or "", decision.rule or "", decision.comment
    if isinstance(decision, QuotaRequestApproved):
        out.granted_amount, out.granted_from_ms = decision.approved_amount, decision.effective_from_ms
        if decision.expires_ms is not None:
            out.granted_until_ms = decision.expires_ms
    return out


async def list_requests(
    rules: QuotaRules, log: EventLog, principal: Principal, request: quota_pb2.ListQuotaRequestsRequest
) -> quota_pb2.ListQuotaRequestsResponse:
    """The caller's tenants' requests, oldest first (by the time recorded, then id), one page."""
    tenant = validation.optional_identifier("tenant", request.tenant)
    check_scope(principal, tenant or "")
    if request.status and request.status not in STATUSES:
        raise InvalidArgument("status", f"must be one of {', '.join(STATUSES)}, or empty for all")
    size = validation.page_size(request.page_size)
    query = {"tenant": tenant or "", "status": request.status}
    after = position(request.page_token, query, (int, str))
    found = sorted(await rules.requests(log), key=lambda r: (r.submitted_ms, r.submitted.request_id))
    page: BoundedPage[quota_pb2.QuotaRequestRecord] = BoundedPage(size)
    for r in found:
        key = (r.submitted_ms, r.submitted.request_id)
        owner = r.submitted.tenant
        if (after is not None and key <= (after[0], after[1])) or not principal.sees(owner):
            continue
        if (tenant and owner != tenant) or (request.status and status_of(r.decision) != request.status):
            continue
        if not page.add(key, record(r.submitted, r.submitted_ms, r.decision)):
            break
    return quota_pb2.ListQuotaRequestsResponse(requests=page.items, next_page_token=page.token(query))
