"""Quota requests: approval by rule or by a person, and the quota in force while a grant lasts.

Called by the governance host (``auto_decide`` for each new request, ``quota_changes`` on every tick)
and by the API through ``services.governance.quota_rules`` (``request_problem`` checks a new request,
``decide`` checks and builds an operator's answer; ``fedsched gov quota ...`` is the API's client).
Pure: time comes in as ``now_ms``.

A grant adds ``approved_amount`` to the guaranteed amount (and the limit, when bounded) of the matching
line of the tenant queue's base quota (the last ``QuotaSet`` an operator published) from
``effective_from_ms`` until ``expires_ms``. Governance publishes the whole resulting ``QuotaSet`` when a
grant starts and again when it expires, so the scheduler, which applies each ``QuotaSet`` it reads, holds
the larger quota exactly for the granted period.
"""

from __future__ import annotations

from collections.abc import Iterable

from events.catalog.governance import (
    QuotaLine,
    QuotaRequestApproved,
    QuotaRequestRejected,
    QuotaRequestSubmitted,
    QuotaSet,
)
from events.catalog.types import MAX_SAFE_INT, QueueId, QuotaRequestId, ResourceKind, TenantId
from events.wire.envelope import format_time
from services.governance.core.config import GovConfig
from services.governance.core.state import GovState, Output, Request


class DecisionError(ValueError):
    """An operator's decision that cannot be applied (more than asked, an amount below 1, a bad window),
    naming the field of the decision at fault."""

    def __init__(self, message: str, field: str = "request_id") -> None:
        super().__init__(message)
        self.field = field


class AlreadyDecided(DecisionError):
    """The request was approved or rejected before: a decision is final."""


#: The resources a request may name a GPU model on (as ``QuotaLine`` allows).
MODEL_RESOURCES = frozenset({ResourceKind.GPU, ResourceKind.NPU})


def request_problem(request: QuotaRequestSubmitted, now_ms: int) -> tuple[str, str] | None:
    """What makes a new request unacceptable at ``now_ms``, as (field, message), or ``None``: a GPU model
    on a resource that has none, or a period that has already ended (it could only ever be granted for
    the past)."""
    if request.gpu_model is not None and request.resource not in MODEL_RESOURCES:
        return "gpu_model", f"is only for the gpu and npu resources, not {request.resource.value}"
    if request.period_end_ms <= now_ms:
        return "period_end_ms", (
            f"the period ends at {format_time(request.period_end_ms)}, not after now ({format_time(now_ms)});"
            " ask for a period that has not ended"
        )
    return None


def auto_decide(request: QuotaRequestSubmitted, config: GovConfig) -> QuotaRequestApproved | None:
    """The approval by the most specific matching auto-approve rule, or ``None``: a person decides."""
    period = request.period_end_ms - request.period_start_ms
    model = request.gpu_model or "*"
    candidates = [
        rule
        for rule in config.auto_approve
        if rule.resource == request.resource.value
        and rule.tenant in ("*", request.tenant)
        and rule.gpu_model in ("*", model)
    ]
    if not candidates:
        return None
    rule = max(candidates, key=lambda r: (r.specificity(), r.name))
    if request.amount > rule.max_amount or period > rule.max_period_ms:
        return None
    return QuotaRequestApproved(
        request_id=request.request_id,
        tenant=request.tenant,
        rule=rule.name,
        approved_amount=request.amount,
        effective_from_ms=request.period_start_ms,
        expires_ms=request.period_end_ms,
        comment=f"amount {request.amount} <= {rule.max_amount}, period {period // 60_000} min"
        f" <= {rule.max_period_ms // 60_000} min",
    )


def decide(
    request: QuotaRequestSubmitted,
    *,
    approve: bool,
    by: str,
    comment: str = "",
    approved_amount: int | None = None,
    effective_from_ms: int | None = None,
    expires_ms: int | None = None,
    already_decided: bool = False,
) -> QuotaRequestApproved | QuotaRequestRejected:
    """A person's answer to a request; defaults (``None``): the amount asked, for the period asked."""
    if already_decided:
        raise AlreadyDecided(f"quota request {request.request_id} is already decided")
    if not approve:
        return QuotaRequestRejected(
            request_id=request.request_id, tenant=request.tenant, decided_by=by, comment=comment
        )
    amount = request.amount if approved_amount is None else approved_amount
    if amount < 1:
        raise DecisionError(
            f"approved amount must be at least 1, got {amount}; reject the request to grant nothing", "approved_amount"
        )
    if amount > request.amount:
        raise DecisionError(f"approved amount {amount} is more than the {request.amount} asked", "approved_amount")
    start = request.period_start_ms if effective_from_ms is None else effective_from_ms
    end = request.period_end_ms if expires_ms is None else expires_ms
    if end <= start:
        raise DecisionError("the grant would expire before it starts", "expires_ms")
    return QuotaRequestApproved(
        request_id=request.request_id,
        tenant=request.tenant,
        decided_by=by,
        comment=comment,
        approved_amount=amount,
        effective_from_ms=start,
        expires_ms=end,
    )


