"""``fedsched.v1.QuotaService``: read quotas, set them (admin), request more, decide requests (admin), list
requests (``services.api.quota_requests``) and read GPU-hour budgets (``services.api.budgets``).

Called by the gRPC server through ``services.api.handlers`` (``fedsched quota``, ``budget`` and ``gov
quota ...`` are its clients). Writes go through ``QuotaCommands`` (events on the governance topic);
quotas come from the quota read model, requests from the governance topic through governance's port,
both scoped to the caller's tenants.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from events.log.contract import EventLog
from projections.readmodel.reader import ReadModels
from services.api import convert, validation
from services.api.auth import check_scope, current_principal
from services.api.budgets import budget_usages
from services.api.errors import InvalidArgument
from services.api.handlers import Context
from services.api.pb import quota_pb2
from services.api.quota_commands import AskedPeriod, QuotaCommands
from services.api.quota_requests import list_requests
from services.api.quota_rules import QuotaRules

MAX_LINES = 64


class QuotaService:
    def __init__(
        self, commands: QuotaCommands, reads: ReadModels, clock: Callable[[], int], rules: QuotaRules, log: EventLog
    ) -> None:
        self._commands = commands
        self._reads = reads
        self._clock = clock
        self._rules = rules
        self._log = log

    async def GetBudgets(self, request: quota_pb2.GetBudgetsRequest, context: Context) -> quota_pb2.GetBudgetsResponse:
        principal = current_principal()
        tenant = validation.optional_identifier("tenant", request.tenant)
        check_scope(principal, tenant or "")
        now_ms = self._clock()
        budgets = await budget_usages(self._reads, principal, tenant or "", now_ms)
        return quota_pb2.GetBudgetsResponse(budgets=budgets, now_ms=now_ms)

    async def GetQuota(self, request: quota_pb2.GetQuotaRequest, context: Context) -> quota_pb2.GetQuotaResponse:
        principal = current_principal()
        tenant = validation.optional_identifier("tenant", request.tenant)
        queue = validation.optional_identifier("queue", request.queue)
        check_scope(principal, tenant or "")
        rows = await self._reads.quota(principal.tenant_scope(), tenant, queue)
        return quota_pb2.GetQuotaResponse(queues=[convert.queue_quota(r) for r in rows])

    async def SetQuota(self, request: quota_pb2.SetQuotaRequest, context: Context) -> quota_pb2.SetQuotaResponse:
        if len(request.lines) > MAX_LINES:
            raise InvalidArgument("lines", f"more than {MAX_LINES} lines")
        lines: list[dict[str, Any]] = []
        for line in request.lines:
            item: dict[str, Any] = {"resource": line.resource, "guaranteed": line.guaranteed}
            if line.gpu_model:
                item["gpu_model"] = line.gpu_model
            if line.HasField("limit"):
                item["limit"] = line.limit
            lines.append(item)
        body: dict[str, Any] = {"tenant": request.tenant, "lines": lines}
        if request.queue:
            body["queue"] = request.queue
        event_id = await self._commands.set_quota(current_principal(), body)
        return quota_pb2.SetQuotaResponse(event_id=event_id)

    async def RequestQuota(
        self, request: quota_pb2.RequestQuotaRequest, context: Context
    ) -> quota_pb2.RequestQuotaResponse:
        request_id = validation.request_id("client_request_id", request.client_request_id)
        body: dict[str, Any] = {
            "tenant": request.tenant,
            "resource": request.resource,
            "amount": request.amount,
            "justification": request.justification,
        }
        if request.queue:
            body["queue"] = request.queue
        if request.gpu_model:
            body["gpu_model"] = request.gpu_model
        period = AskedPeriod(request.period_start_ms, request.period_end_ms, request.period_ms)
        recorded, created = await self._commands.request_quota(current_principal(), body, period, request_id)
        return quota_pb2.RequestQuotaResponse(request_id=recorded.request_id, created=created, request=recorded)

    async def DecideQuotaRequest(
        self, request: quota_pb2.DecideQuotaRequestRequest, context: Context
    ) -> quota_pb2.DecideQuotaRequestResponse:
        for name in ("approved_amount", "effective_from_ms"):
            if getattr(request, name) < 0:
                raise InvalidArgument(name, "must not be negative")
        decided = await self._commands.decide(
            current_principal(),
            request.request_id,
            approve=request.approve,
            approved_amount=request.approved_amount,
            effective_from_ms=request.effective_from_ms,
            expires_ms=request.expires_ms if request.HasField("expires_ms") else None,
            comment=request.comment,
        )
        return quota_pb2.DecideQuotaRequestResponse(
            request_id=decided.request_id, decision=decided.status, request=decided
        )

    async def ListQuotaRequests(
        self, request: quota_pb2.ListQuotaRequestsRequest, context: Context
    ) -> quota_pb2.ListQuotaRequestsResponse:
        return await list_requests(self._rules, self._log, current_principal(), request)
