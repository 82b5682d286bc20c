"""What the API's quota commands need of governance: its check of a new request, the requests as the
governance topic records them, and its rules for an operator's decision. A port, no code.

Used by ``services.api.quota_commands.QuotaCommands`` and ``services.api.quota_requests`` (the list).
Implemented by governance (``GovernanceQuotaRules``, in its own ``quota_rules`` module) and handed in by
the composition roots (``fedsched api``, ``fedsched up`` through ``services.api.embedded``, the tests' API
stacks), so the API imports nothing of governance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from events.catalog.governance import QuotaRequestApproved, QuotaRequestRejected, QuotaRequestSubmitted
from events.log.contract import EventLog

Decision = QuotaRequestApproved | QuotaRequestRejected


class RecordedRequest(Protocol):
    """A quota request as the governance topic has it, with its decision if one was made."""

    @property
    def submitted(self) -> QuotaRequestSubmitted: ...

    @property
    def submitted_ms(self) -> int:
        """The time of the event that recorded it."""
        ...

    @property
    def decision(self) -> Decision | None: ...


class QuotaRules(Protocol):
    def problem(self, request: QuotaRequestSubmitted, now_ms: int) -> tuple[str, str] | None:
        """What makes a new request unacceptable at ``now_ms``, as (field, message), or ``None``."""
        ...

    async def recorded(self, log: EventLog, request_id: str) -> RecordedRequest | None:
        """The request with this id as the governance topic of ``log`` holds it now; ``None`` if none."""
        ...

    async def requests(self, log: EventLog) -> Sequence[RecordedRequest]:
        """Every request the governance topic of ``log`` holds now, in the order they were recorded."""
        ...

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
    ) -> Decision:
        """An operator's answer to an undecided request (``None``: as asked). Raises pydantic's
        ``ValidationError`` for a field the event refuses, and another ``ValueError`` saying why for a
        decision that cannot be applied (an amount or a window the rules refuse)."""
        ...
