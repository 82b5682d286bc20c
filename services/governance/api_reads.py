"""Governance's side of the API's read port (``services.api.governance_reads.GovernanceReads``).

Built by the composition roots that start the API (``fedsched api``, ``fedsched up``, the tests' stacks)
and called by the API's ``GovernanceService`` (``fedsched gov findings`` and ``gov report`` are its
clients). Calls ``services.governance.topic`` (findings on the governance topic) and
``services.governance.report`` (the report from the read models and findings).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence

from events.log.contract import EventLog
from projections.readmodel.reader import ReadModels
from services.governance.core.figures import FindingRow, Report
from services.governance.report import gather
from services.governance.topic import findings


class GovernanceReports:
    def findings(self, log: EventLog, start: int) -> AsyncGenerator[tuple[int, FindingRow], None]:
        return findings(log, start=start)

    async def report(
        self,
        reads: ReadModels,
        log: EventLog,
        since_ms: int,
        until_ms: int,
        *,
        tenants: Sequence[str] | None,
        now_ms: int,
    ) -> Report:
        return await gather(reads, log, since_ms, until_ms, now_ms=now_ms, tenants=tenants)
