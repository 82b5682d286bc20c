"""The model of one simulated cluster: what a placement does, how runs end, what faults break.

Called by the host (``connectors.sim.host``), which feeds it the events it consumes and the simulated
time, and publishes what it returns. Pure: no I/O, no clock (time is an argument), no global randomness
(draws come from ``connectors.sim.faults``). The same spec, config, inputs and times give the same
events with the same ids.

The recipe:

1. ``restore(history)`` rebuilds the state from what the log already holds (``History``): runs (and
   parts of spread runs) that started are running again with the same end and every replica added to
   them, placements and parts that had not started are checked again, and the fault schedule is
   replayed silently up to the last event already published.
2. ``begin(now)`` states the cluster (``ClusterRegistered``, ``NodeObserved`` for every node that
   changed since the last snapshot) and acts on what the restore left pending.
3. ``handle(envelope, now)`` for each consumed event: a ``JobPlaced`` for this cluster is checked
   (``connectors.sim.checks``): refused with ``JobFailed`` naming why, or accepted (resources taken, the
   nodes' snapshots republished, the start timed ``start_delay`` later); a cancel, preemption or
   reclaim stops the run after the stop delay; a ``JobReplicasAdded`` for a run here is checked the same
   way (``check_added``) and its replicas are taken and held with the run's (they start with it, or at
   once if it runs, and end with it); a refusal fails the run.
   A job that spreads over clusters (``events.catalog.lifecycle.spreads``) has a part of its run in each
   cluster that holds some of its replicas: a ``JobReplicasAdded`` for a run with no part here opens one,
   checked and started as a placement of those replicas would be (run number ``run``), and its lifecycle
   is reported as a run's, naming this cluster; it ends on its own, leaving the run's other parts to
   their clusters. A cancel stops the job's part here; a preemption or reclaim naming this cluster stops
   it. A part that ended here is never opened again (a late addition for it is ignored). The scheduler's
   ``JobRunClosed``, which ends a spread run once all its parts have ended, needs nothing here.
4. ``advance(now)`` fires everything due up to ``now`` in time order: starts, ends (success, failure
   drawn from the seed, runtime exceeded), stops, faults and recoveries, and usage reports.

Run life: accepted -> running -> (succeeded | failed | stopping -> cancelled | preempted | reclaimed).
A run that is asked to stop before it started ends at once; resources are held until a run ends.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from functools import partial

from connectors.sim.checks import Refusal, check_added, check_placement
from connectors.sim.config import SimConfig
from connectors.sim.faults import NPU_AI_CORE, NPU_HBM_ECC, Fault, FaultKind, FaultPlan, RunFailure, run_failure
from connectors.sim.history import History, StopRequest
from connectors.sim.jobs import JobSpec
from connectors.sim.reports import Emit, event_id, gpu_health, node_snapshot, node_usage
from connectors.sim.spec import ClusterSpec
from connectors.sim.state import NodeState, Phase, Run, RunKey, StopKind, allocate
from events.catalog.base import Event
from events.catalog.decisions import (
    JobPlaced,
    JobPreemptionRequested,
    JobReclaimRequested,
    JobReplicasAdded,
    ReplicaPlacement,
)
from events.catalog.errors import EventError
from events.catalog.inventory import ClusterStatus, ClusterStatusChanged, NodeRemoved
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobKind,
    JobPreempted,
    JobReclaimed,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
)
from events.catalog.lifecycle import RUN_END_EVENTS
from events.catalog.reasons import ReasonCode
from events.catalog.types import JobId, NodeId
from events.wire.codec import Headers, decode
from events.wire.envelope import Envelope

log = logging.getLogger("fedsched.connector.sim")

_USAGE_CATCH_UP = 12
"""After a gap (the connector was down), report usage for at most this many of the windows missed."""


class _Rank(IntEnum):
    """Order of timers due at the same millisecond."""

    RECOVER = 0
    FAULT = 1
    STOP = 2
    END = 3
    START = 4
    USAGE = 5


@dataclass(frozen=True, slots=True)
class _Timer:
    rank: _Rank
    key: RunKey | None = None
    fault: Fault | None = None
    outcome: RunFailure | None = None
    """For an end: ``None`` is success."""


class ClusterModel:
    def __init__(self, spec: ClusterSpec, config: SimConfig, *, source: str) -> None:
        self.spec = spec
        self.config = config
        self.cluster = spec.cluster
        self.source = source
        self.nodes: dict[NodeId, NodeState] = {n.name: NodeState(n) for n in spec.nodes}
        self.jobs: dict[JobId, JobSpec] = {}
        self.runs: dict[RunKey, Run] = {}
        self.origin_ms: int | None = None
        self._cancels: dict[JobId, tuple[str | None, str]] = {}
        self._last_run: dict[JobId, int] = {}
        self._pending: dict[JobId, tuple[JobPlaced, str]] = {}
        self._stops: dict[RunKey, tuple[StopRequest, str]] = {}
        self._deferred: list[tuple[JobPlaced | JobReplicasAdded, str]] = []
        """Placements, and parts opened by an addition, that the restore found not started yet."""
        self._adds: dict[RunKey, list[tuple[JobReplicasAdded, str]]] = {}
        """Replicas added to runs not placed here yet (their ``JobPlaced`` waits for its submission), or
        to parts of a job whose submission is not known yet (it says whether the job spreads)."""
        self._timers: list[tuple[int, int, str, int, _Timer]] = []
        self._seq = 0
        self._drills = 0
        self._plan: FaultPlan | None = None
        self._fault_cursor = 0
        self._usage_cursor = 0
        self._reported: dict[NodeId, None] = {}
        self._last_status: ClusterStatus | None = None
        self._dropped: dict[NodeId, int] = {}
        self._unread: dict[str, tuple[Headers, bytes]] = {}
        self.begun = False

    # -- 1. restore --------------------------------------------------------------------------------

    def restore(self, history: History) -> None:
        """Rebuild from the log; call before ``begin``. Emits nothing."""
        self._last_status = history.last_status
        for node_id, (generation, snapshot) in history.nodes.items():
            node = self.nodes.get(node_id)
            if node is not None:
                node.generation, node.published, node.published_removed = generation, snapshot, snapshot is None
            elif snapshot is not None:
                self._dropped[node_id] = generation  # in the log, no longer in the node list
        for submitted in history.submitted.values():
            self.jobs.setdefault(submitted.job_id, JobSpec.from_submitted(submitted, self.config))
        self._unread = history.unread
        for job_id, (request, request_id) in history.cancels.items():
            self._cancels[job_id] = (request.requester, request_id)
        self._stops.update(history.stops)
        if history.origin_ms is not None:
            self._set_origin(history.origin_ms, history.resume_ms or history.origin_ms)
        for placed, placed_id in history.placements:
            key = (placed.job_id, placed.run)
            self._last_run[placed.job_id] = max(self._last_run.get(placed.job_id, 0), placed.run)
            if key in history.finished:
                continue
            if placed.job_id not in self.jobs:
                self._read_submission(placed.job_id)
            job = self.jobs.get(placed.job_id)
            if job is None:
                self._pending[placed.job_id] = (placed, placed_id)
            elif key in history.started:
                self._resume_running(job, placed.run, placed.replicas, placed_id, history.started[key])
            else:
                self._deferred.append((placed, placed_id))
        self._restore_added(history)

    def _restore_added(self, history: History) -> None:
        """Replicas added here, in log order: held again by their run or part if it runs, else kept for
        it. The first addition of a spreading job's run not placed here opened the run's part here: it
        runs again if it had started, is checked again if not, and stays closed if it had ended."""
        placed = {(p.job_id, p.run) for p, _ in history.placements}
        parts: dict[RunKey, bool] = {}
        """Parts opened by an addition: whether it is live (running again, or to be checked again)."""
        for added, added_id in history.added:
            key = (added.job_id, added.run)
            job = self._job(added.job_id)
            if job is not None and job.spreads and key not in placed and key not in parts:
                parts[key] = self._restore_part(history, job, added, added_id)
            elif key in history.finished or not parts.get(key, True):
                continue
            elif key in self.runs:  # running again: it holds what was added, as before the restart
                self._grow(self.runs[key], added, added_id)
            else:
                self._adds.setdefault(key, []).append((added, added_id))

    def _restore_part(self, history: History, job: JobSpec, added: JobReplicasAdded, added_id: str) -> bool:
        key = (added.job_id, added.run)
        if key in history.finished or added.run <= self._last_run.get(job.job_id, 0):
            # ended here (or older than a run placed here since): an addition read again must not open it
            self._last_run[job.job_id] = max(self._last_run.get(job.job_id, 0), added.run)
            return False
        if key in history.started:
            self._last_run[job.job_id] = added.run
            self._resume_running(job, added.run, added.replicas, added_id, history.started[key])
        else:
            self._deferred.append((added, added_id))
        return True

    def _resume_running(
        self, job: JobSpec, number: int, replicas: tuple[ReplicaPlacement, ...], cause_id: str, started_ms: int
    ) -> None:
        run = Run(job, number, replicas, Phase.RUNNING, started_ms, cause_id, started_ms)
        self.runs[run.key] = run
        allocate(self.nodes, run, 1)
        self._schedule_end(run)

    def _set_origin(self, origin_ms: int, resume_ms: int) -> None:
        self.origin_ms = origin_ms
        self._plan = FaultPlan(self.cluster, self.spec.nodes, self.config, origin_ms)
        interval = self.config.usage_interval_ms
        self._usage_cursor = origin_ms + (resume_ms - origin_ms) // interval * interval
        self._fault_cursor = origin_ms
        self._replay_faults(resume_ms)

    def _replay_faults(self, upto_ms: int) -> None:
        """Apply the faults (and recoveries) up to ``upto_ms`` to the nodes without emitting: they were
        published before the restart. Recoveries still ahead become timers."""
        assert self._plan is not None
        pending: list[tuple[int, int, int, Fault]] = []
        for fault in self._plan.between(self._fault_cursor, upto_ms):
            while pending and pending[0][0] <= fault.at_ms:
                self._apply_fault(heapq.heappop(pending)[3], -1)
            self._apply_fault(fault, 1)
            heapq.heappush(pending, (fault.until_ms, fault.hour, fault.number, fault))
        for until, _, _, fault in sorted(pending, key=lambda p: p[:3]):
            if until <= upto_ms:
                self._apply_fault(fault, -1)
            else:
                self._push(until, _Timer(_Rank.RECOVER, fault=fault), fault.name)
        self._fault_cursor = upto_ms

    # -- 2. begin ----------------------------------------------------------------------------------

    def begin(self, now_ms: int) -> list[Emit]:
        out: list[Emit] = []
        if self.origin_ms is None:
            self._set_origin(now_ms, now_ms)
        self._emit(out, now_ms, self.spec.registered(), "registered", now_ms)
        if self._last_status is ClusterStatus.UNREACHABLE:
            self._status(out, now_ms, ClusterStatus.REACHABLE, ReasonCode.RECOVERED, "the connector is back")
        for name, generation in sorted(self._dropped.items()):
            gone = NodeRemoved(
                cluster=self.cluster,
                node=name,
                generation=generation + 1,
                reason=ReasonCode.NODE_DELETED,
                message="no longer in the node list",
            )
            self._emit(out, now_ms, gone, name, f"g{generation + 1}", "removed")
        self._dropped.clear()
        for node in self.nodes.values():
            self._observe(out, now_ms, node)
        self.begun = True
        for decision, decision_id in self._deferred:
            if isinstance(decision, JobPlaced):
                self._place(out, now_ms, decision, decision_id)
            else:
                self._start_part(out, now_ms, self.jobs[decision.job_id], decision, decision_id)
        self._deferred.clear()
        for run in list(self.runs.values()):
            self._apply_requests(out, now_ms, run)
        return out

    def shutdown(self, now_ms: int) -> list[Emit]:
        out: list[Emit] = []
        self._status(out, now_ms, ClusterStatus.UNREACHABLE, ReasonCode.OPERATOR_REQUEST, "the connector stopped")
        return out

    # -- 3. handle ---------------------------------------------------------------------------------

    def handle(self, envelope: Envelope, now_ms: int) -> list[Emit]:
        out: list[Emit] = []
        event = envelope.data
        if isinstance(event, JobSubmitted):
            self._on_submitted(out, now_ms, event)
        elif isinstance(event, JobCancelRequested):
            self._on_cancel(out, now_ms, event, envelope.id)
        elif getattr(event, "cluster", None) != self.cluster:
            pass
        elif isinstance(event, JobPlaced):
            self._on_placed(out, now_ms, event, envelope.id)
        elif isinstance(event, JobReplicasAdded):
            self._on_replicas_added(out, now_ms, event, envelope.id)
        elif isinstance(event, JobPreemptionRequested | JobReclaimRequested):
            self._on_stop_request(out, now_ms, event, envelope.id)
        elif isinstance(event, RUN_END_EVENTS) and envelope.source != self.source:
            run = self.runs.get((event.job_id, event.run))
            if run is not None:  # someone else closed the run (an operator tool): let it go silently
                self._release(out, now_ms, run)
        return out

    def _on_submitted(self, out: list[Emit], now_ms: int, event: JobSubmitted) -> None:
        if event.job_id in self.jobs:
            return
        job = self.jobs[event.job_id] = JobSpec.from_submitted(event, self.config)
        pending = self._pending.pop(event.job_id, None)
        if pending is not None:
            self._place(out, now_ms, *pending)
        if job.spreads:  # additions read before the submission said the job spreads: they open its parts
            for key in [k for k in self._adds if k[0] == job.job_id]:
                for added, added_id in self._adds.pop(key):
                    self._on_replicas_added(out, now_ms, added, added_id)

    def _job(self, job_id: JobId) -> JobSpec | None:
        """The job's submission as the model keeps it, if known (decoded now if the restore kept it)."""
        if job_id not in self.jobs:
            self._read_submission(job_id)
        return self.jobs.get(job_id)

    def _read_submission(self, job_id: JobId) -> bool:
        """Decode a submission the restore kept as bytes, now that a placement needs it."""
        raw = self._unread.pop(job_id, None)
        if raw is None:
            return False
        try:
            submitted = decode(*raw).data
        except EventError:
            return False
        if not isinstance(submitted, JobSubmitted):
            return False
        self.jobs[job_id] = JobSpec.from_submitted(submitted, self.config)
        return True

    def _on_cancel(self, out: list[Emit], now_ms: int, event: JobCancelRequested, request_id: str) -> None:
        if event.job_id in self._cancels:
            return
        self._cancels[event.job_id] = (event.requester, request_id)
        for run in [r for r in self.runs.values() if r.job.job_id == event.job_id]:
            self._apply_requests(out, now_ms, run)

    def _on_placed(self, out: list[Emit], now_ms: int, placed: JobPlaced, placed_id: str) -> None:
        if placed.run <= self._last_run.get(placed.job_id, 0):
            return  # seen before (a redelivery) or stale
        if placed.job_id not in self.jobs and not self._read_submission(placed.job_id):
            known = self._pending.get(placed.job_id)
            if known is None or known[0].run < placed.run:
                self._pending[placed.job_id] = (placed, placed_id)
            return
        self._place(out, now_ms, placed, placed_id)

    def _on_replicas_added(self, out: list[Emit], now_ms: int, added: JobReplicasAdded, added_id: str) -> None:
        """Start the added replicas on the named nodes; a run not here yet takes them when placed, one that
        ended lets them go; for a job that spreads, they open the run's part here if it has none. An
        addition the cluster cannot take fails the run, or its part here (``check_added``): the scheduler
        counts those replicas as held, so keeping the run without them would mislead it."""
        key = (added.job_id, added.run)
        run = self.runs.get(key)
        if run is None:
            job = self._job(added.job_id)
            if job is not None and job.spreads:
                self._open_part(out, now_ms, job, added, added_id)
            elif added.run > self._last_run.get(added.job_id, 0):  # its placement is still to come
                self._adds.setdefault(key, []).append((added, added_id))
            else:
                log.debug("event=replicas_added_ignored cluster=%s job=%s run=%d reason=run_ended_here",
                          self.cluster, added.job_id, added.run)  # fmt: skip
            return
        if run.phase is Phase.STOPPING or added.replicas[0].replica <= max(r.replica for r in run.placement):
            return  # stopping anyway, or seen before (a redelivery: numbers only grow within a run)
        refusal = check_added(added, run.placement, run.job, self.nodes)
        if refusal is not None:
            failed = JobFailed(
                job_id=run.job.job_id,
                cluster=self.cluster,
                run=run.run,
                reason=refusal.reason,
                message="replicas added refused: " + refusal.message,
                node=refusal.node,
            )
            self._emit(out, now_ms, failed, run.job.job_id, run.run, "failed", run=run, cause=added_id)
            self._release(out, now_ms, run)
            return
        self._grow(run, added, added_id)
        for name in dict.fromkeys(r.node for r in added.replicas):
            self._observe(out, now_ms, self.nodes[name])

    def _open_part(self, out: list[Emit], now_ms: int, job: JobSpec, added: JobReplicasAdded, added_id: str) -> None:
        """Open the run's part here with the added replicas, unless the part here ended already (or a
        newer run of the job was placed here): the scheduler never opens a part again within a run, so
        such an addition is a copy read late."""
        if added.run <= self._last_run.get(job.job_id, 0):
            log.debug("event=part_not_reopened cluster=%s job=%s run=%d reason=part_ended_here",
                      self.cluster, job.job_id, added.run)  # fmt: skip
            return
        self._start_part(out, now_ms, job, added, added_id)

    def _start_part(self, out: list[Emit], now_ms: int, job: JobSpec, added: JobReplicasAdded, added_id: str) -> None:
        """Check and start a part as a placement of the added replicas (``check_added`` of a part holding
        none yet); refused, the part fails with the reason, as a placement would."""
        check = partial(check_added, added, (), job, self.nodes)
        self._open(out, now_ms, job, added.run, added.replicas, added_id, check, "replicas added refused: ")

    def _grow(self, run: Run, added: JobReplicasAdded, added_id: str) -> None:
        """Take the added replicas' resources and hold them with the run's (they end with it)."""
        run.placement = (*run.placement, *added.replicas)
        allocate(self.nodes, run, 1, added.replicas)

    def _on_stop_request(self, out: list[Emit], now_ms: int, request: StopRequest, request_id: str) -> None:
        key = (request.job_id, request.run)
        if key in self._stops:
            return
        self._stops[key] = (request, request_id)
        run = self.runs.get(key)
        if run is not None:
            self._apply_requests(out, now_ms, run)

    # -- placing and stopping runs -----------------------------------------------------------------

    def _place(self, out: list[Emit], now_ms: int, placed: JobPlaced, placed_id: str) -> None:
        job = self.jobs[placed.job_id]
        check = partial(check_placement, placed, job, self.nodes)
        self._open(out, now_ms, job, placed.run, placed.replicas, placed_id, check, "placement refused: ")

    def _open(
        self,
        out: list[Emit],
        now_ms: int,
        job: JobSpec,
        number: int,
        replicas: tuple[ReplicaPlacement, ...],
        cause_id: str,
        check: Callable[[], Refusal | None],
        refused: str,
    ) -> None:
        """Accept run ``number`` of the job here (a placement, or a part opened by an addition): stopped
        at once if a cancel, preemption or reclaim came first, failed if ``check`` refuses it, else its
        resources are taken and it starts after the start delay."""
        self._last_run[job.job_id] = max(self._last_run.get(job.job_id, 0), number)
        run = Run(job, number, replicas, Phase.ACCEPTED, now_ms, cause_id)
        if job.job_id in self._cancels or run.key in self._stops:
            self._apply_requests(out, now_ms, run, placed_only=True)
            return
        refusal = check()
        if refusal is not None:
            failed = JobFailed(
                job_id=job.job_id,
                cluster=self.cluster,
                run=run.run,
                reason=refusal.reason,
                message=refused + refusal.message,
                node=refusal.node,
            )
            self._emit(out, now_ms, failed, job.job_id, run.run, "failed", run=run, cause=cause_id)
            return
        self.runs[run.key] = run
        allocate(self.nodes, run, 1)
        for name in run.nodes():
            self._observe(out, now_ms, self.nodes[name])
        for added, added_id in self._adds.pop(run.key, []):
            self._on_replicas_added(out, now_ms, added, added_id)
        delay = job.start_delay_ms if job.start_delay_ms is not None else self.config.start_delay_ms
        self._push(now_ms + delay, _Timer(_Rank.START, key=run.key), job.job_id)

    def _apply_requests(self, out: list[Emit], now_ms: int, run: Run, *, placed_only: bool = False) -> None:
        """Stop the run if a cancel, preemption or reclaim asks for it (and it is not stopping yet)."""
        if run.phase is Phase.STOPPING:
            return
        cancel = self._cancels.get(run.job.job_id)
        stop = self._stops.get(run.key)
        if cancel is not None:
            run.stop, (run.requester, run.stop_id) = StopKind.CANCEL, cancel
            grace_ms = self.config.stop_delay_ms
        elif stop is not None:
            request, run.stop_id = stop
            run.stop = StopKind.PREEMPT if isinstance(request, JobPreemptionRequested) else StopKind.RECLAIM
            grace_ms = request.grace_period_s * 1000
        else:
            return
        if placed_only or run.phase is Phase.ACCEPTED:
            self._finish(out, now_ms, run, self._stopped(run))
            return
        run.phase = Phase.STOPPING
        run.checkpoint = run.job.kind in (JobKind.TRAINING, JobKind.FINE_TUNE) and grace_ms > 0
        self._push(now_ms + min(self.config.stop_delay_ms, grace_ms), _Timer(_Rank.STOP, key=run.key), run.job.job_id)

    def _stopped(self, run: Run) -> Event:
        job_id, cluster, checkpointed = run.job.job_id, self.cluster, run.checkpoint
        if run.stop is StopKind.CANCEL:
            message = "cancelled before it started" if run.started_ms is None else "cancelled"
            return JobCancelled(job_id=job_id, cluster=cluster, run=run.run, requester=run.requester, message=message)
        if run.stop is StopKind.PREEMPT:
            return JobPreempted(job_id=job_id, cluster=cluster, run=run.run, checkpointed=checkpointed)
        return JobReclaimed(job_id=job_id, cluster=cluster, run=run.run, checkpointed=checkpointed)

    def _schedule_end(self, run: Run) -> None:
        assert run.started_ms is not None
        job = run.job
        forced = None
        if job.fail_after_ms is not None:
            reason = ReasonCode.OUT_OF_MEMORY if job.exit_code == 137 else ReasonCode.NON_ZERO_EXIT
            forced = RunFailure(job.fail_after_ms, job.exit_code, reason)
        ends: list[tuple[int, RunFailure | None]] = []
        if job.runtime_ms is not None:
            ends.append((job.runtime_ms, None))
        failure = run_failure(self.config, self.cluster, job.job_id, run.run, job.runtime_ms, forced=forced)
        if failure is not None:
            ends.append((failure.after_ms, failure))
        if job.max_runtime_ms is not None:
            ends.append((job.max_runtime_ms, RunFailure(job.max_runtime_ms, -9, ReasonCode.RUNTIME_EXCEEDED)))
        if ends:
            after, outcome = min(ends, key=lambda e: (e[0], e[1] is None))
            self._push(run.started_ms + after, _Timer(_Rank.END, key=run.key, outcome=outcome), job.job_id)

    def _finish(self, out: list[Emit], now_ms: int, run: Run, event: Event) -> None:
        kind = event.event_type.removeprefix("io.fedsched.Job").lower()
        cause = run.stop_id if isinstance(event, JobCancelled | JobPreempted | JobReclaimed) else run.placed_id
        self._emit(out, now_ms, event, run.job.job_id, run.run, kind, run=run, cause=cause)
        self._release(out, now_ms, run)

    def _release(self, out: list[Emit], now_ms: int, run: Run) -> None:
        if self.runs.pop(run.key, None) is None:
            return
        allocate(self.nodes, run, -1)
        for name in run.nodes():
            self._observe(out, now_ms, self.nodes[name])

    # -- 4. advance --------------------------------------------------------------------------------

    def next_due_ms(self) -> int | None:
        """The next timer or usage report (faults are looked up on every ``advance``)."""
        if self.origin_ms is None:
            return None
        due = self._usage_cursor + self.config.usage_interval_ms
        return min(due, self._timers[0][0]) if self._timers else due

    def advance(self, now_ms: int) -> list[Emit]:
        out: list[Emit] = []
        if self._plan is None:
            return out
        for fault in self._plan.between(self._fault_cursor, now_ms):
            self._push(fault.at_ms, _Timer(_Rank.FAULT, fault=fault), fault.name)
        self._fault_cursor = max(self._fault_cursor, now_ms)
        interval = self.config.usage_interval_ms
        due = (now_ms - self._usage_cursor) // interval
        for window in range(max(1, due - _USAGE_CATCH_UP + 1), due + 1):
            self._push(self._usage_cursor + window * interval, _Timer(_Rank.USAGE), "")
        self._usage_cursor += max(0, due) * interval
        while self._timers and self._timers[0][0] <= now_ms:
            at, _, _, _, timer = heapq.heappop(self._timers)
            self._fire(out, at, timer)
        return out

    def _push(self, at_ms: int, timer: _Timer, tiebreak: str) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (at_ms, timer.rank, tiebreak, self._seq, timer))

    def _fire(self, out: list[Emit], at: int, timer: _Timer) -> None:
        if timer.rank is _Rank.USAGE:
            self._report_usage(out, at)
        elif timer.fault is not None:
            self._fault_changed(out, at, timer.fault, 1 if timer.rank is _Rank.FAULT else -1)
        else:
            run = self.runs.get(timer.key) if timer.key is not None else None
            if run is not None:
                self._run_timer(out, at, run, timer)

    def _run_timer(self, out: list[Emit], at: int, run: Run, timer: _Timer) -> None:
        job_id, cluster = run.job.job_id, self.cluster
        if timer.rank is _Rank.START and run.phase is Phase.ACCEPTED:
            run.phase, run.started_ms = Phase.RUNNING, at
            nodes = ", ".join(run.nodes())
            started = JobStarted(job_id=job_id, cluster=cluster, run=run.run, message=f"running on {nodes}")
            self._emit(out, at, started, job_id, run.run, "started", run=run, cause=run.placed_id)
            self._schedule_end(run)
        elif timer.rank is _Rank.STOP and run.phase is Phase.STOPPING:
            self._finish(out, at, run, self._stopped(run))
        elif timer.rank is _Rank.END and run.phase in (Phase.RUNNING, Phase.STOPPING):
            outcome = timer.outcome
            if outcome is None:
                event: Event = JobSucceeded(job_id=job_id, cluster=cluster, run=run.run, message="exit code 0")
            else:
                message = f"exit code {outcome.exit_code}"
                event = JobFailed(
                    job_id=job_id,
                    cluster=cluster,
                    run=run.run,
                    exit_code=outcome.exit_code,
                    reason=outcome.reason,
                    message=message,
                    node=run.placement[0].node,
                )
            self._finish(out, at, run, event)

    # -- faults ------------------------------------------------------------------------------------

    def lose_node(self, node: NodeId, now_ms: int, for_ms: int) -> list[Emit]:
        """An operator's drill: ``node`` is lost now (its runs fail with ``NodeFailure``, ``NodeRemoved``
        is published) and comes back after ``for_ms``. Not part of the seeded fault plan, so a restart
        does not replay it: the node is back after one."""
        if node not in self.nodes:
            raise KeyError(f"no node {node} in cluster {self.cluster}")
        self._drills += 1
        fault = Fault(now_ms, now_ms + max(1, for_ms), -1, self._drills, FaultKind.NODE_LOST, node)
        out: list[Emit] = []
        self._fault_changed(out, now_ms, fault, 1)  # which times its recovery
        return out

    def fail_npu(self, node: NodeId, npu: int, now_ms: int, for_ms: int, error: int = NPU_AI_CORE) -> list[Emit]:
        """An operator's drill: NPU ``npu`` of ``node`` fails now with the driver's event ``error`` (its
        runs fail with ``NpuFailure``, its health report and the node's snapshot say it failed) and
        recovers after ``for_ms``. Not part of the seeded fault plan, as ``lose_node``."""
        spec = self.nodes[node].spec if node in self.nodes else None
        if spec is None:
            raise KeyError(f"no node {node} in cluster {self.cluster}")
        if not 0 <= npu < spec.npus:
            raise KeyError(f"node {node} of cluster {self.cluster} has no NPU {npu} (it has {spec.npus})")
        self._drills += 1
        fault = Fault(
            now_ms, now_ms + max(1, for_ms), -1, self._drills, FaultKind.NPU_FAILURE, node, npu=npu, npu_error=error
        )
        out: list[Emit] = []
        self._fault_changed(out, now_ms, fault, 1)
        return out

    def _apply_fault(self, fault: Fault, sign: int) -> None:
        node = self.nodes[fault.node]
        if fault.kind is FaultKind.GPU_FAILURE:
            assert fault.gpu is not None
            node.gpu_faults[fault.gpu] += sign
            if sign > 0:
                node.xid_errors[fault.gpu] += 1
                node.last_xid[fault.gpu] = fault.xid
                node.ecc_uncorrected[fault.gpu] += fault.xid == 48
        elif fault.kind is FaultKind.NPU_FAILURE:
            assert fault.npu is not None
            node.npu_faults[fault.npu] += sign
            if sign > 0:
                node.npu_errors[fault.npu] += 1
                node.npu_last_error[fault.npu] = fault.npu_error
                node.npu_hbm_ecc[fault.npu] += fault.npu_error == NPU_HBM_ECC
        elif fault.kind is FaultKind.NODE_CORDONED:
            node.cordons += sign
        else:
            node.lost += sign

    def _fault_changed(self, out: list[Emit], at: int, fault: Fault, sign: int) -> None:
        node = self.nodes[fault.node]
        was_lost = node.removed
        self._apply_fault(fault, sign)
        if sign > 0:
            self._push(fault.until_ms, _Timer(_Rank.RECOVER, fault=fault), fault.name)
        if fault.kind in (FaultKind.GPU_FAILURE, FaultKind.NPU_FAILURE):
            if not node.removed:
                phase = "failed" if sign > 0 else "recovered"
                self._emit(out, at, gpu_health(self.cluster, node), node.name, "health", fault.name, phase)
            if sign > 0 and fault.kind is FaultKind.GPU_FAILURE:
                why = f"GPU {fault.gpu} on node {node.name} failed (XID {fault.xid})"
                self._kill(out, at, node, ReasonCode.GPU_FAILURE, why, gpu=fault.gpu)
            elif sign > 0:
                why = f"NPU {fault.npu} on node {node.name} failed (error code 0x{fault.npu_error:08X})"
                self._kill(out, at, node, ReasonCode.NPU_FAILURE, why, npu=fault.npu)
        elif fault.kind is FaultKind.NODE_LOST and node.removed and not was_lost:
            self._kill(out, at, node, ReasonCode.NODE_FAILURE, f"node {node.name} was lost")
            node.generation += 1
            node.published_removed = True
            removed = NodeRemoved(
                cluster=self.cluster,
                node=node.name,
                generation=node.generation,
                reason=ReasonCode.NODE_LOST,
                message="the node stopped reporting",
            )
            self._emit(out, at, removed, node.name, f"g{node.generation}", "removed")
        self._observe(out, at, node)

    def _kill(
        self,
        out: list[Emit],
        at: int,
        node: NodeState,
        reason: ReasonCode,
        why: str,
        *,
        gpu: int | None = None,
        npu: int | None = None,
    ) -> None:
        """Fail the runs on ``node``: every one, or those holding GPU ``gpu`` or NPU ``npu``."""
        for key in list(node.runs):
            run = self.runs[key]
            here = [r for r in run.placement if r.node == node.name]
            if gpu is not None and not any(gpu in r.gpu_indices for r in here):
                continue
            if npu is not None and not any(npu in r.npu_indices for r in here):
                continue
            failed = JobFailed(
                job_id=run.job.job_id, cluster=self.cluster, run=run.run, reason=reason, message=why, node=node.name
            )
            self._finish(out, at, run, failed)

    # -- reports -----------------------------------------------------------------------------------

    def _observe(self, out: list[Emit], at: int, node: NodeState) -> None:
        """Publish the node's snapshot if it differs from the last one published."""
        if node.removed:
            return
        candidate = node_snapshot(self.cluster, node, node.generation + 1)
        last = node.published
        unchanged = last is not None and candidate == last.model_copy(update={"generation": node.generation + 1})
        if unchanged and not node.published_removed:
            return
        node.generation += 1
        node.published, node.published_removed = candidate, False
        self._emit(out, at, candidate, node.name, f"g{node.generation}")

    def _report_usage(self, out: list[Emit], at: int) -> None:
        assert self.origin_ms is not None
        window = (at - self.origin_ms) // self.config.usage_interval_ms
        busy: dict[NodeId, None] = {}
        for node in self.nodes.values():
            active = any(self.runs[k].started_ms is not None for k in node.runs)
            if node.removed or not (active or node.name in self._reported):
                continue
            report = node_usage(self.cluster, node, self.runs, window, at, self.config)
            self._emit(out, at, report, node.name, "usage", at)
            if active:
                busy[node.name] = None
        self._reported = busy

    def _status(self, out: list[Emit], at: int, status: ClusterStatus, reason: ReasonCode, message: str) -> None:
        self._last_status = status
        event = ClusterStatusChanged(cluster=self.cluster, status=status, reason=reason, message=message)
        self._emit(out, at, event, "status", at, status.value)

    def _emit(
        self, out: list[Emit], at: int, event: Event, *parts: object, run: Run | None = None, cause: str | None = None
    ) -> None:
        tenant = run.job.tenant if run is not None else None
        out.append(Emit(at, event_id(self.cluster, *parts), event, tenant, cause))


__all__ = ["ClusterModel"]
