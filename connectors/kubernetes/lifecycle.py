"""The pods of one run of a job, as the lifecycle transitions fedsched reports.

Called by ``pod_watcher`` after every change to a pod it manages, and by unit tests with plain dicts.
Pure: the clock is passed in (``now_ms``), the pods are the API server's JSON.

The rules, per run (the pods sharing ``fedsched.io/job-id`` and ``fedsched.io/run``; for a job spread
over clusters, per part of its run: the pods of the run in this cluster, whose events name this cluster
and end only this part):

- ``started``: every replica's pod exists and has run (phase Running or Succeeded, or Failed after a
  container started).
- ``failed``: a replica failed (phase Failed, a container that cannot be created, a container the
  kubelet keeps restarting, or a pod deleted by someone other than fedsched) while no stop was
  requested, and every pod of the run has stopped (the pod watcher deletes the others, ``failing``):
  the job's outcome frees all its GPUs, so it is told only once none is in use any more, as for a stop.
  The first failed replica names the reason.
- ``succeeded``: every replica's pod Succeeded.
- ``preempted`` / ``reclaimed`` / ``cancelled``: fedsched asked to stop the run (annotation
  ``fedsched.io/stop`` on any of its pods) and every pod has stopped: terminated, deleted with grace 0
  by the kubelet, removed, or past its deletion deadline plus a margin. A stop outranks failures of
  pods being killed by it; a run whose every replica already succeeded still counts as succeeded.
- nothing at all for a run whose pods carry a quiet stop (``QUIET_STOPS``: its end is in the log
  already, or it is no longer the job's current run): the executor stops those pods, silently.

Pods whose containers the kubelet restarts (``restartPolicy: Always`` or ``OnFailure``: inference
services): a restart is not a failure, the service may recover; a container that has been restarted
``crash_restarts`` times and is down again (waiting in CrashLoopBackOff, or terminated) is crash-looping,
and that fails the replica with the reason of its last termination (``OutOfMemory`` for OOMKilled, else
``NonZeroExit`` with its exit code: the workload's failure, retried as the job asked). Their containers
all being terminated counts as stopped only once the pod is being deleted (until then the kubelet
starts them again).

Blame (``blame_devices``): a replica whose container failed (``NonZeroExit`` or ``Unknown``) on a node
whose health reports one of the GPUs it held as failed is reported as ``GpuFailure``, an infrastructure
failure (retried under the policy's budget), naming the GPU and its last XID; one of the NPUs it held,
as ``NpuFailure``, naming the NPU and its last error code. The health is the node watcher's
latest word when the failure is reported: an XID the node's health agent publishes only later is not
seen.

Each transition is reported once per run: ``decide`` leaves out what ``reported`` holds, and after a
transition that ends the run (``RUN_ENDS``) nothing more. Event ids derive from job, run and transition
(``names.event_id``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from connectors.kubernetes import names
from events.catalog.base import Event
from events.catalog.inventory import GpuHealthSample, NpuHealthSample
from events.catalog.jobs import JobCancelled, JobFailed, JobPreempted, JobReclaimed, JobStarted, JobSucceeded
from events.catalog.lifecycle import RunEnd
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, Health, JobId, NodeId
from events.wire.envelope import parse_time

Obj = Mapping[str, Any]


class Transition(StrEnum):
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    RECLAIMED = "reclaimed"
    CANCELLED = "cancelled"


#: The transitions that report the end of the run: one per way a run ends (``RunEnd`` of the catalogue's
#: lifecycle vocabulary, whose words they are), each reported as its run-ending event (``to_event``).
#: After one, nothing more is reported for the run.
RUN_ENDS = frozenset(Transition(how.value) for how in RunEnd)
#: Values of the ``fedsched.io/stop`` annotation that end a run with their own transition.
STOPS = {"preempted": Transition.PREEMPTED, "reclaimed": Transition.RECLAIMED, "cancelled": Transition.CANCELLED}
#: Values of ``fedsched.io/stop`` after which nothing is reported for the run: ``ended`` (the log holds the
#: run's end already, published by someone else, e.g. governance's ``AllocationLeaseExpired``) and
#: ``stale`` (a newer run of the job was placed). The pods are only stopped and cleaned up.
QUIET_STOPS = frozenset({"ended", "stale"})
#: Waiting reasons after which the kubelet will never start the container.
HOPELESS_WAITING = frozenset({"InvalidImageName", "ErrImageNeverPull"})
CRASH_RESTARTS = 5
"""Restarts after which a container of a restarting pod that is down again counts as crash-looping."""
_POD_REASONS = {
    "DeadlineExceeded": ReasonCode.RUNTIME_EXCEEDED,
    "Evicted": ReasonCode.NODE_FAILURE,
    "NodeLost": ReasonCode.NODE_LOST,
    "Terminated": ReasonCode.NODE_FAILURE,
    "Shutdown": ReasonCode.NODE_FAILURE,
    "NodeShutdown": ReasonCode.NODE_FAILURE,
    "UnexpectedAdmissionError": ReasonCode.LAUNCH_FAILED,
    "NodeAffinity": ReasonCode.LAUNCH_FAILED,
}
#: Why Kubernetes itself took a pod away (its ``DisruptionTarget`` condition). Each is the cluster's doing,
#: not the workload's, so each is an infrastructure failure that fedsched retries
#: (``events.catalog.lifecycle.INFRASTRUCTURE_FAILURES``): a drain's eviction and kube-scheduler's
#: preemption for another pod included (the catalogue has no narrower code; the message names the cause).
_DISRUPTIONS = {
    "DeletionByTaintManager": ReasonCode.NODE_FAILURE,
    "TerminationByKubelet": ReasonCode.NODE_FAILURE,
    "PreemptionByScheduler": ReasonCode.NODE_FAILURE,
    "EvictionByEvictionAPI": ReasonCode.NODE_FAILURE,
}


@dataclass(frozen=True, slots=True, order=True)
class RunKey:
    job_id: JobId
    run: int


@dataclass(frozen=True, slots=True)
class PodIdentity:
    key: RunKey
    replica: int
    replicas: int


@dataclass(frozen=True, slots=True)
class Failure:
    reason: ReasonCode
    message: str
    exit_code: int | None = None
    node: str | None = None
    gpu_indices: tuple[int, ...] = ()
    """The GPUs the failed replica held on ``node`` (its pod's ``fedsched.io/gpu-indices``)."""
    npu_indices: tuple[int, ...] = ()
    """The NPUs it held there (``fedsched.io/npu-indices``)."""


@dataclass(frozen=True, slots=True)
class ReplicaState:
    replica: int
    pod: str
    node: str | None
    started: bool = False
    succeeded: bool = False
    failure: Failure | None = None
    stop: str | None = None
    stop_by: str | None = None
    deleting: bool = False
    stopped: bool = False
    """Runs nothing any more: terminated, removed, or past its deletion deadline."""
    reported: frozenset[Transition] = frozenset()


@dataclass(frozen=True, slots=True)
class Outcome:
    transition: Transition
    failure: Failure | None = None
    requester: str | None = None


def _meta(pod: Obj) -> Obj:
    return pod.get("metadata") or {}


def identify(pod: Obj) -> PodIdentity | None:
    """Which run and replica a pod is, from our labels and annotations; None if it is not one of ours."""
    labels, annotations = _meta(pod).get("labels") or {}, _meta(pod).get("annotations") or {}
    job, run, replica = annotations.get(names.ANN_JOB), labels.get(names.LABEL_RUN), labels.get(names.LABEL_REPLICA)
    # A pod of a spread job's part counts the part's replicas here; other pods, their run's.
    replicas = annotations.get(names.ANN_PART_REPLICAS) or annotations.get(names.ANN_REPLICAS, "1")
    run, replica, replicas = str(run), str(replica), str(replicas)
    if not job or not (run.isdigit() and replica.isdigit() and replicas.isdigit()):
        return None
    return PodIdentity(RunKey(JobId(str(job)), int(run)), int(replica), max(int(replicas), 1))


def reported_of(pod: Obj) -> frozenset[Transition]:
    text = (_meta(pod).get("annotations") or {}).get(names.ANN_REPORTED) or ""
    values = {t.value for t in Transition}
    return frozenset(Transition(v) for v in text.split(",") if v in values)


def format_reported(reported: frozenset[Transition]) -> str:
    return ",".join(t.value for t in Transition if t in reported)


def _terminated(status: Obj) -> Obj | None:
    state = status.get("state") or {}
    return state.get("terminated") if isinstance(state.get("terminated"), Mapping) else None


def _indices(pod: Obj, annotation: str) -> tuple[int, ...]:
    text = str((_meta(pod).get("annotations") or {}).get(annotation) or "")
    return tuple(int(i) for i in text.split(",") if i.isdigit())


def restarts_containers(pod: Obj) -> bool:
    """Whether the kubelet restarts the pod's containers (its ``restartPolicy`` is not ``Never``)."""
    return bool((pod.get("spec") or {}).get("restartPolicy", "Always") != "Never")


def _crash_loop(pod: Obj, where: str, node: str | None, crash_restarts: int) -> Failure | None:
    """A container restarted ``crash_restarts`` times and down again, with its last termination's reason."""
    status = pod.get("status") or {}
    for container in list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or []):
        state = container.get("state") or {}
        down = "terminated" in state or (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff"
        restarts = container.get("restartCount")
        if not down or not isinstance(restarts, int) or restarts < crash_restarts:
            continue
        last = _terminated({"state": container.get("lastState") or {}}) or _terminated(container) or {}
        code, reason = last.get("exitCode"), str(last.get("reason") or "")
        kind = ReasonCode.OUT_OF_MEMORY if reason == "OOMKilled" else ReasonCode.NON_ZERO_EXIT
        text = f"{where}: container {container.get('name')} crash-looping: restarted {restarts} times, last "
        text += f"{reason or 'terminated'} with exit code {code}"
        if last.get("message"):
            text += f": {last['message']}"
        return Failure(kind, text, code if isinstance(code, int) else None, node)
    return None


def _failure(pod: Obj, replica: int, crash_restarts: int = CRASH_RESTARTS) -> Failure | None:
    found = _failure_of(pod, replica, crash_restarts)
    if found is None:
        return None
    return replace(
        found, gpu_indices=_indices(pod, names.ANN_GPU_INDICES), npu_indices=_indices(pod, names.ANN_NPU_INDICES)
    )


def _failure_of(pod: Obj, replica: int, crash_restarts: int) -> Failure | None:
    meta, status = _meta(pod), pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    where = f"replica {replica} (pod {meta.get('name')} on node {node})"
    statuses = list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])
    if status.get("phase") != "Failed" and restarts_containers(pod):
        crashing = _crash_loop(pod, where, node, crash_restarts)
        if crashing is not None:
            return crashing
    if status.get("phase") == "Failed":
        pod_reason = str(status.get("reason") or "")
        if pod_reason in _POD_REASONS:
            return Failure(_POD_REASONS[pod_reason], f"{where}: {pod_reason}: {status.get('message', '')}", None, node)
        ended = [(s, t) for s in statuses if (t := _terminated(s)) is not None]
        ended.sort(key=lambda st: st[1].get("exitCode", 0) == 0)  # a non-zero exit first
        if ended:
            container, term = ended[0]
            code = term.get("exitCode")
            reason = str(term.get("reason") or "")
            kind = (
                ReasonCode.OUT_OF_MEMORY
                if reason == "OOMKilled"
                else ReasonCode.NON_ZERO_EXIT
                if code
                else ReasonCode.UNKNOWN
            )
            text = f"{where}: container {container.get('name')} {reason or 'terminated'}, exit code {code}"
            if term.get("message"):
                text += f": {term['message']}"
            return Failure(kind, text, code if isinstance(code, int) else None, node)
        return Failure(ReasonCode.UNKNOWN, f"{where}: failed: {pod_reason} {status.get('message', '')}", None, node)
    for container in statuses:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in HOPELESS_WAITING:
            text = f"{where}: container {container.get('name')} {waiting['reason']}: {waiting.get('message', '')}"
            return Failure(ReasonCode.LAUNCH_FAILED, text, None, node)
    if meta.get("deletionTimestamp") and not (meta.get("annotations") or {}).get(names.ANN_STOP):
        reason, message = ReasonCode.OPERATOR_REQUEST, "the pod was deleted outside fedsched"
        for condition in status.get("conditions") or ():
            if condition.get("type") == "DisruptionTarget" and condition.get("reason") in _DISRUPTIONS:
                reason = _DISRUPTIONS[condition["reason"]]
                message = f"{condition['reason']}: {condition.get('message', '')}"
        return Failure(reason, f"{where}: {message}", None, node)
    return None


