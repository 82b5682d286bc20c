"""What the connector keeps of the jobs topic: the submission of every job that has not ended.

Called by the executor. A ``JobPlaced`` names nodes and devices, but the pods also need what the job
asked for (tenant, resources, tolerations, the workload template): that lives in the job's
``JobSubmitted`` on the jobs topic. Decision: the connector reads the jobs topic in its consumer group
and keeps each ``JobSubmitted`` in memory until the job ends for good (``ends_job`` of
``events.catalog.lifecycle``: a run failed for a cause that may be retried keeps it, for the retry's
placement, until the scheduler's ``JobRetriesExhausted``, which the executor passes on as ``forget``); it
also notes cancel requests and the runs that ended here.

A job spread over clusters (``lifecycle.spreads``: an inference service with ``spread_clusters`` above 1)
has a part of its run in each cluster holding some of its replicas; a run-end event of the jobs topic ends
only its cluster's part (noted in ``runs_ended`` when it is this cluster's: that part is never opened
again), never the job. Its run ends with the scheduler's ``JobRunClosed``, on the decisions topic, which
the executor passes to ``apply`` too: a final outcome ends the job for good. The scan reads the jobs
topic only, so a spread job closed for good before a restart, whose partition is scanned again, stays in
memory as one whose retries were exhausted before a restart does (a submission more, never used).

The pod watcher's first list names the jobs with pods here; before it reports anything, ``recall`` reads
their partitions, keeping which of their runs ended here even for jobs over for good, so a run ended
while no connector ran (by governance, say) reports nothing more (``ended_here``).

A restart loses that memory while the group's offsets are already past the submissions, and a
``JobPlaced`` can be read before its ``JobSubmitted`` (two topics, no order between them). Either way
``get`` finds the submission by reading the job's partition of the jobs topic from its start (keyed by
job id, so one partition holds all of a job's history); that scan also fills the book with every other
live job of the partition and is done once per partition, later scans go on from where it stopped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from events.catalog.base import Event
from events.catalog.decisions import JobRunClosed
from events.catalog.errors import EventError
from events.catalog.jobs import JobCancelRequested, JobSubmitted
from events.catalog.lifecycle import JOB_END_EVENTS, RUN_END_EVENTS, ends_job, spreads
from events.catalog.topics import JOBS, partition_for
from events.catalog.types import ClusterId, JobId
from events.log import EventLog, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode

log = logging.getLogger("fedsched.connector.kubernetes")

_ENDS = (*JOB_END_EVENTS, JobRunClosed)
"""What may end a job for good: one of its end events, or its spread run's close."""
_TYPES = {cls.event_type.encode() for cls in (JobSubmitted, JobCancelRequested, *JOB_END_EVENTS, *RUN_END_EVENTS)}


@dataclass
class JobEntry:
    submitted: JobSubmitted | None = None
    cancel_requester: str | None = None
    runs_ended: set[int] = field(default_factory=set)
    """Runs of the job that ended on this cluster, or whose part here ended for a job spread over clusters
    (a late copy of their placement or of the addition that opened the part must not restart them)."""


