"""``fedsched.v1.AuditService``: a job's timeline with reasons, from the job view.

Called by the gRPC server through ``services.api.handlers``. The full record of every event stays in
the log and the audit archive (``fedsched audit timeline``); this is the view a portal shows.
"""

from __future__ import annotations

from projections.readmodel.reader import ReadModels
from services.api import convert, validation
from services.api.auth import current_principal
from services.api.commands import JobCommands
from services.api.handlers import Context
from services.api.pb import audit_pb2
from services.api.store import ApiStore


class AuditService:
    def __init__(self, commands: JobCommands, reads: ReadModels, store: ApiStore) -> None:
        self._commands = commands
        self._reads = reads
        self._store = store

    async def GetJobTimeline(self, request: audit_pb2.GetJobTimelineRequest, context: Context) -> audit_pb2.JobTimeline:
        job_id = validation.identifier("job_id", request.job_id)
        ref = await self._commands.find(current_principal(), job_id)
        row = await self._reads.job(job_id)
        if row is not None and not row.orphan:
            entries = [convert.timeline_entry(e) for e in row.timeline]
            return audit_pb2.JobTimeline(job_id=job_id, tenant=row.tenant, status=row.status, entries=entries)
        accepted = (
            convert.accepted_job(entry, with_timeline=True) if (entry := await self._store.submission(job_id)) else None
        )
        entries = list(accepted.timeline) if accepted is not None else []
        return audit_pb2.JobTimeline(job_id=job_id, tenant=ref.tenant, status=ref.status, entries=entries)