def _stopped(pod: Obj, now_ms: int, margin_ms: int) -> bool:
    meta, status = _meta(pod), pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    statuses = status.get("containerStatuses") or []
    restarting = restarts_containers(pod) and not meta.get("deletionTimestamp")
    if statuses and all(_terminated(s) is not None for s in statuses) and not restarting:
        return True  # (a restarting pod's containers start again)
    deadline = meta.get("deletionTimestamp")
    if not deadline:
        return False
    if meta.get("deletionGracePeriodSeconds") == 0:
        return True  # the kubelet's final delete: its containers are gone
    try:
        return now_ms >= parse_time(str(deadline)) + margin_ms
    except ValueError:
        return True


def replica_state(
    pod: Obj, replica: int, now_ms: int, margin_ms: int, crash_restarts: int = CRASH_RESTARTS
) -> ReplicaState:
    meta, status = _meta(pod), pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    phase = status.get("phase")
    ran = any((_terminated(s) or {}).get("startedAt") for s in status.get("containerStatuses") or [])
    return ReplicaState(
        replica=replica,
        pod=str(meta.get("name", "")),
        node=(pod.get("spec") or {}).get("nodeName"),
        started=phase in ("Running", "Succeeded") or (phase == "Failed" and ran),
        succeeded=phase == "Succeeded",
        failure=_failure(pod, replica, crash_restarts),
        stop=annotations.get(names.ANN_STOP),
        stop_by=annotations.get(names.ANN_STOP_BY),
        deleting=bool(meta.get("deletionTimestamp")),
        stopped=_stopped(pod, now_ms, margin_ms),
        reported=reported_of(pod),
    )


