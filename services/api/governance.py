"""``fedsched.v1.GovernanceService``: governance findings and the governance report, for admins, operators
and auditors, scoped to the caller's tenants.

Called by the gRPC server through ``services.api.handlers`` (``fedsched gov findings`` and ``gov report``
are its clients; the interceptor has refused every other role). Calls governance through its port
(``services.api.governance_reads``): the findings on the governance topic, paged by their offset there,
and the report of the read models and findings, as a message by ``services.api.report_tables``.

Scoping (the rule of ``services.api.auth``): a tenant filter outside the token's tenants is refused; a
scoped token sees its tenants' findings only (not one without a tenant: a node's, a cluster's, a cohort
budget's), and its report is computed from its tenants' data alone.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing

from events.log.contract import EventLog
from projections.readmodel.reader import ReadModels
from services.api import validation
from services.api.auth import Principal, check_scope, current_principal
from services.api.errors import InvalidArgument
from services.api.governance_reads import Finding, GovernanceReads
from services.api.handlers import Context
from services.api.paging import BoundedPage, position
from services.api.pb import governance_pb2
from services.api.report_tables import report_message

MAX_PERIOD_MS = 10 * 366 * 86_400_000
MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last time RFC 3339 can write


class GovernanceService:
    def __init__(self, governance: GovernanceReads, reads: ReadModels, log: EventLog, clock: Callable[[], int]) -> None:
        self._governance = governance
        self._reads = reads
        self._log = log
        self._clock = clock

    async def ListFindings(
        self, request: governance_pb2.ListFindingsRequest, context: Context
    ) -> governance_pb2.ListFindingsResponse:
        principal, tenant = _caller(request.tenant)
        size = validation.page_size(request.page_size)
        query = {"tenant": tenant or ""}
        after = position(request.page_token, query, (int,))
        start = 0 if after is None else after[0] + 1
        if start < 0:
            raise InvalidArgument("page_token", "not a page token this server gave")
        page: BoundedPage[governance_pb2.Finding] = BoundedPage(size)
        async with aclosing(self._governance.findings(self._log, start)) as found:
            async for offset, row in found:
                if _visible(principal, tenant, row) and not page.add((offset,), _finding(row)):
                    break
        return governance_pb2.ListFindingsResponse(findings=page.items, next_page_token=page.token(query))

    async def GetReport(
        self, request: governance_pb2.GetReportRequest, context: Context
    ) -> governance_pb2.GovernanceReport:
        principal, tenant = _caller(request.tenant)
        if not 0 < request.period_ms <= MAX_PERIOD_MS:
            raise InvalidArgument("period_ms", f"must be more than 0 and at most {MAX_PERIOD_MS} (ten years)")
        if request.HasField("until_ms") and not 0 <= request.until_ms <= MAX_TIME_MS:
            raise InvalidArgument("until_ms", "must be a time from 1970 to the year 9999")
        scope = (tenant,) if tenant else principal.tenant_scope()
        latest = await self._reads.latest_time_ms(scope)
        until = request.until_ms if request.HasField("until_ms") else latest
        now = max(self._clock(), latest)
        figures = await self._governance.report(
            self._reads, self._log, until - request.period_ms, until, tenants=scope, now_ms=now
        )
        return report_message(figures, scope)


def _caller(tenant_filter: str) -> tuple[Principal, str | None]:
    """Who calls, and the tenant the request narrows to (refused outside the token's tenants)."""
    principal = current_principal()
    tenant = validation.optional_identifier("tenant", tenant_filter)
    check_scope(principal, tenant or "")
    return principal, tenant


def _visible(principal: Principal, tenant: str | None, row: Finding) -> bool:
    """Whether the caller sees a finding: its tenant's if the token covers it (and the filter names it);
    one without a tenant only with a token for every tenant and no filter."""
    if row.tenant is None:
        return principal.all_tenants and tenant is None
    return principal.sees(row.tenant) and tenant in (None, row.tenant)


def _finding(row: Finding) -> governance_pb2.Finding:
    return governance_pb2.Finding(
        time_ms=row.time_ms,
        kind=row.kind,
        rule=row.rule,
        tenant=row.tenant or "",
        subject=row.subject,
        message=row.message,
    )
