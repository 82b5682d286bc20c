"""What the API's ``GovernanceService`` needs of governance: the findings on the governance topic and the
governance report. A port, no code.

Used by ``services.api.governance``. Implemented by governance (``GovernanceReports``, in its own
``api_reads`` module) and handed in by the composition roots (``fedsched api``, ``fedsched up`` through
``services.api.embedded``, the tests' API stacks), as the quota rules are (``services.api.quota_rules``),
so the API imports nothing of governance. Scoping is the API's to decide: it names the tenants a report
may count, and filters findings by their tenant.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Protocol

from events.log.contract import EventLog
from projections.readmodel.reader import ReadModels


class Finding(Protocol):
    """A governance finding as people read it."""

    @property
    def time_ms(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def rule(self) -> str: ...

    @property
    def tenant(self) -> str | None:
        """``None`` for a finding about a node, a cluster or a cohort's budget."""
        ...

    @property
    def subject(self) -> str: ...

    @property
    def message(self) -> str: ...


class ReportFigures(Protocol):
    """The figures of a governance report: its period, its tables and its notes."""

    @property
    def since_ms(self) -> int: ...

    @property
    def until_ms(self) -> int: ...

    @property
    def usage_since_ms(self) -> int: ...

    @property
    def usage_until_ms(self) -> int: ...

    @property
    def notes(self) -> list[str]: ...

    def tables(self) -> list[tuple[str, list[dict[str, object]]]]:
        """Each table by name, each row a mapping of column to a number, a text or ``None``."""
        ...


class GovernanceReads(Protocol):
    def findings(self, log: EventLog, start: int) -> AsyncGenerator[tuple[int, Finding], None]:
        """Each finding on the governance topic of ``log`` from offset ``start`` to its end now, with its
        offset, in the order recorded."""
        ...

    async def report(
        self,
        reads: ReadModels,
        log: EventLog,
        since_ms: int,
        until_ms: int,
        *,
        tenants: Sequence[str] | None,
        now_ms: int,
    ) -> ReportFigures:
        """The report of ``since_ms`` .. ``until_ms`` (``until_ms`` after ``since_ms``) computed from the data
        of ``tenants`` alone (``None``: every tenant); runs holding GPUs count up to ``now_ms`` at most."""
        ...