def removed(state: ReplicaState) -> ReplicaState:
    """The state of a replica whose pod disappeared from the API server (a DELETED watch event)."""
    failure = state.failure
    if failure is None and not state.succeeded and not state.stop:
        message = f"replica {state.replica} (pod {state.pod}): the pod was removed before it finished"
        failure = Failure(ReasonCode.UNKNOWN, message, None, state.node)
    return replace(state, stopped=True, deleting=True, failure=failure)


def decide(states: Sequence[ReplicaState], replicas: int, reported: frozenset[Transition]) -> list[Outcome]:
    """The transitions to report now for one run, in order (``started`` before one that ends the run)."""
    if reported & RUN_ENDS or not states or any(s.stop in QUIET_STOPS for s in states):
        return []
    ordered = sorted(states, key=lambda s: s.replica)
    complete = len({s.replica for s in ordered}) >= replicas
    started = complete and all(s.started for s in ordered)
    succeeded = complete and all(s.succeeded for s in ordered)
    out: list[Outcome] = []
    if started and Transition.STARTED not in reported:
        out.append(Outcome(Transition.STARTED))
    stop = next((s for s in ordered if s.stop in STOPS), None)
    if stop is not None and not succeeded:
        if all(s.stopped for s in ordered):
            out.append(Outcome(STOPS[str(stop.stop)], requester=stop.stop_by))
        return out  # else wait: a stop is under way and a replica still runs
    failure = next((s.failure for s in ordered if s.failure is not None), None)
    if failure is not None:
        if all(s.stopped for s in ordered):
            out.append(Outcome(Transition.FAILED, failure))
        return out  # else wait: the pod watcher stops the other replicas, and their GPUs are still held
    if succeeded:
        out.append(Outcome(Transition.SUCCEEDED))
    return out


