"""What the log says happened, read once from offset 0 after the soak: the facts the invariants judge.

Called by the soak's run once every component has stopped writing. Calls the event log (a
read-committed reader of every catalogue topic, partition by partition, from offset 0 to its end) and
the codec. Keeps only what the invariants and the cost recomputation need, each with its position in
the log (``topic[partition]@offset``) so a failure names the record.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from events.catalog.decisions import DecisionEvent, JobPlaced, SchedulingCycleCompleted
from events.catalog.errors import EventError
from events.catalog.inventory import ClusterRegistered, NodeObserved
from events.catalog.jobs import JobCancelled, JobRejected, JobSubmitted
from events.catalog.lifecycle import RUN_END_EVENTS, ends_job, ends_run
from events.catalog.topics import DECISIONS, TOPICS
from events.log import EventLog, LogRecord, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode
from events.wire.envelope import Envelope
from services.scheduler.core.outputs import SOURCE

KEPT_INVENTORY = {ClusterRegistered.event_type, NodeObserved.event_type}
SKIPPED_TOPICS = {
    "fedsched.profiles",
    "fedsched.quota-usage",
    "fedsched.governance",
    "fedsched.intake",
    "fedsched.audit",
}
"""Counted, not decoded: nothing the invariants judge is there (the intake's requests are the load's; the
audit topic holds the archiver's signed checkpoints, which are not catalogue events)."""


def where(record: LogRecord) -> str:
    return f"{record.topic}[{record.partition}]@{record.offset}"


@dataclass(frozen=True, slots=True)
class Seen:
    """One event as the log holds it: where, its id, its type and time."""

    at: str
    id: str
    type: str
    time_ms: int


@dataclass(frozen=True, slots=True)
class Placement:
    seen: Seen
    cycle_id: str
    cluster: str
    first_node: str
    gpu_milli: int
    """Milli-GPU the run holds in all: its replicas' GPUs times the share of each."""


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """A record of the decisions partition, in offset order: a decision or a cycle's record."""

    offset: int
    type: str
    id: str
    cycle_id: str
    sequence: int | None = None
    decision_count: int | None = None
    job_id: str | None = None


@dataclass
class History:
    records: Counter[str] = field(default_factory=Counter)  # topic -> committed records
    unreadable: list[str] = field(default_factory=list)
    submitted: dict[str, list[tuple[str, Seen]]] = field(default_factory=lambda: defaultdict(list))
    """request id -> (job id, the JobSubmitted) for every submission that names its request id."""
    rejected: dict[str, list[Seen]] = field(default_factory=lambda: defaultdict(list))
    tenant_of: dict[str, tuple[str, str]] = field(default_factory=dict)  # job -> (tenant, project)
    placements: dict[tuple[str, int], list[Placement]] = field(default_factory=lambda: defaultdict(list))
    run_ends: dict[tuple[str, int], list[Seen]] = field(default_factory=lambda: defaultdict(list))
    job_ends: dict[str, list[Seen]] = field(default_factory=lambda: defaultdict(list))
    decisions: list[DecisionRecord] = field(default_factory=list)
    """The decisions partition: decisions and cycle records (anything else there is left out)."""
    cycle_cancels: Counter[str] = field(default_factory=Counter)
    """cycle id -> the cancellations of waiting jobs it published (on the jobs topic, counted in its record)."""
    rates: dict[str, dict[str, int]] = field(default_factory=dict)  # cluster -> model -> micro per GPU-hour
    node_model: dict[tuple[str, str], str] = field(default_factory=dict)  # (cluster, node) -> first GPU's model

    @classmethod
    async def read(cls, log: EventLog) -> History:
        history = cls()
        reader = await log.reader()
        try:
            for spec in TOPICS:
                for partition in range(spec.partitions):
                    async for batch in read_to_end(reader, TopicPartition(spec.name, partition)):
                        for record in batch:
                            history.add(record)
        finally:
            await reader.close()
        return history

    def add(self, record: LogRecord) -> None:
        self.records[record.topic] += 1
        if record.topic in SKIPPED_TOPICS:
            return
        kind = (record.header("ce_type") or b"").decode(errors="replace")
        if record.topic == "fedsched.inventory" and kind not in KEPT_INVENTORY:
            return
        try:
            envelope = decode(record.headers, record.value)
        except EventError as error:
            self.unreadable.append(f"{where(record)}: {error}")
            return
        self._fold(record, envelope)

    def _fold(self, record: LogRecord, envelope: Envelope) -> None:
        event = envelope.data
        seen = Seen(where(record), envelope.id, type(event).__name__, envelope.time_ms)
        if record.topic == DECISIONS.name and isinstance(event, DecisionEvent | SchedulingCycleCompleted):
            self.decisions.append(_decision(record, envelope))
        if isinstance(event, JobCancelled) and envelope.source == SOURCE and envelope.id.startswith("cycle-"):
            self.cycle_cancels[envelope.id.split(":", 1)[0]] += 1
        if isinstance(event, JobSubmitted):
            request = event.client_request_id or ""
            self.submitted[request].append((event.job_id, seen))
            self.tenant_of.setdefault(event.job_id, (event.tenant, event.project))
        elif isinstance(event, JobRejected) and event.client_request_id:
            self.rejected[event.client_request_id].append(seen)
        elif isinstance(event, JobPlaced):
            milli = sum(len(r.gpu_indices) * r.gpu_milli_each for r in event.replicas)
            placement = Placement(seen, event.cycle_id, event.cluster, event.replicas[0].node, milli)
            self.placements[(event.job_id, event.run)].append(placement)
        elif isinstance(event, ClusterRegistered):
            self.rates[event.cluster] = {rate.model: rate.micro_per_gpu_hour for rate in event.gpu_rates}
        elif isinstance(event, NodeObserved):
            self.node_model[(event.cluster, event.node)] = event.gpus[0].model if event.gpus else ""
        if isinstance(event, RUN_END_EVENTS) and ends_run(event):
            self.run_ends[(event.job_id, event.run)].append(seen)
        if ends_job(event):
            self.job_ends[getattr(event, "job_id", "")].append(seen)


def _decision(record: LogRecord, envelope: Envelope) -> DecisionRecord:
    event = envelope.data
    kind = type(event).__name__
    if isinstance(event, SchedulingCycleCompleted):
        return DecisionRecord(record.offset, kind, envelope.id, event.cycle_id, event.sequence, event.decision_count)
    assert isinstance(event, DecisionEvent)
    return DecisionRecord(record.offset, kind, envelope.id, event.cycle_id, job_id=event.job_id)
