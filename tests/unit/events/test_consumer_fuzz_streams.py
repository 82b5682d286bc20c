"""Streams of records for the stateful fuzz of every consumer (the projections, the scheduler, governance).

A stream is what a log could hold: valid events about a small world (clusters, nodes, tenants, jobs and
their runs, in any order a hostile or buggy producer could write them, with extreme values drawn from the
catalogue's own constraints now and then), late repeats of earlier records (the same bytes appended again
at a later offset, after any number of other records), and junk: corrupted bytes and headers, oversized
records, event times far from the log's. ``a_stream()`` draws one; ``read(stream)`` decodes each record
as every consumer does (``events.log.reading.decode_record``, with the default skew).

The consumers' own fuzz tests (``tests/*/test_consumer_fuzz*.py``) fold what is read and compare the
state with and without the repeats. This module's test holds the read step itself to its promise: it
never fails otherwise than with an ``EventError``, every record made to be refused is refused (naming
the field, when one is at fault), and each refusal makes a dead letter carrying the reason and its code.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.catalog.base import Event
from events.catalog.decisions import (
    CandidateScore,
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReclaimRequested,
    ReclaimFigures,
    ReplicaPlacement,
    SchedulingCycleCompleted,
)
from events.catalog.errors import EventError
from events.catalog.governance import (
    FindingKind,
    GovernanceFinding,
    PolicyConfigured,
    QuotaLine,
    QuotaRequestApproved,
    QuotaRequestRejected,
    QuotaRequestSubmitted,
    QuotaSet,
    TenantRegistered,
)
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuDevice,
    GpuHealthReported,
    GpuHealthSample,
    GpuRate,
    GpuUsage,
    JobUsage,
    NodeObserved,
    NodeRemoved,
    NodeUsageReported,
)
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobKind,
    JobPreempted,
    JobReclaimed,
    JobRejected,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
    PriorityClass,
)
from events.catalog.profiles import GpuModelProfile, Quantities, ResourceProfileUpdated
from events.catalog.reasons import ReasonCode
from events.catalog.topics import partition_for, topic
from events.catalog.types import MAX_SAFE_INT, Health, ResourceKind, Resources
from events.log.contract import LogRecord
from events.log.deadletter import CODE, REASON, dead_letter
from events.log.reading import decode_record
from events.wire.codec import DEFAULT_SKEW, encode
from events.wire.envelope import MAX_TIME_MS, Envelope, format_time
from tests.unit.events.catalog_strategies import events_of

NOW = 1_764_680_400_000
"""The log's time when the stream starts; each record is appended 10 ms after the one before."""
DAY_MS = 86_400_000
CLUSTERS = ("c1", "c2")
NODES = ("n0", "n1", "n2")
TENANTS = ("t0", "t1")
JOBS = tuple(f"j{i}" for i in range(5))
MODELS = ("A100", "T4")
CYCLES = tuple(f"cycle-{i:09d}" for i in range(1, 6))
SETTERS = ("alice", "governance")


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of a stream, and what it was made to be."""

    record: LogRecord
    kind: str
    """``event`` (a valid event), ``repeat`` (an earlier record again) or ``junk:<how>``."""
    refused: str | None = None
    """For junk that must be refused: the field named (``""``: an error without a field, such as an unknown
    type). None: it must be read, or (``junk:flipped``) it may be either."""

    @property
    def repeat(self) -> bool:
        return self.kind == "repeat"


@dataclass
class Stream:
    entries: list[Entry] = field(default_factory=list)

    def without_repeats(self) -> list[Entry]:
        """The stream as it would have been without the repeats (the other records keep their offsets)."""
        return [entry for entry in self.entries if not entry.repeat]


Read = list[tuple[Entry, Envelope | EventError]]


def read(entries: list[Entry]) -> Read:
    """Every record decoded as a consumer decodes it: its envelope, or why it cannot be folded."""
    out: Read = []
    for entry in entries:
        try:
            out.append((entry, decode_record(entry.record, DEFAULT_SKEW)))
        except EventError as error:
            out.append((entry, error))
    return out


# -- valid events about a small world -------------------------------------------------------------------

Draw = Callable[[st.SearchStrategy[Any]], Any]
Pick = random.Random
"""What the builders take the details of one event from: a generator seeded by Hypothesis, one draw per
event (a Hypothesis draw per detail cost more than the consumers' work on the event)."""


def _big(r: Pick, usual: int) -> int:
    """Mostly ``usual``; now and then 0 or the largest value the catalogue allows."""
    return r.choice((usual, usual, usual, 0, MAX_SAFE_INT))


def _node_observed(r: Pick) -> Event:
    model = r.choice(MODELS)
    return NodeObserved(
        cluster=r.choice(CLUSTERS),
        node=r.choice(NODES),
        generation=r.randint(0, 6),
        cpu_milli=_big(r, 96_000),
        memory_mib=_big(r, 1_048_576),
        gpus=tuple(
            GpuDevice(index=i, model=model, memory_mib=81_920, health=r.choice(tuple(Health)))
            for i in range(r.randint(0, 8))
        ),
        schedulable=r.random() < 0.8,
    )


def _node_removed(r: Pick) -> Event:
    return NodeRemoved(
        cluster=r.choice(CLUSTERS), node=r.choice(NODES), generation=r.randint(0, 6), reason=ReasonCode.NODE_LOST
    )


def _gpu_health(r: Pick) -> Event:
    return GpuHealthReported(
        cluster=r.choice(CLUSTERS),
        node=r.choice(NODES),
        gpus=tuple(
            GpuHealthSample(
                index=i,
                health=r.choice(tuple(Health)),
                xid_errors=_big(r, r.randint(0, 3)),
                ecc_uncorrected=r.choice((None, 0, 1)),
            )
            for i in sorted(r.sample(range(9), r.randint(1, 3)))
        ),
    )


def _usage(r: Pick) -> Event:
    return NodeUsageReported(
        cluster=r.choice(CLUSTERS),
        node=r.choice(NODES),
        window_ms=r.choice((1, 60_000, 24 * 3_600_000)),
        gpus=(GpuUsage(index=0, utilisation_pct=r.randint(0, 100), memory_used_mib=1),),
        jobs=tuple(
            JobUsage(job_id=job, gpu_indices=(r.randint(0, 8),), utilisation_pct=r.randint(0, 100))
            for job in r.sample(JOBS, r.randint(0, 2))
        ),
    )


def _cluster(r: Pick) -> Event:
    cluster = r.choice(CLUSTERS)
    if r.random() < 0.5:
        status = r.choice(tuple(ClusterStatus))
        return ClusterStatusChanged(cluster=cluster, status=status, reason=ReasonCode.CLUSTER_UNREACHABLE)
    rates = tuple(GpuRate(model=m, micro_per_gpu_hour=_big(r, 3_000_000)) for m in MODELS)
    return ClusterRegistered(
        cluster=cluster, kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR", gpu_rates=rates
    )


_DOCUMENTS: tuple[dict[str, Any], ...] = ({}, {"usage_half_life_ms": 3_600_000}, {"no_such_setting": 1})
"""Policy documents: none, a valid setting, one the scheduler refuses (such a policy never takes effect)."""


def _governance(r: Pick) -> Event:
    tenant = r.choice(TENANTS)
    choice = r.randint(0, 6)
    if choice <= 2:
        guaranteed = _big(r, r.choice((0, 1000, 4000)))
        line = QuotaLine(resource=ResourceKind.GPU, guaranteed=guaranteed, limit=guaranteed)
        return QuotaSet(tenant=tenant, lines=(line,), set_by=r.choice(SETTERS))
    if choice == 3:
        return TenantRegistered(tenant=tenant, display_name=tenant, weight=r.choice((1, 5, 1_000_000)))
    if choice == 4:
        document = r.choice(_DOCUMENTS)
        return PolicyConfigured(policy="default", policy_version="v1", document=document, configured_by="ops")
    if choice == 5:
        start = NOW + r.randint(-2, 2) * 3_600_000
        request = f"r{r.randint(0, 2)}"
        decided = r.randint(0, 2)
        if decided == 0:
            return QuotaRequestSubmitted(
                request_id=request,
                tenant=tenant,
                resource=ResourceKind.GPU,
                amount=r.choice((1, 1000, MAX_SAFE_INT)),
                period_start_ms=start,
                period_end_ms=start + 3_600_000,
                justification="more",
                requester="alice",
            )
        if decided == 1:
            return QuotaRequestRejected(request_id=request, tenant=tenant, decided_by="ops")
        return QuotaRequestApproved(
            request_id=request, tenant=tenant, decided_by="ops", approved_amount=1000, effective_from_ms=start
        )
    return GovernanceFinding(
        finding_id=f"f{r.randint(0, 3)}",
        kind=FindingKind.SUSPECT_NODE,
        rule="suspect-node",
        reason=ReasonCode.SUSPECT_NODE,
        cluster=r.choice(CLUSTERS),
        node=r.choice(NODES),
        profile_penalty_milli=r.choice((0, 300)),
        observed_ms=NOW + r.randint(0, 100) * 1000,
        message="jobs fail here",
    )


def _submitted(r: Pick, job: str) -> Event:
    whole = r.randint(0, 2)
    share = whole == 0 and r.random() < 0.5
    resources = Resources(
        cpu_milli=_big(r, 4000),
        memory_mib=_big(r, 8192),
        gpus=0 if share else whole,
        gpu_milli=500 if share else 0,
        gpu_models=r.choice(((), ("A100",), ("T4",))),
    )
    return JobSubmitted(
        job_id=job,
        name=job,
        tenant=r.choice(TENANTS),
        kind=r.choice((JobKind.BATCH, JobKind.NOTEBOOK, JobKind.TRAINING)),
        priority_class=r.choice(tuple(PriorityClass)),
        replicas=r.choice((1, 1, 2)),
        resources=resources,
        max_runtime_s=r.choice((None, 60, 10 * 365 * 24 * 3600)),
    )


def _placed(r: Pick, job: str) -> Event:
    node, cluster = r.choice(NODES), r.choice(CLUSTERS)
    gpus = r.choice(((), (0,), (1,), (0, 1), (6, 7)))
    return JobPlaced(
        job_id=job,
        cycle_id=r.choice(CYCLES),
        cluster=cluster,
        run=r.randint(1, 3),
        replicas=(ReplicaPlacement(replica=0, node=node, gpu_indices=gpus, gpu_milli_each=1000 if gpus else 0),),
        chosen=CandidateScore(cluster=cluster, node=node, total=0),
        explanation="fuzz",
    )


_FIGURES = ReclaimFigures(
    borrower_guaranteed_milli=0,
    borrower_used_milli=1000,
    lender="t1",
    lender_guaranteed_milli=1000,
    lender_used_milli=0,
    lender_pending_milli=1000,
    reclaimed_milli=1000,
)


def _job(r: Pick) -> Event:
    job, cluster, run = r.choice(JOBS), r.choice(CLUSTERS), r.randint(0, 3)
    some_run = max(1, run)
    kind = r.randint(0, 13)
    if kind <= 2:
        return _submitted(r, job)
    if kind <= 4:
        return _placed(r, job)
    if kind == 5:
        reasons = (r.choice((ReasonCode.INSUFFICIENT_GPU, ReasonCode.QUOTA_EXCEEDED)),)
        return JobQueued(job_id=job, cycle_id=r.choice(CYCLES), reasons=reasons, message="waits")
    if kind == 6:
        return JobStarted(job_id=job, cluster=cluster, run=some_run)
    if kind == 7:
        return JobSucceeded(job_id=job, cluster=cluster, run=some_run)
    if kind == 8:
        return JobFailed(job_id=job, cluster=cluster, run=some_run, reason=ReasonCode.NON_ZERO_EXIT, node="n0")
    if kind == 9:
        return r.choice((JobPreempted, JobReclaimed))(job_id=job, cluster=cluster, run=some_run)
    if kind == 10:
        return JobCancelled(job_id=job, cluster=cluster if run else None, run=run)
    if kind == 11:
        if r.random() < 0.5:
            return JobCancelRequested(job_id=job, requester="u")
        return JobRejected(job_id=job, tenant="t0", reason=ReasonCode.UNKNOWN_QUEUE, message="no")
    cycle = r.choice(CYCLES)
    if kind == 12:
        preemptor = r.choice(JOBS)
        return JobPreemptionRequested(
            job_id=job, cycle_id=cycle, cluster=cluster, run=some_run, rule="priority", preemptor=preemptor
        )
    return JobReclaimRequested(
        job_id=job, cycle_id=cycle, cluster=cluster, run=some_run, tenant="t0", rule="lend", figures=_FIGURES
    )


def _scheduler_own(r: Pick) -> Event:
    """What the scheduler reads besides: its cycle records and the projections' cluster roll-ups."""
    if r.random() < 0.5:
        return SchedulingCycleCompleted(
            cycle_id=r.choice(CYCLES),
            sequence=r.randint(0, 5),
            input_offsets=(),
            logical_time_ms=NOW,
            policy_version="v1",
            decision_count=0,
        )
    capacity = Quantities(gpu_milli=8000)
    model = GpuModelProfile(model="A100", gpus=8, memory_mib=0, capacity_milli=8000, allocated_milli=0, free_milli=8000)
    return ResourceProfileUpdated(
        cluster=r.choice(CLUSTERS),
        node=None,
        version=r.randint(1, 5),
        capacity=capacity,
        allocated=Quantities(),
        free=capacity,
        gpu_models=(model,),
        health_milli=1000,
        failures_per_kgpu_hour_milli=0,
        congestion_milli=r.choice((0, 1000)),
        fit_training=True,
        fit_inference=True,
        last_seen_ms=NOW,
    )


_KINDS: tuple[tuple[int, Callable[[Pick], Event]], ...] = (
    (3, _node_observed),
    (1, _node_removed),
    (2, _gpu_health),
    (2, _usage),
    (1, _cluster),
    (2, _governance),
    (10, _job),
    (1, _scheduler_own),
)
_WEIGHTED = tuple(make for weight, make in _KINDS for _ in range(weight))

# Extreme values of a few event types, drawn from the catalogue's own constraints (long texts, many
# labels, big numbers), moved onto the world's keys so they meet the other events about the same entities.
_EXTREME: dict[type[Event], Callable[[Pick], dict[str, Any]]] = {
    JobSubmitted: lambda r: {"job_id": r.choice(JOBS), "tenant": r.choice(TENANTS)},
    JobCancelRequested: lambda r: {"job_id": r.choice(JOBS)},
    JobFailed: lambda r: {"job_id": r.choice(JOBS), "cluster": r.choice(CLUSTERS)},
    ClusterRegistered: lambda r: {"cluster": r.choice(CLUSTERS)},
    TenantRegistered: lambda r: {"tenant": r.choice(TENANTS)},
}
_EXTREMES = st.sampled_from(sorted(_EXTREME, key=lambda cls: cls.event_type)).flatmap(
    lambda cls: events_of(cls).map(lambda event: (cls, event))
)


def _an_event(draw: Draw) -> Event:
    """One valid event about the world: one draw for the seed of its details, now and then one drawn whole
    from the catalogue's constraints."""
    seed = draw(_SEEDS)
    r = random.Random(seed)
    if seed % 40 == 39:
        cls, event = draw(_EXTREMES)
        assert isinstance(event, Event)
        return event.model_copy(update=_EXTREME[cls](r))
    return r.choice(_WEIGHTED)(r)


_SEEDS = st.integers(0, 2**32)


# -- junk: what a consumer must refuse, or survive --------------------------------------------------------


_JUNK = (
    "far-future",
    "far-past",
    "missing-header",
    "bad-time",
    "unknown-type",
    "newer-version",
    "not-utf8",
    "bad-id",
    "not-json",
    "truncated",
    "oversized-field",
    "oversized-blob",
    "flipped",
)


def _junk(r: Pick, good: LogRecord) -> tuple[str, LogRecord, str | None]:
    """A record made from a valid one: how it was made, the record, the field it must be refused on."""
    how = r.choice(_JUNK)
    if how == "far-future":
        when = r.choice((good.timestamp_ms + DAY_MS + 1000, MAX_TIME_MS))
        return how, _replace(good, headers=_headers(good, ce_time=format_time(when).encode())), "time"
    if how == "far-past":
        when = r.choice((good.timestamp_ms - 3651 * DAY_MS, 0))
        return how, _replace(good, headers=_headers(good, ce_time=format_time(when).encode())), "time"
    if how == "missing-header":
        name = r.choice(("ce_id", "ce_source", "ce_type", "ce_specversion", "ce_time"))
        return how, _replace(good, headers=_headers(good, **{name: None})), name
    if how == "bad-time":
        return how, _replace(good, headers=_headers(good, ce_time=b"yesterday")), "time"
    if how == "unknown-type":
        return how, _replace(good, headers=_headers(good, ce_type=b"io.fedsched.NoSuchEvent")), ""
    if how == "newer-version":
        return how, _replace(good, headers=_headers(good, ce_schemaversion=b"99")), ""
    if how == "not-utf8":
        name = r.choice(("ce_id", "ce_type", "ce_source"))
        return how, _replace(good, headers=_headers(good, **{name: b"\xff\xfe"})), name
    if how == "bad-id":
        return how, _replace(good, headers=_headers(good, ce_id=b"not an id!")), "id"
    if how == "not-json":
        return how, _replace(good, value=b"\x00" + good.value), "data"
    if how == "truncated":
        return how, _replace(good, value=good.value[: max(1, len(good.value) // 2)]), "data"
    if how == "oversized-field":
        body = json.loads(good.value)
        body["message" if "message" in body else "name" if "name" in body else "explanation"] = "x" * 300_000
        return how, _replace(good, value=json.dumps(body).encode()), None  # refused, on whichever field it is
    if how == "oversized-blob":
        return how, _replace(good, value=b"{" + b"x" * 2_000_000), "data"
    at = r.randrange(len(good.value))
    flipped = good.value[:at] + bytes((good.value[at] ^ (1 << r.randint(0, 7)),)) + good.value[at + 1 :]
    return how, _replace(good, value=flipped), None


def _headers(record: LogRecord, **changes: bytes | None) -> tuple[tuple[str, bytes], ...]:
    out = []
    for name, value in record.headers:
        if name not in changes:
            out.append((name, value))
        elif changes[name] is not None:
            out.append((name, changes[name]))
    return tuple(out)


def _replace(record: LogRecord, **changes: Any) -> LogRecord:
    values = {name: getattr(record, name) for name in LogRecord.__slots__}  # type: ignore[attr-defined]
    values.update(changes)
    return LogRecord(**values)


_MUST_REFUSE = {"oversized-field"}
"""Junk refused though no one field can be named in advance."""


# -- a stream ---------------------------------------------------------------------------------------------

_WHAT_FOLLOWS = st.integers(0, 39)
"""After each event: 0-3 a repeat of an earlier one (then 0 junk as well), 4-7 junk, else nothing."""


@st.composite
def a_stream(draw: Draw, *, size: int = 30, junk: bool = True) -> Stream:
    """Up to ``size`` valid events; after any of them, a repeat of an earlier one or a junk record."""
    stream = Stream()
    offsets: dict[tuple[str, int], int] = {}
    events: list[Entry] = []
    count = draw(st.integers(1, size))
    r = random.Random(draw(_SEEDS))  # the details that need no shrinking: gaps, times, which repeat, junk

    def append(record: LogRecord, kind: str, refused: str | None = None) -> Entry:
        where = (record.topic, record.partition)
        offset = offsets.get(where, 0)
        offsets[where] = offset + 1 + (r.random() < 0.2)  # now and then a gap (Kafka's commit markers)
        entry = Entry(_replace(record, offset=offset, timestamp_ms=NOW + 10 * len(stream.entries)), kind, refused)
        stream.entries.append(entry)
        return entry

    for index in range(count):
        event = _an_event(draw)
        # Event times near the log's, out of order by up to a minute, now and then near the skew's edges (two
        # seconds inside, so that a repeat appended later, at a later log time, is inside them too).
        log_time = NOW + 10 * len(stream.entries)
        time_ms = r.choice(
            (
                NOW + index * 1000,
                NOW + index * 1000,
                NOW + index * 1000 - 60_000,
                log_time + DAY_MS - 2000,
                log_time - 3650 * DAY_MS + 2000,
            )
        )
        wire = encode(Envelope(id=f"e{index}", time_ms=time_ms, data=event))
        partition = partition_for(wire.key, topic(wire.topic).partitions)
        events.append(append(LogRecord(wire.topic, partition, 0, wire.key, wire.value, wire.headers, 0), "event"))
        follows = draw(_WHAT_FOLLOWS)
        if follows < 4:  # a repeat of any earlier event, after any number of later records
            append(r.choice(events).record, "repeat")
        elif follows < 8 and junk:
            how, bad, refused = _junk(r, stream.entries[-1].record)
            append(bad, f"junk:{how}", refused)
    return stream


# -- the read step's own test -----------------------------------------------------------------------------


@pytest.mark.property
@pytest.mark.timeout(600)  # a hang guard: 1,000 streams take minutes on a loaded machine
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=a_stream())
def test_reading_refuses_every_bad_record_naming_its_field_and_reads_every_good_one(stream: Stream) -> None:
    for entry, got in read(stream.entries):
        if entry.kind in ("event", "repeat"):
            assert isinstance(got, Envelope), f"{entry.kind} refused: {got}"
            continue
        how = entry.kind.removeprefix("junk:")
        if how == "flipped":
            continue  # a flipped bit may leave a valid event (a digit of a number): read or refused, never a crash
        assert isinstance(got, EventError), f"{how} was read: {got}"
        if entry.refused:
            assert getattr(got, "field", "").split(".")[0] == entry.refused, f"{how}: {got}"
        else:
            assert how in _MUST_REFUSE or entry.refused == "", how
        letter = dead_letter(entry.record, got, "fuzz")
        headers = dict(letter.headers)
        assert headers[REASON].decode() == str(got) and headers[CODE].decode() == got.reason_code
        assert letter.value == entry.record.value  # kept whole, to be replayed after a fix