def failing(states: Sequence[ReplicaState]) -> bool:
    """A replica failed and no stop was asked for: the run's other replicas are to be stopped."""
    return not any(s.stop in STOPS or s.stop in QUIET_STOPS for s in states) and any(s.failure for s in states)


_BLAMABLE = frozenset({ReasonCode.NON_ZERO_EXIT, ReasonCode.UNKNOWN})
"""Failures that a failed GPU under the workload explains (a killed or crashed process, a vanished pod)."""


def blame_devices(outcome: Outcome, gpus: Sequence[GpuHealthSample], npus: Sequence[NpuHealthSample] = ()) -> Outcome:
    """The outcome, as a ``GpuFailure`` (or ``NpuFailure``) if its replica's container failed while a GPU
    (an NPU) it held is reported failed (``gpus``, ``npus``: the latest samples of the failure's node)."""
    failure = outcome.failure
    if outcome.transition is not Transition.FAILED or failure is None or failure.reason not in _BLAMABLE:
        return outcome
    held = set(failure.gpu_indices)
    broken = [s for s in sorted(gpus, key=lambda s: s.index) if s.index in held and s.health is Health.FAILED]
    if broken:
        said = ", ".join(f"GPU {s.index}" + (f" (XID {s.last_xid})" if s.last_xid is not None else "") for s in broken)
        message = f"{failure.message}; node {failure.node} reports {said} failed, held by this replica"
        return replace(outcome, failure=replace(failure, reason=ReasonCode.GPU_FAILURE, message=message))
    held = set(failure.npu_indices)
    dead = [s for s in sorted(npus, key=lambda s: s.index) if s.index in held and s.health is Health.FAILED]
    if dead:
        said = ", ".join(
            f"NPU {s.index}" + (f" (error 0x{s.last_error_code:08X})" if s.last_error_code is not None else "")
            for s in dead
        )
        message = f"{failure.message}; node {failure.node} reports {said} failed, held by this replica"
        return replace(outcome, failure=replace(failure, reason=ReasonCode.NPU_FAILURE, message=message))
    return outcome