Grant = tuple[QuotaRequestSubmitted, QuotaRequestApproved]


def effective_lines(base: tuple[QuotaLine, ...], grants: Iterable[Grant]) -> tuple[QuotaLine, ...]:
    """The base quota plus each grant on the line of its resource and model (a new, unbounded line with
    the grant as its guarantee if there is none); line order kept, new lines in grant order. A sum beyond
    what an event may carry (``MAX_SAFE_INT``) is held there: unbounded in practice, and still a valid
    ``QuotaSet`` (a grant on a line already that large made governance's evaluation fail)."""
    lines = list(base)
    for submitted, approved in grants:
        amount = approved.approved_amount
        for i, line in enumerate(lines):
            if (line.resource, line.gpu_model) == (submitted.resource, submitted.gpu_model):
                limit = None if line.limit is None else min(MAX_SAFE_INT, line.limit + amount)
                guaranteed = min(MAX_SAFE_INT, line.guaranteed + amount)
                lines[i] = QuotaLine(
                    resource=line.resource, gpu_model=line.gpu_model, guaranteed=guaranteed, limit=limit
                )
                break
        else:
            # No line: the resource was unbounded; the grant adds a guarantee and keeps it unbounded.
            lines.append(QuotaLine(resource=submitted.resource, gpu_model=submitted.gpu_model, guaranteed=amount))
    return tuple(lines)


def quota_changes(state: GovState, config: GovConfig) -> list[Output]:
    """Auto-approvals of undecided requests; the ``QuotaSet`` of a queue when one of its grants starts or
    expires, and again when an operator replaced the queue's base quota while a grant was in force."""
    out: list[Output] = []
    for request_id in sorted(state.requests):
        request = state.requests[request_id]
        if request.decision is None:
            if request.submitted.period_end_ms <= state.now_ms:
                continue  # a period already over is never granted by rule (a person may still decide it)
            approved = auto_decide(request.submitted, config)
            if approved is not None:
                out.append(Output(f"gov:quota-approve:{request_id}", state.now_ms, approved))
            continue
        out += _grant_edges(state, request)
    out += _reapply(state)
    return [o for o in out if o.id not in state.emitted]


def _grant_edges(state: GovState, request: Request) -> list[Output]:
    decision, submitted = request.decision, request.submitted
    if not isinstance(decision, QuotaRequestApproved):
        return []
    edges = [("start", decision.effective_from_ms)]
    if decision.expires_ms is not None:
        edges.append(("end", decision.expires_ms))
    return [
        Output(
            f"gov:quota-{edge}:{submitted.request_id}",
            state.now_ms,
            _quota_set(state, submitted.tenant, submitted.queue, at, submitted.request_id),
        )
        for edge, at in edges
        if at <= state.now_ms
    ]


def _reapply(state: GovState) -> list[Output]:
    out = []
    for (tenant, queue), (version, set_ms) in sorted(state.base_versions.items()):
        granted = state.granted_ms.get((tenant, queue))
        if granted is None or set_ms <= granted:
            continue  # no grant applied yet (its start will), or the grants' quota is the latest
        active = [g for g in grants_of(state, tenant, queue) if _active(g[1], state.now_ms)]
        if active:
            event = _quota_set(state, tenant, queue, state.now_ms, active[0][0].request_id)
            out.append(Output(f"gov:quota-reapply:{tenant}.{queue}.{version}", state.now_ms, event))
    return out


def _quota_set(state: GovState, tenant: str, queue: str, at: int, request_id: str) -> QuotaSet:
    active = [g for g in grants_of(state, tenant, queue) if _active(g[1], at)]
    return QuotaSet(
        tenant=TenantId(tenant),
        queue=QueueId(queue),
        lines=effective_lines(state.base_quota.get((tenant, queue), ()), active),
        set_by="governance",
        request_id=QuotaRequestId(request_id),
    )


def grants_of(state: GovState, tenant: str, queue: str) -> list[Grant]:
    """Every approved request of a tenant's queue, by request id."""
    grants = []
    for request_id in sorted(state.requests):
        request = state.requests[request_id]
        s = request.submitted
        if (s.tenant, s.queue) == (tenant, queue) and isinstance(request.decision, QuotaRequestApproved):
            grants.append((s, request.decision))
    return grants


def _active(grant: QuotaRequestApproved, at: int) -> bool:
    return grant.effective_from_ms <= at and (grant.expires_ms is None or at < grant.expires_ms)