class JobBook:
    def __init__(self, log_: EventLog, cluster: ClusterId) -> None:
        self._log = log_
        self.cluster = cluster
        self._jobs: dict[JobId, JobEntry] = {}
        self._scanned: dict[int, int] = {}
        """Partition of the jobs topic -> offset up to which it was scanned."""
        self.scans = 0
        self._pinned: set[JobId] = set()
        """Jobs with pods here when the connector started (``recall``): their runs' ends are kept."""
        self._ended_here: set[tuple[JobId, int]] = set()

    def __len__(self) -> int:
        return len(self._jobs)

    def apply(self, event: Event) -> bool:
        """Take one event of the jobs topic (in the order of its partition), or a ``JobRunClosed``, into
        account; True when it ended its job for good (the job is forgotten)."""
        if isinstance(event, RUN_END_EVENTS) and event.cluster == self.cluster and event.job_id in self._pinned:
            self._ended_here.add((event.job_id, event.run))
        if isinstance(event, JobSubmitted):
            self._jobs.setdefault(event.job_id, JobEntry()).submitted = event
        elif isinstance(event, JobCancelRequested):
            self._jobs.setdefault(event.job_id, JobEntry()).cancel_requester = event.requester
        elif isinstance(event, _ENDS) and ends_job(
            event, self._retries_asked(event.job_id), spread=self.spreads(event.job_id)
        ):
            self._jobs.pop(event.job_id, None)
            return True
        elif isinstance(event, RUN_END_EVENTS) and event.cluster == self.cluster:
            self._jobs.setdefault(event.job_id, JobEntry()).runs_ended.add(event.run)
        return False

    def spreads(self, job_id: JobId) -> bool:
        """Whether the job's run lives in parts, one per cluster (``False`` while its submission is not
        known: then ``get`` reads it, and whatever ended since, from its partition)."""
        entry = self._jobs.get(job_id)
        return spreads(entry.submitted if entry else None)

    def forget(self, job_id: JobId) -> None:
        """The job ended for good by a decision (``JobRetriesExhausted``, on the decisions topic)."""
        self._jobs.pop(job_id, None)

    def _retries_asked(self, job_id: JobId) -> int:
        entry = self._jobs.get(job_id)
        return entry.submitted.retry.on_application_failure if entry and entry.submitted else 0

    def entry(self, job_id: JobId) -> JobEntry | None:
        return self._jobs.get(job_id)

    async def recall(self, jobs: set[JobId]) -> None:
        """Read what the log says of these jobs (those with pods here at start, before anything is reported
        for them): the partitions holding them, once. Their runs that ended here stay known after the job
        ends for good (``ended_here``), so pods a kubelet started while no connector ran report nothing for
        a run whose end is in the log."""
        self._pinned |= jobs
        count = await self._log.partitions(JOBS.name)
        for partition in sorted({partition_for(job.encode(), count) for job in jobs}):
            if partition not in self._scanned:
                await self._scan(partition)

    def ended_here(self, job_id: JobId, run: int) -> bool:
        """Whether a run of a job recalled at start ended on this cluster by the log (by anyone)."""
        return (job_id, run) in self._ended_here

    def run_ended(self, job_id: JobId, run: int) -> bool:
        entry = self._jobs.get(job_id)
        return entry is not None and run in entry.runs_ended

    def cancel_requester(self, job_id: JobId) -> str | None:
        entry = self._jobs.get(job_id)
        return entry.cancel_requester if entry else None

    async def catch_up(self, job_id: JobId) -> None:
        """Read the job's partition on from where the book stopped to its end now: what the consumer may
        not have read yet (the jobs topic and the decisions topic have no order between them), such as the
        end of a spread run's part here that this connector reported after its start-up read."""
        await self._scan(partition_for(job_id.encode(), await self._log.partitions(JOBS.name)))

    async def get(self, job_id: JobId) -> JobSubmitted | None:
        """The job's submission: from memory, else from its partition of the jobs topic."""
        entry = self._jobs.get(job_id)
        if entry is not None and entry.submitted is not None:
            return entry.submitted
        await self._scan(partition_for(job_id.encode(), await self._log.partitions(JOBS.name)))
        entry = self._jobs.get(job_id)
        return entry.submitted if entry else None

    async def _scan(self, partition: int) -> None:
        tp = TopicPartition(JOBS.name, partition)
        start = self._scanned.get(partition, 0)
        offset = start
        reader = await self._log.reader()
        try:
            async for batch in read_to_end(reader, tp, start):
                for record in batch:
                    offset = record.offset + 1
                    if record.header("ce_type") not in _TYPES:
                        continue
                    try:
                        self.apply(decode(record.headers, record.value).data)
                    except EventError:
                        continue
        finally:
            await reader.close()
        self._scanned[partition] = offset
        self.scans += 1
        log.info("event=jobs_scanned partition=%d from=%d to=%d live_jobs=%d", partition, start, offset, len(self))
