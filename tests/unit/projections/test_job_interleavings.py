"""The job view does not depend on how the jobs and decisions partitions interleave.

A job's lifecycle reports and requests travel on its jobs partition, the scheduler's decisions about it
on the decisions partition; a host reads them at their own paces (Kafka, partition by partition) or
in event-time order (a rebuild). Random valid histories of a few jobs (submission, waits, runs ended by
preemption or reclaim, success, failure, cancellation, rejection at intake) are split over two jobs
partitions and the decisions partition; folding any interleaving that keeps each partition's order
must give the job views, every read-model row (versions included) and the latest output of every
entity that folding them in event-time order gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
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
)
from events.catalog.governance import QuotaLine, QuotaSet
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobPreempted,
    JobReclaimed,
    JobRejected,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
)
from events.catalog.reasons import ReasonCode
from events.catalog.topics import JOBS
from events.catalog.types import ResourceKind, Resources
from events.wire.envelope import Envelope
from projections.readmodel.rows.entities import TABLES
from projections.stages.core import Applied, Output, Position
from projections.stages.sources import source_rank
from projections.stages.topology import MemoryStore, Processed, Topology
from tests.unit.projections.builders import a_node

NODES = ("n0", "n1")
Record = tuple[Position, int, Event]  # where it is read, its event time (ms), the event


@dataclass
class History:
    """One job's events in causal order, each with its time; ``clock`` is the time of the latest."""

    job_id: str
    clock: int
    events: list[tuple[Event, int]] = field(default_factory=list)

    def then(self, draw: Callable[[Any], Any], event: Event) -> None:
        self.clock += draw(st.integers(1, 40)) * 1000
        self.events.append((event, self.clock))


def _placed(job: str, run: int, node: str, gpus: tuple[int, ...], milli: int) -> JobPlaced:
    return JobPlaced(
        job_id=job,
        cycle_id=f"cycle-{job}-{run}",
        cluster="c1",
        run=run,
        replicas=(ReplicaPlacement(replica=0, node=node, gpu_indices=gpus, gpu_milli_each=milli),),
        chosen=CandidateScore(cluster="c1", node=node, total=run),
        explanation=f"run {run} of {job} on {node}",
    )


def _queued(draw: Callable[[Any], Any], job: str) -> JobQueued:
    reasons = draw(
        st.lists(
            st.sampled_from([ReasonCode.QUOTA_EXCEEDED, ReasonCode.INSUFFICIENT_GPU, ReasonCode.NO_FEASIBLE_NODE]),
            min_size=1,
            max_size=2,
            unique=True,
        )
    )
    return JobQueued(job_id=job, cycle_id="cycle", reasons=tuple(reasons), message=f"{job} waits")


def _stop(draw: Callable[[Any], Any], h: History, run: int) -> None:
    """The scheduler asks to stop the run; the cluster stops it; the job may be told why it waits."""
    job = h.job_id
    if draw(st.booleans()):
        h.then(draw, JobPreemptionRequested(job_id=job, cycle_id="cycle", cluster="c1", run=run, rule="priority"))
        h.then(draw, JobPreempted(job_id=job, cluster="c1", run=run))
    else:
        figures = ReclaimFigures(
            borrower_guaranteed_milli=0,
            borrower_used_milli=1000,
            lender="t1",
            lender_guaranteed_milli=1000,
            lender_used_milli=0,
            lender_pending_milli=1000,
            reclaimed_milli=1000,
        )
        h.then(
            draw,
            JobReclaimRequested(
                job_id=job, cycle_id="cycle", cluster="c1", run=run, tenant="t0", rule="lend", figures=figures
            ),
        )
        h.then(draw, JobReclaimed(job_id=job, cluster="c1", run=run))
    if draw(st.booleans()):
        h.then(draw, _queued(draw, job))


@st.composite
def a_history(draw: Callable[[Any], Any], index: int) -> History:
    job = f"j{index}"
    tenant = f"t{index % 2}"
    h = History(job, draw(st.integers(0, 60)) * 1000)
    if draw(st.integers(0, 9)) == 0:
        h.then(draw, JobRejected(job_id=job, tenant=tenant, reason=ReasonCode.UNKNOWN_QUEUE, message="no queue"))
        return h
    gpus = draw(st.integers(0, 2))
    milli = 1000 if gpus != 1 or draw(st.booleans()) else 500
    resources = Resources(cpu_milli=2000 * (index + 1), memory_mib=4096, gpus=gpus)
    if milli == 500:
        resources = Resources(cpu_milli=2000 * (index + 1), memory_mib=4096, gpu_milli=500)
    h.then(draw, JobSubmitted(job_id=job, name=job, tenant=tenant, queue="default", resources=resources))
    for _ in range(draw(st.integers(0, 2))):
        h.then(draw, _queued(draw, job))
    runs = draw(st.integers(0, 3))
    for run in range(1, runs + 1):
        node = draw(st.sampled_from(NODES))
        indices = tuple(range(2 * index, 2 * index + max(gpus, 1))) if gpus or milli == 500 else ()
        h.then(draw, _placed(job, run, node, indices, milli if indices else 0))
        started = draw(st.booleans()) or run < runs
        if started:
            h.then(draw, JobStarted(job_id=job, cluster="c1", run=run))
        if run < runs:
            _stop(draw, h, run)
            continue
        end = draw(st.sampled_from(["running", "succeeded", "failed", "cancelled", "stopped"]))
        if end == "succeeded" and started:
            h.then(draw, JobSucceeded(job_id=job, cluster="c1", run=run))
        elif end == "failed":
            h.then(draw, JobFailed(job_id=job, cluster="c1", run=run, reason=ReasonCode.NON_ZERO_EXIT))
        elif end == "cancelled":
            h.then(draw, JobCancelRequested(job_id=job, requester="user:a", reason="no longer needed"))
            h.then(draw, JobCancelled(job_id=job, cluster="c1", run=run))
        elif end == "stopped":
            _stop(draw, h, run)
    if runs == 0 and draw(st.booleans()):
        h.then(draw, JobCancelRequested(job_id=job, requester="user:a"))
        h.then(draw, JobCancelled(job_id=job))
    return h


