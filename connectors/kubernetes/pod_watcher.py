"""The connector's pods as job lifecycle events: the reflector's handler for its pods.

Called by the reflector (list and watch of pods labelled ``app.kubernetes.io/managed-by=fedsched`` and
this cluster's ``fedsched.io/cluster``) and by a timer (``tick``: deletion deadlines pass without any
event). Calls the pure ``lifecycle`` rules, the ``Reporter`` and the API server.

For each run it keeps the replicas' states; after every change it asks ``lifecycle.decide`` what to
report, publishes that (ids from job, run and transition), then writes what was reported onto the
pods (annotation ``fedsched.io/reported``). That annotation, read back after a restart or a relist,
is what keeps a transition from being reported twice; an in-memory ledger covers the moment between
publishing and annotating (a crash exactly there repeats the event with the same id).

Reconciling a run, after its outcome is known: the finalizer comes off every pod (a stopped pod then
disappears, a finished one stays for its logs until someone deletes it); a pod that counts as stopped
only because its deadline passed is deleted with grace 0 (what the pod garbage collector does for pods
of lost nodes); after a replica's failure the other replicas (and a failed pod still holding its
node, e.g. an image that can never be pulled) are deleted with ``failure_grace_s`` before the failure
is reported, which happens once every pod has stopped; a pod that carries a stop annotation
but is not being deleted (the connector stopped between the two steps) is deleted now.

Once a run has ended here (its end reported, or its pods stopped quietly), its Services are deleted
(``service_keeper``), once per run and process; after a list, only for runs that have one (one list of
our Services tells), so a restart beside many finished pods costs one request, not one per run. A
failure is reported with the blame the node watcher's latest GPU health gives it (``gpu_health``,
``lifecycle.blame_devices``, NPUs too: ``npu_health``).

A run whose pods carry a quiet stop (``lifecycle.QUIET_STOPS``: its end is in the log already, or a newer
run replaced it), or that the executor says is over (``is_over``), gets no report at all: its pods are
only deleted and reconciled as an ended run's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from connectors.kubernetes import lifecycle, names
from connectors.kubernetes.kubeapi import JSON_PATCH, KubeApi, KubeError, Obj
from connectors.kubernetes.lifecycle import ReplicaState, RunKey, Transition
from connectors.kubernetes.reporting import Reporter
from connectors.kubernetes.service_keeper import ServiceKeeper
from events.catalog.inventory import GpuHealthSample, NpuHealthSample
from events.catalog.types import ClusterId, JobId

log = logging.getLogger("fedsched.connector.kubernetes")


@dataclass
class Run:
    replicas: int
    pods: dict[int, Obj] = field(default_factory=dict)
    """Live pods by replica (as last seen)."""
    gone: dict[int, ReplicaState] = field(default_factory=dict)
    """Replicas whose pod was removed, with their last state."""
    reported: set[Transition] = field(default_factory=set)
    services_removed: bool = False


def _key_of(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class PodWatcher:
    def __init__(
        self,
        api: KubeApi,
        cluster: ClusterId,
        reporter: Reporter,
        *,
        clock_ms: Callable[[], int],
        stop_margin_s: int = 30,
        failure_grace_s: int = 30,
        crash_restarts: int = lifecycle.CRASH_RESTARTS,
    ) -> None:
        self.api = api
        self.cluster = cluster
        self._reporter = reporter
        self._clock_ms = clock_ms
        self.stop_margin_ms = stop_margin_s * 1000
        self.failure_grace_s = failure_grace_s
        self.crash_restarts = crash_restarts
        self.services = ServiceKeeper(api, cluster)
        self.gpu_health: Callable[[str], Sequence[GpuHealthSample]] = lambda node: ()
        self.npu_health: Callable[[str], Sequence[NpuHealthSample]] = lambda node: ()
        """The latest GPU health of a node (by its Kubernetes name): set by the connector to the node watcher's."""
        self.runs: dict[RunKey, Run] = {}
        self._lock = asyncio.Lock()
        self.is_over: Callable[[RunKey], bool] = lambda key: False
        """Whether the log says the run is over (ended, or not the job's current run): set by the connector
        to the executor's view, so nothing is reported for such a run even before its pods carry the stop."""
        self.recall: Callable[[set[JobId]], Awaitable[None]] | None = None
        """Called with the jobs of the first list before anything is reported (the job book reads what the
        log says of them: a restarted connector knows which runs ended while it was away)."""
        self._recalled = False

    @property
    def label_selector(self) -> str:
        return f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE},{names.LABEL_CLUSTER}={names.label_value(self.cluster)}"

    def has_job(self, job_id: JobId) -> bool:
        return any(key.job_id == job_id for key in self.runs)

    def _track(self, pod: Obj) -> RunKey | None:
        ident = lifecycle.identify(pod)
        if ident is None:
            return None
        run = self.runs.setdefault(ident.key, Run(ident.replicas))
        run.replicas = max(run.replicas, ident.replicas)  # a run that grew: its newer pods count more
        run.pods[ident.replica] = pod
        run.gone.pop(ident.replica, None)
        run.reported |= lifecycle.reported_of(pod)
        return ident.key

    def _untrack(self, pod: Obj, now_ms: int) -> RunKey | None:
        ident = lifecycle.identify(pod)
        run = self.runs.get(ident.key) if ident else None
        if ident is None or run is None:
            return None
        run.pods.pop(ident.replica, None)
        last = lifecycle.replica_state(pod, ident.replica, now_ms, self.stop_margin_ms, self.crash_restarts)
        run.gone[ident.replica] = lifecycle.removed(last)
        return ident.key

    async def synced(self, objects: list[Obj]) -> None:
        try:
            with_services: set[tuple[JobId, int]] | None = await self.services.runs()
        except KubeError as error:
            log.warning("event=service_list_error error=%r", str(error))
            with_services = None  # then each ended run asks for its own
        async with self._lock:
            now = self._clock_ms()
            listed = {_key_of(p) for p in objects}
            for run in self.runs.values():  # removed while no watch was open
                for pod in list(run.pods.values()):
                    if _key_of(pod) not in listed:
                        self._untrack(pod, now)
            keys = {k for k in (self._track(p) for p in objects) if k is not None}
            if not self._recalled and self.recall is not None:
                await self.recall({key.job_id for key in keys})
                self._recalled = True
            if with_services is not None:
                for key in keys:
                    self.runs[key].services_removed = (key.job_id, key.run) not in with_services
            for key in sorted(keys | set(self.runs)):
                await self._evaluate(key)

    async def changed(self, kind: str, obj: Obj) -> None:
        async with self._lock:
            key = self._untrack(obj, self._clock_ms()) if kind == "DELETED" else self._track(obj)
            if key is not None:
                await self._evaluate(key)

    async def tick(self) -> None:
        """Re-evaluate every run: deletion deadlines pass with no event, failed patches are retried."""
        async with self._lock:
            for key in sorted(self.runs):
                await self._evaluate(key)

    async def run_timer(self, every_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.tick()
            except KubeError as error:
                log.warning("event=pod_tick_error error=%r", str(error))

    def states(self, key: RunKey) -> list[ReplicaState]:
        run, now = self.runs[key], self._clock_ms()
        crash = self.crash_restarts
        live = [lifecycle.replica_state(p, r, now, self.stop_margin_ms, crash) for r, p in run.pods.items()]
        return live + list(run.gone.values())

    async def _evaluate(self, key: RunKey) -> None:
        run = self.runs[key]
        states = self.states(key)
        for state in states:
            run.reported |= state.reported
        quiet = any(s.stop in lifecycle.QUIET_STOPS for s in states)
        outcomes = [] if quiet or self.is_over(key) else lifecycle.decide(states, run.replicas, frozenset(run.reported))
        for outcome in outcomes:
            if outcome.failure is not None and outcome.failure.node:
                node = outcome.failure.node
                outcome = lifecycle.blame_devices(outcome, self.gpu_health(node), self.npu_health(node))
            event = lifecycle.to_event(outcome, key, self.cluster, run.replicas)
            await self._reporter.publish_one(event, lifecycle.event_id(self.cluster, key, outcome.transition))
            run.reported.add(outcome.transition)
            log.info("event=reported job=%s run=%d transition=%s", key.job_id, key.run, outcome.transition)
        try:
            await self._reconcile(key, run, quiet)
            if not run.services_removed and (run.reported & lifecycle.RUN_ENDS or quiet or self.is_over(key)):
                await self.services.remove(key.job_id, key.run)
                run.services_removed = True
        except KubeError as error:
            log.warning("event=reconcile_error job=%s run=%d error=%r", key.job_id, key.run, str(error))
        if not run.pods and (run.reported & lifecycle.RUN_ENDS or quiet or not run.gone):
            del self.runs[key]

    async def _reconcile(self, key: RunKey, run: Run, quiet: bool = False) -> None:
        reported = frozenset(run.reported)
        ended = bool(reported & lifecycle.RUN_ENDS) or quiet
        wanted = lifecycle.format_reported(reported)
        now = self._clock_ms()
        failing = lifecycle.failing(self.states(key)) and not ended
        for replica, pod in sorted(run.pods.items()):
            meta = pod.get("metadata") or {}
            path = f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}"
            ops: list[Obj] = []
            state = lifecycle.replica_state(pod, replica, now, self.stop_margin_ms, self.crash_restarts)
            failed_other = (Transition.FAILED in reported or failing) and not state.deleting and not state.stopped
            if failed_other and not state.stop:  # our deletion must not read as one by someone else
                ops.append({"op": "add", "path": "/metadata/annotations/fedsched.io~1stop", "value": "failed"})
            if wanted and (meta.get("annotations") or {}).get(names.ANN_REPORTED) != wanted:
                ops.append({"op": "add", "path": "/metadata/annotations/fedsched.io~1reported", "value": wanted})
            finalizers = list(meta.get("finalizers") or [])
            if ended and names.FINALIZER in finalizers:
                index = finalizers.index(names.FINALIZER)
                ops.append({"op": "test", "path": f"/metadata/finalizers/{index}", "value": names.FINALIZER})
                ops.append({"op": "remove", "path": f"/metadata/finalizers/{index}"})
            if ops:
                await self._patch(path, ops)
            stop_pending = state.stop and not state.deleting
            if ended and state.deleting and state.stopped and meta.get("deletionGracePeriodSeconds") != 0:
                # Past its deadline with no kubelet's final word (node lost): finish the deletion, as the
                # pod garbage collector does for pods of dead nodes, so its GPUs are free in the API too.
                body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
                await self._call("DELETE", path, body, None)
            elif stop_pending or failed_other:
                grace = str((meta.get("annotations") or {}).get(names.ANN_STOP_GRACE, ""))
                seconds = int(grace) if stop_pending and grace.isdigit() else self.failure_grace_s
                body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": seconds}
                await self._call("DELETE", path, body, None)

    async def _patch(self, path: str, ops: list[Obj]) -> None:
        await self._call("PATCH", path, ops, JSON_PATCH)

    async def _call(self, method: str, path: str, body: object, content_type: str | None) -> None:
        try:
            if content_type:
                await self.api.request(method, path, body=body, content_type=content_type)
            else:
                await self.api.request(method, path, body=body)
        except KubeError as error:
            # 404: already gone; 409/422: changed under us (the watch brings the new state).
            if error.status not in (404, 409, 422):
                raise
