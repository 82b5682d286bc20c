"""``fedsched.v1.JobService``: submit, cancel, get, list, watch and explain jobs.

Called by the gRPC server through ``services.api.handlers`` (which maps errors to status codes and
sets the caller's principal). Writes go through ``JobCommands`` (shared with the intake); reads come
from the read models, with the API's own submission record as a fallback for a job accepted a moment
ago that the job view has not folded yet.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping

from events.catalog.lifecycle import FINAL_STATUSES, JobStatus
from events.catalog.pending_reasons import PendingReason
from events.catalog.topics import JOBS
from events.log.contract import EventLog
from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.typed import JobFilter, JobRow
from services.api import convert, validation, watch
from services.api.auth import check_scope, current_principal
from services.api.commands import JobCommands
from services.api.errors import NotFound
from services.api.explain import explain
from services.api.handlers import Context
from services.api.pb import jobs_pb2
from services.api.store import ApiStore
from services.api.watch_tails import WatchTails

_FLEET_VIEW_FOR_S = 5.0

STATUSES = (*(status.value for status in JobStatus), "unknown")  # "unknown": a job view not yet told its status
PRIORITY_CLASSES = ("production_inference", "critical_training", "standard", "best_effort")
PENDING_REASONS = tuple(reason.value for reason in PendingReason)


class JobService:
    def __init__(
        self,
        commands: JobCommands,
        reads: ReadModels,
        store: ApiStore,
        log: EventLog,
        tails: WatchTails,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._clock = clock  # a waiting job's wait so far is counted to now
        self._largest: tuple[float, dict[str, int]] | None = None
        self._commands = commands
        self._reads = reads
        self._store = store
        self._log = log
        self._tails = tails

    async def SubmitJob(self, request: jobs_pb2.SubmitJobRequest, context: Context) -> jobs_pb2.SubmitJobResponse:
        principal = current_principal()
        request_id = validation.request_id("client_request_id", request.client_request_id)
        spec = validation.job_spec_body(request.spec)
        done = await self._commands.submit(principal, spec, request_id)
        resources = request.spec.resources
        asked, gpus = list(resources.gpu_models), resources.gpus
        warnings = shape_warnings(asked, gpus, await self._largest_nodes()) if asked or gpus else []
        if warnings:  # never from a view that may be a few seconds old
            warnings = shape_warnings(asked, gpus, await self._largest_nodes(fresh=True))
        return jobs_pb2.SubmitJobResponse(
            job_id=done.job_id, created=done.created, client_request_id=done.client_request_id, warnings=warnings
        )

    async def _largest_nodes(self, *, fresh: bool = False) -> dict[str, int]:
        """The most GPUs a node of each model has, read at most every few seconds unless ``fresh`` (a
        submission that fits the fleet costs no query). A fleet not known yet is read again each time:
        it gives no warning at all, and held for seconds it hid them from the first submissions."""
        now = time.monotonic()
        held = self._largest
        if fresh or held is None or not held[1] or now - held[0] > _FLEET_VIEW_FOR_S:
            held = self._largest = (now, await self._reads.largest_nodes())
        return held[1]

    async def CancelJob(self, request: jobs_pb2.CancelJobRequest, context: Context) -> jobs_pb2.CancelJobResponse:
        request_id = validation.request_id("client_request_id", request.client_request_id)
        ref = await self._commands.cancel(current_principal(), request.job_id, request.reason, request_id)
        return jobs_pb2.CancelJobResponse(job_id=ref.job_id, status=ref.status)

    async def _visible_row(self, job_id: str) -> JobRow | None:
        """The job's row if the caller may see it; ``NotFound`` for another tenant's job."""
        job_id = validation.identifier("job_id", job_id)
        await self._commands.find(current_principal(), job_id)
        row = await self._reads.job(job_id)
        return row if row is not None and not row.orphan else None

    async def GetJob(self, request: jobs_pb2.GetJobRequest, context: Context) -> jobs_pb2.Job:
        row = await self._visible_row(request.job_id)
        if row is not None:
            return convert.job(row, now_ms=self._clock(), with_timeline=True)
        entry = await self._store.submission(request.job_id)
        if entry is None:  # pragma: no cover - find() saw it a moment ago
            raise NotFound(f"no job {request.job_id}", field="job_id")
        return convert.accepted_job(entry, with_timeline=True)

    async def ListJobs(self, request: jobs_pb2.ListJobsRequest, context: Context) -> jobs_pb2.ListJobsResponse:
        principal = current_principal()
        where = JobFilter(
            tenant=validation.optional_identifier("tenant", request.tenant),
            project=validation.optional_identifier("project", request.project),
            queue=validation.optional_identifier("queue", request.queue),
            statuses=tuple(validation.one_of("statuses", s, STATUSES) for s in request.statuses),
            priority_class=validation.one_of("priority_class", request.priority_class, PRIORITY_CLASSES)
            if request.priority_class
            else None,
            cluster=validation.optional_identifier("cluster", request.cluster),
            pending_reasons=tuple(
                validation.one_of("pending_reasons", reason, PENDING_REASONS) for reason in request.pending_reasons
            ),
        )
        if len(request.statuses) > len(STATUSES):
            validation.one_of("statuses", "(too many)", STATUSES)
        if len(request.pending_reasons) > len(PENDING_REASONS):
            validation.one_of("pending_reasons", "(too many)", PENDING_REASONS)
        check_scope(principal, where.tenant or "")
        size = validation.page_size(request.page_size)
        query = {**_query(where), "scope": principal.tenant_scope()}
        after = validation.decode_page_token(request.page_token, query, 2)
        position = None if after is None else (int(after[0]), str(after[1]))
        rows = await self._reads.jobs(where, principal.tenant_scope(), size + 1, position)
        now = self._clock()
        out = jobs_pb2.ListJobsResponse(jobs=[convert.job(r, now_ms=now) for r in rows[:size]])
        if len(rows) > size:
            last = rows[size - 1]
            out.next_page_token = validation.encode_page_token(query, [last.submitted_ms or 0, last.job_id])
        return out

    async def WatchJob(self, request: jobs_pb2.WatchJobRequest, context: Context) -> AsyncIterator[jobs_pb2.JobEvent]:
        job_id = validation.identifier("job_id", request.job_id)
        ref = await self._commands.find(current_principal(), job_id)
        row, positions = await self._reads.job_and_positions(job_id)
        if row is not None and row.orphan:
            row = None
        status = row.status if row is not None else ref.status
        if row is not None and not request.skip_history:
            for item in watch.history(convert.as_mapping(row)):
                yield item
        elif row is None and not request.skip_history and not any(k[0] == JOBS.name for k in positions):
            # Accepted, not folded, and no positions to read it from: show the acceptance itself.
            entry = await self._store.submission(job_id)
            if entry is not None:
                yield jobs_pb2.JobEvent(
                    job_id=job_id, time_ms=entry.created_ms, event="JobSubmitted", status="submitted", history=True
                )
        if status in FINAL_STATUSES and not request.follow_after_end:
            return
        reader = self._tails.reader()  # shared with every other watch of these partitions
        try:
            starts = await watch.start_positions(self._log, reader, job_id, positions, request.skip_history)
            spread = row is not None and row.spread_clusters > 1
            async for item in watch.live(reader, job_id, starts, status, request.follow_after_end, spread):
                yield item
        finally:
            await reader.close()

    async def ExplainJob(self, request: jobs_pb2.ExplainJobRequest, context: Context) -> jobs_pb2.Explanation:
        row = await self._visible_row(request.job_id)
        if row is None:
            entry = await self._store.submission(request.job_id)
            status = "submitted" if entry is not None else "unknown"
            return jobs_pb2.Explanation(
                job_id=request.job_id,
                status=status,
                question="unknown",
                summary=[f"The scheduler has made no decision about this job yet (status {status})."],
            )
        return explain(convert.as_mapping(row), self._clock())


def _query(where: JobFilter) -> dict[str, object]:
    """The filters a page token is bound to (a token of another query is refused)."""
    query: dict[str, object] = {
        "tenant": where.tenant,
        "project": where.project,
        "queue": where.queue,
        "statuses": list(where.statuses),
        "priority_class": where.priority_class,
        "cluster": where.cluster,
    }
    if where.pending_reasons:  # only when asked: the tokens of queries without it stay good
        query["pending_reasons"] = list(where.pending_reasons)
    return query


def shape_warnings(asked: list[str], gpus: int, largest: Mapping[str, int]) -> list[str]:
    """What a submitter should know of a job the fleet cannot run as asked (it is accepted, and waits):
    a GPU model no node has (with the one probably meant), or more whole GPUs per replica than any node
    of the models it accepts has. None while the fleet is not known yet."""
    if not largest:
        return []
    models = sorted(largest)
    by_case = {model.casefold(): model for model in models}
    out = []
    for model in asked:
        if model in largest:
            continue
        meant = by_case.get(model.casefold())
        hint = f"did you mean {meant}?" if meant else f"the fleet has {', '.join(models)}"
        out.append(f"no node has GPU model {model}: the job waits until one joins ({hint})")
    accepted = [model for model in asked if model in largest] if asked else models
    most = max((largest[model] for model in accepted), default=0)
    if accepted and gpus > most:
        out.append(
            f"no node of {', '.join(accepted)} has {gpus} GPUs (the largest has {most}): one replica cannot run "
            f"as asked; ask for at most {most} GPUs per replica and more replicas"
        )
    return out