@st.composite
def partitions(draw: Callable[[Any], Any]) -> dict[tuple[str, int], list[tuple[int, Event]]]:
    """Each partition's records, in log order (event time; a partition's own causes come first)."""
    jobs = draw(st.integers(1, 4))
    out: dict[tuple[str, int], list[tuple[int, int, int, Event]]] = {}
    for index in range(jobs):
        history = draw(a_history(index))
        for step, (event, at) in enumerate(history.events):
            tp = (event.topic, index % 2 if event.topic == JOBS.name else 0)
            out.setdefault(tp, []).append((at, index, step, event))
    return {tp: [(at, event) for at, _, _, event in sorted(records)] for tp, records in sorted(out.items())}


def records(parts: dict[tuple[str, int], list[tuple[int, Event]]]) -> dict[tuple[str, int], list[Record]]:
    return {
        tp: [(Position(tp[0], tp[1], offset), at, event) for offset, (at, event) in enumerate(events)]
        for tp, events in parts.items()
    }


def fold(order: list[Record]) -> tuple[MemoryStore, list[Output]]:
    topology, store = Topology(), MemoryStore()
    processed = Processed()
    setup: list[Event] = [a_node(node=node, gpus=8) for node in NODES]
    setup.append(
        QuotaSet(tenant="t0", lines=(QuotaLine(resource=ResourceKind.GPU, guaranteed=1000, limit=8000),), set_by="a")
    )
    for offset, event in enumerate(setup):
        position = Position(event.topic, 0, offset)
        envelope = Envelope(id=f"setup-{offset}", time_ms=0, data=event)
        topology.process(store, envelope, position, processed)
    for position, at, event in order:
        envelope = Envelope(id=f"{position.topic}-{position.partition}-{position.offset}", time_ms=at, data=event)
        topology.process(store, envelope, position, processed)
    return store, processed.outputs


def interleaved(parts: dict[tuple[str, int], list[Record]], choices: list[int]) -> list[Record]:
    """Take the next record of the chosen partition at each step; then the rest, partition by partition."""
    keys = sorted(parts)
    cursors = dict.fromkeys(keys, 0)
    order: list[Record] = []
    for choice in choices:
        tp = keys[choice % len(keys)]
        if cursors[tp] < len(parts[tp]):
            order.append(parts[tp][cursors[tp]])
            cursors[tp] += 1
    for tp in reversed(keys):  # decisions first: effects before their causes, as often as can be
        order += parts[tp][cursors[tp] :]
    return order


def in_time_order(parts: dict[tuple[str, int], list[Record]]) -> list[Record]:
    merged = [record for records in parts.values() for record in records]
    return sorted(merged, key=lambda r: (r[1], source_rank(r[0].topic), r[0].partition, r[0].offset))


def views(store: MemoryStore) -> dict[str, Any]:
    """Every job view as it is stored, but what it applied (its recent event ids are in arrival order)."""
    return {key: _without_applied(view) for key, view in sorted(store.tables.get("jobs", {}).items())}


def _without_applied(view: Any) -> Any:
    from projections.stages.core import evolve

    return evolve(view, applied=Applied())


def rows(store: MemoryStore) -> dict[str, list[tuple[Any, ...]]]:
    return {
        stage: sorted(row for key, entity in entities.items() for row in TABLES[stage].rows(key, entity))
        for stage, entities in sorted(store.tables.items())
        if stage in TABLES
    }


def latest(outputs: list[Output]) -> dict[str, str]:
    """The last version published of each entity."""
    last: dict[str, tuple[int, str]] = {}
    for out in outputs:
        entity, _, version = out.id.rpartition(":v")
        if int(version) >= last.get(entity, (0, ""))[0]:
            last[entity] = (int(version), out.event.model_dump_json())
    return {entity: json for entity, (_, json) in sorted(last.items())}


@settings(max_examples=300, deadline=None)
@given(parts=partitions(), choices=st.lists(st.integers(0, 2), max_size=60))
def test_any_interleaving_of_the_partitions_gives_the_views_rows_and_outputs_of_event_time_order(
    parts: dict[tuple[str, int], list[tuple[int, Event]]], choices: list[int]
) -> None:
    read = records(parts)
    reference, reference_outputs = fold(in_time_order(read))
    store, outputs = fold(interleaved(read, choices))
    assert views(store) == views(reference)
    assert rows(store) == rows(reference)
    assert latest(outputs) == latest(reference_outputs)
