"""Reading the log: a partition up to its current end, the way every catch-up (audit, replay, rebuild)
does, and a record into its event, the way every consumer does.

Called by the audit archiver, projection rebuilds, benchmarks and tests (``read_to_end``, ``EndWatch``),
and by every host that folds events (``decode_record``: the projections' in-process follower, the
scheduler, governance, the consumer-group step of the connectors). Works on any ``LogReader``.

``decode_record`` is the one place a consumer turns a record into an envelope: the codec's checks, and
the check of the event's time against the record's time in the log (``events.wire.codec.TimeSkew``),
which a host takes from its caller or, by default, from the ``FEDSCHED_EVENT_TIME_SKEW`` environment
variable (``skew_from_environment``), else ``DEFAULT_SKEW``.

Duplicates. Delivery is at least once; every consumer makes the effect exactly once, in memory that does
not grow with the log. A record read again at its position (topic, partition, offset) is passed over:
the projections' entities keep the last offset they applied per source partition, the scheduler and
governance hosts the next offset to fold per partition, the connectors' consumer groups commit their
offsets with their dead letters. An event appended again at a later offset (a producer's retry, a
connector re-publishing after a restart), however many records later, changes nothing, by what each
consumer keeps, per event type (P: projections, S: scheduler, G: governance; "latest" is
``events.wire.envelope.Latest``: the latest report of an entity by time, then the order read, the envelope
id telling the same report again):

=========================== ============================================================================
Event                       Why it changes nothing the second time
=========================== ============================================================================
NodeObserved                P S: a generation no later than the node's is ignored. G: a node is lost
                            while its highest generation removed is not below its highest observed.
NodeRemoved                 P: ignored below the node's generation, or at it once gone. S: the highest
                            generation removed is kept. G: as for NodeObserved.
GpuHealthReported           P S: the latest per node (a recovered GPU or NPU does not turn failed again).
NodeUsageReported           P G: the latest per node (no GPU time counted twice, no extra idle sample).
ClusterRegistered           P S: the latest per cluster (old rates do not come back).
ClusterStatusChanged        P S G: the latest per cluster (an old "unreachable" does not come back).
ClusterNodesListed          Folded by no service: the Kubernetes connector reads back its latest complete
                            roster at start (parts grouped by ``as_of`` and ``taken_ms``).
JobSubmitted                P S G: a job's first submission is its request; another changes nothing.
JobRejected                 P: a step taken once. S: the final status, once set, stays.
JobCancelRequested          P: a step taken once. S G: a flag.
JobStarted                  P: a step taken once per run. G: a run's start is set once.
JobSucceeded, JobFailed,    P S G: a run's first end is final. A JobCancelled that names no run is a
JobPreempted, JobReclaimed, step taken once (P), the final status (S G).
JobCancelled
JobQueued                   P S G: the latest cycle's wait: one with the id of the latest applied, or of
                            an earlier cycle, is not applied.
JobPlaced                   P: a run no later than the latest placed is placed already. S G: a run's first
                            placement is final.
JobReplicasAdded            P S G: an addition continues the run's replica numbers exactly; one that names
                            numbers the run holds already (a repeat) changes nothing.
JobRunClosed                P S G: a spread run's first close is final (the scheduler closes it once).
JobPreemptionRequested      P: a step taken once per run. S: a run is asked to stop once; its preemptor
                            names it once.
JobReclaimRequested         P: a step taken once per run. S: a set of runs. G: the run's rule, set again.
JobRetryScheduled,          P: a step taken once per run. S: one verdict per run, the first. G (exhausted
JobRetriesExhausted         only): the final status, once set, stays.
SchedulingCycleCompleted    S: the highest sequence is kept.
ResourceProfileUpdated      S: a version no later than the one held is ignored.
PolicyConfigured            S: the latest per author (``configured_by``).
TenantRegistered            S: the latest per tenant.
QuotaSet                    P S G: the latest per queue and author (``set_by``: governance's grants carry
                            the log's time, an operator's the API's clock).
QuotaRequestSubmitted       G: the first with its request id.
QuotaRequestApproved,       G: a request's first decision is final.
QuotaRequestRejected
GovernanceFinding           S: the latest end of a node's suspicion is kept. G: its id, among those emitted.
JobIdleWarning,             G: their ids, among those emitted; the log's time is the latest event time.
GovernanceClockTicked
=========================== ============================================================================

A consumer that reads none of an event type is not listed for it. Deltas between the projection stages
are stated per job and run (or node), and a repeated event emits none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from events.log.contract import LogReader, LogRecord, TopicPartition
from events.wire.codec import DEFAULT_SKEW, TimeSkew, decode, parse_skew
from events.wire.envelope import Envelope

SKEW_VARIABLE = "FEDSCHED_EVENT_TIME_SKEW"
"""The environment variable a deployment sets the allowed event-time skew with: ``off``, or
``AHEAD[,BEHIND]`` (``24h``, ``24h,3650d``, ``2h,none``; see ``events.wire.codec.parse_skew``)."""


def decode_record(record: LogRecord, skew: TimeSkew | None = DEFAULT_SKEW) -> Envelope:
    """The event a record holds, checked against the record's time in the log. Raises an
    ``EventError`` naming the field and the reason (``time`` when the skew is exceeded)."""
    return decode(record.headers, record.value, log_time_ms=record.timestamp_ms, skew=skew)


def skew_from_environment(environ: Mapping[str, str]) -> TimeSkew:
    """The skew a host uses when its caller names none: ``SKEW_VARIABLE`` if it is set, else the default.
    Raises ValueError naming the variable when its value cannot be read (a host must not start with a
    check other than the one its operator asked for)."""
    text = environ.get(SKEW_VARIABLE)
    if text is None or not text.strip():
        return DEFAULT_SKEW
    try:
        return parse_skew(text)
    except ValueError as error:
        raise ValueError(f"{SKEW_VARIABLE}: {error}") from None


async def read_to_end(
    reader: LogReader, tp: TopicPartition, offset: int = 0, *, max_records: int = 2000, end: int | None = None
) -> AsyncIterator[list[LogRecord]]:
    """Batches of committed records from ``offset`` up to the partition's end as of the call (or
    ``end``, when the caller has just read it)."""
    if end is None:
        end = await reader.end_offset(tp)
    while offset < end:
        batch = await reader.read(tp, offset, max_records=max_records, timeout_s=0.05)
        if batch:
            offset = batch[-1].offset + 1
            yield batch
        elif await reader.caught_up(tp, offset):
            return


@dataclass
class EndWatch:
    """Which partitions have something past a position, for a service that follows many partitions by
    reading each to its end in turn (the archiver, governance): their ends in one round trip, instead of
    one per partition on every pass. On Kafka a partition may end on transaction markers, which no read
    returns: once a read to the end stopped short of it, the partition is not read again until its end
    or the position moves."""

    _markers: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    async def ahead(self, reader: LogReader, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The partitions with (perhaps) records at or past their position, and their ends now."""
        ends = await reader.end_offsets(list(positions))
        return {
            tp: end for tp, end in ends.items() if positions[tp] < end and self._markers.get(tp) != (positions[tp], end)
        }

    def reached(self, tp: TopicPartition, position: int, end: int) -> None:
        """A read to ``end`` stopped at ``position``: short of the end, only markers were left."""
        if position < end:
            self._markers[tp] = (position, end)
        else:
            self._markers.pop(tp, None)