def to_event(outcome: Outcome, key: RunKey, cluster: ClusterId, replicas: int) -> Event:
    job, run = key.job_id, key.run
    match outcome.transition:
        case Transition.STARTED:
            return JobStarted(job_id=job, cluster=cluster, run=run, message=f"{replicas} replica(s) running")
        case Transition.SUCCEEDED:
            return JobSucceeded(job_id=job, cluster=cluster, run=run, message=f"{replicas} replica(s) succeeded")
        case Transition.FAILED:
            failure = outcome.failure or Failure(ReasonCode.UNKNOWN, "")
            node = failure.node if failure.node and names.is_id(failure.node) else None
            code = failure.exit_code
            if code is not None and not -(2**31) <= code < 2**31:
                code = None
            return JobFailed(
                job_id=job,
                cluster=cluster,
                run=run,
                exit_code=code,
                reason=failure.reason,
                message=failure.message[:4096],
                node=NodeId(node) if node else None,
            )
        case Transition.PREEMPTED:
            return JobPreempted(job_id=job, cluster=cluster, run=run, message="all pods stopped")
        case Transition.RECLAIMED:
            return JobReclaimed(job_id=job, cluster=cluster, run=run, message="all pods stopped")
        case Transition.CANCELLED:
            requester = outcome.requester or None
            return JobCancelled(job_id=job, cluster=cluster, run=run, requester=requester, message="all pods stopped")
    raise AssertionError(outcome.transition)  # pragma: no cover


def event_id(cluster: ClusterId, key: RunKey, transition: Transition) -> str:
    return names.event_id(cluster, key.job_id, key.run, transition.value)
