"""Governance's side of the API's quota port (``services.api.quota_rules.QuotaRules``).

Built by the composition roots that start the API (``fedsched api``, ``fedsched up``, the tests' stacks)
and called by the API's ``QuotaCommands`` and its list of requests (``fedsched gov quota ...`` is their
client). Calls the pure rules of ``services.governance.core.quota`` and reads the governance topic
through ``services.governance.topic``, as the governance host folds it.
"""

from __future__ import annotations

from collections.abc import Sequence

from events.catalog.governance import QuotaRequestApproved, QuotaRequestRejected, QuotaRequestSubmitted
from events.log.contract import EventLog
from services.governance.core.quota import decide, request_problem
from services.governance.core.state import Request
from services.governance.topic import governance_state


class GovernanceQuotaRules:
    def problem(self, request: QuotaRequestSubmitted, now_ms: int) -> tuple[str, str] | None:
        return request_problem(request, now_ms)

    async def recorded(self, log: EventLog, request_id: str) -> Request | None:
        return (await governance_state(log)).requests.get(request_id)

    async def requests(self, log: EventLog) -> Sequence[Request]:
        """In the order recorded: ``GovState.requests`` keeps a request where its first event put it."""
        return list((await governance_state(log)).requests.values())

    def decision(
        self,
        asked: QuotaRequestSubmitted,
        *,
        approve: bool,
        by: str,
        comment: str,
        approved_amount: int | None,
        effective_from_ms: int | None,
        expires_ms: int | None,
    ) -> QuotaRequestApproved | QuotaRequestRejected:
        """``decide``'s answer; its ``DecisionError`` is the ``ValueError`` the port names."""
        return decide(
            asked,
            approve=approve,
            by=by,
            comment=comment,
            approved_amount=approved_amount,
            effective_from_ms=effective_from_ms,
            expires_ms=expires_ms,
        )
