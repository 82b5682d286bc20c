"""What the log already says about one simulated cluster: the fold its model restarts from.

Called by the host's start-up read (``connectors.sim.restore``), which feeds it every relevant record of
the jobs, decisions and inventory topics, and by unit tests, which feed it envelopes directly. Pure: a
fold of envelopes into plain data; the model (``ClusterModel.restore``) turns it back into state.

What counts: every ``JobSubmitted`` and ``JobCancelRequested``; the placements, replicas added (which may
open a spread run's part here), preemption and reclaim requests addressed to this cluster (in
decision-log order); the lifecycle facts about runs and parts on this cluster (who ever published
them); and this connector's own inventory events (by envelope source), which give each node's last
generation and snapshot, the cluster's origin (first event) and the time up to which everything it
schedules by the clock has been published (its last event).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from connectors.sim.state import RunKey
from events.catalog.decisions import JobPlaced, JobPreemptionRequested, JobReclaimRequested, JobReplicasAdded
from events.catalog.inventory import ClusterStatus, ClusterStatusChanged, NodeObserved, NodeRemoved
from events.catalog.jobs import JobCancelRequested, JobStarted, JobSubmitted
from events.catalog.lifecycle import RUN_END_EVENTS
from events.catalog.types import ClusterId, JobId, NodeId
from events.wire.codec import Headers
from events.wire.envelope import Envelope

StopRequest = JobPreemptionRequested | JobReclaimRequested


@dataclass(slots=True)
class History:
    cluster: ClusterId
    source: str
    submitted: dict[JobId, JobSubmitted] = field(default_factory=dict)
    unread: dict[str, tuple[Headers, bytes]] = field(default_factory=dict)
    """Submissions of jobs not placed here (yet), kept as the log's bytes and decoded only if a placement
    for them arrives: smaller than decoded, and most never are."""
    cancels: dict[JobId, tuple[JobCancelRequested, str]] = field(default_factory=dict)
    placements: list[tuple[JobPlaced, str]] = field(default_factory=list)
    placed_jobs: dict[str, None] = field(default_factory=dict)
    """Jobs ever placed or given replicas here (their lifecycle records matter; others' may be skipped
    undecoded)."""
    added: list[tuple[JobReplicasAdded, str]] = field(default_factory=list)
    """Replicas added to runs here, in log order (applied after their run's placement; the first for a
    spreading job's run not placed here opened its part here)."""
    stops: dict[RunKey, tuple[StopRequest, str]] = field(default_factory=dict)
    started: dict[RunKey, int] = field(default_factory=dict)
    finished: dict[RunKey, None] = field(default_factory=dict)
    nodes: dict[NodeId, tuple[int, NodeObserved | None]] = field(default_factory=dict)
    """Each node's highest generation and the snapshot published with it (``None``: removed)."""
    origin_ms: int | None = None
    resume_ms: int | None = None
    last_status: ClusterStatus | None = None
    records: int = 0

    def add(self, envelope: Envelope) -> None:
        self.records += 1
        event = envelope.data
        own = envelope.source == self.source
        if own:
            self.note_own_time(envelope.time_ms)
        if isinstance(event, JobSubmitted):
            self.submitted.setdefault(event.job_id, event)
        elif isinstance(event, JobCancelRequested):
            self.cancels.setdefault(event.job_id, (event, envelope.id))
        elif getattr(event, "cluster", None) != self.cluster:
            return
        elif isinstance(event, JobPlaced):
            self.placements.append((event, envelope.id))
            self.placed_jobs[event.job_id] = None
        elif isinstance(event, JobReplicasAdded):
            self.added.append((event, envelope.id))
            self.placed_jobs[event.job_id] = None
        elif isinstance(event, JobPreemptionRequested | JobReclaimRequested):
            self.stops.setdefault((event.job_id, event.run), (event, envelope.id))
        elif isinstance(event, JobStarted):
            self.started.setdefault((event.job_id, event.run), envelope.time_ms)
        elif isinstance(event, RUN_END_EVENTS):
            self.finished[(event.job_id, event.run)] = None
        elif own:
            self._own_inventory(event)

    def add_unread(self, job_id: str, headers: Headers, value: bytes) -> None:
        """A ``JobSubmitted`` left undecoded (see ``unread``)."""
        self.records += 1
        self.unread.setdefault(job_id, (headers, value))

    def note_own_time(self, time_ms: int) -> None:
        """An event this connector published at ``time_ms`` (also for records not worth decoding)."""
        self.origin_ms = time_ms if self.origin_ms is None else min(self.origin_ms, time_ms)
        self.resume_ms = time_ms if self.resume_ms is None else max(self.resume_ms, time_ms)

    def _own_inventory(self, event: object) -> None:
        if isinstance(event, NodeObserved | NodeRemoved):
            known = self.nodes.get(event.node)
            if known is None or event.generation > known[0]:
                snapshot = event if isinstance(event, NodeObserved) else None
                self.nodes[event.node] = (event.generation, snapshot)
        elif isinstance(event, ClusterStatusChanged):
            self.last_status = event.status


__all__ = ["History", "StopRequest"]
