"""Carries the scheduler's decisions for this cluster into it: creates and stops pods.

Called by the ``EventConsumer`` of the connector's group (topics: decisions and jobs), one record at a
time, in log order. Calls the API server and the ``Reporter``; reads the ``JobBook``.

- ``JobPlaced`` for this cluster: the tenant's namespace (created if missing), the run's Service if its
  kind has one (``services``: training's headless rendezvous Service, a service's or notebook's
  ClusterIP), then one pod per replica (``pods.render_pods``). Idempotent: names are deterministic and
  409 AlreadyExists counts as done, so a decision applied twice creates nothing new. A template that
  cannot become a pod, or a pod the API server refuses (4xx), ends the run with
  ``JobFailed(LaunchFailed)``; pods already made for it are deleted, and so are its Services. A
  placement of a run that already ended here, or of a job whose cancellation was asked for, creates
  nothing.
- ``JobReplicasAdded`` for this cluster: one pod per added replica on the named node (``grow``), the same
  way; nothing for a run that ended or is over, or a job whose cancellation was asked for.
- A job spread over clusters (``lifecycle.spreads``) has a part of its run in each cluster holding some of
  its replicas: a ``JobReplicasAdded`` for a run with no pods here opens the part here (``grow`` makes its
  pods as a placement's, labelled with the run); its pods' lifecycle is the part's, reported naming this
  cluster. Every pod of such a job says how many replicas the part here holds (``pods.render_pods``),
  which is what the pod watcher counts. A part that ended here is never opened again; one opened after
  the job's cancellation was asked for is reported cancelled at once, as a placement would be. The
  scheduler's ``JobRunClosed`` (decisions topic) ends such a job's run: the job book reads it.
- ``JobPreemptionRequested`` / ``JobReclaimRequested`` for this cluster (for a spread job: its part here),
  and ``JobCancelRequested`` for a job with pods here (the pod watcher's view, which the consumer waits
  for at start, plus the jobs this process placed): annotate each pod with why (``fedsched.io/stop``),
  then delete it with the grace period. The pod watcher reports ``JobPreempted`` / ``JobReclaimed`` /
  ``JobCancelled`` once every pod has stopped.
- The end of a run of this cluster published by someone else (``JobFailed`` / ``JobCancelled`` /
  ``JobSucceeded`` / ``JobPreempted`` / ``JobReclaimed``, e.g. governance's ``AllocationLeaseExpired``
  for a run that never started): its pods are stopped with the cancel grace period and a quiet stop
  (``fedsched.io/stop: ended``), so the pod watcher reports nothing more for that run. Ends this
  connector published need nothing: the pod watcher and the placement path already handle their pods.
- A ``JobPlaced`` of run N (for any cluster) makes every older run of the job stale: its pods here are
  stopped the same way (``fedsched.io/stop: stale``), and a late placement of an older run creates
  nothing. ``is_over`` tells the pod watcher about both, so nothing is reported even before the pods
  carry the annotation.
- Tenant policy (``TenantRegistered``, ``QuotaSet`` on the governance topic, kept by the ``TenantBook``):
  a placement's pods are checked against the images the tenant and the cluster allow and name the
  tenant's pull secrets (``images``; a refusal fails the launch, no pod made); a tenant's namespace gets
  its ResourceQuota, LimitRange and pull secret copies, again when the tenant's settings change
  (``tenant_setup``).
- While the API server is unreachable, a decision is retried with backoff and the consumer waits:
  its offsets are committed only after the handler returns, so nothing is skipped.
- A refusal of the connector itself (401, or the authoriser's 403: RBAC missing, or not loaded yet
  after an API server restart) is the infrastructure's problem, not the job's: it is retried the same
  way for at most ``denied_retry_s`` (meanwhile ``Reachability`` reports the cluster unreachable), then
  the decision is given up with one error line and no report: the job is not failed, its run keeps
  its allocation until it ends in the log (the lease rule of governance releases a run that never
  starts), and whatever pods it had here are stopped then. Only a refusal about the job itself (422
  invalid, an admission check's 403, ...) fails the launch.

The handler never raises: an unexpected error is logged and, for a placement, reported as a failed
launch, so one bad record cannot stall the cluster.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from connectors.kubernetes import images, lifecycle, names, pods, services
from connectors.kubernetes.jobbook import JobBook
from connectors.kubernetes.kubeapi import KubeApi, KubeError, Obj
from connectors.kubernetes.reporting import Reporter
from connectors.kubernetes.service_keeper import ServiceKeeper
from connectors.kubernetes.tenant_setup import PullSecretMissing, TenantSetup
from connectors.kubernetes.tenants import TenantBook, TenantOptions
from connectors.kubernetes.throttle import Backoff
from events.catalog.decisions import (
    JobPlaced,
    JobPreemptionRequested,
    JobReclaimRequested,
    JobReplicasAdded,
    JobRetriesExhausted,
    JobRunClosed,
)
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobSubmitted,
)
from events.catalog.lifecycle import JOB_END_EVENTS, RUN_END_EVENTS, RunEndEvent, ends_part, spreads
from events.catalog.reasons import ReasonCode
from events.catalog.topics import GOVERNANCE, JOBS
from events.catalog.types import JobId
from events.log import LogRecord, ProducerFenced
from events.wire.envelope import Envelope

log = logging.getLogger("fedsched.connector.kubernetes")
T = TypeVar("T")
PODS = "/api/v1/pods"
MAX_OVER = 10_000
"""How many runs ended by others the executor remembers for ``is_over`` (their pods carry it after that)."""


class LaunchFailed(Exception):
    pass


class ClusterRefused(Exception):
    """The API server kept refusing the connector itself (``KubeError.denied``) past ``denied_retry_s``."""


class Executor:
    def __init__(
        self,
        api: KubeApi,
        book: JobBook,
        reporter: Reporter,
        options: pods.RenderOptions,
        *,
        cancel_grace_s: int = 30,
        backoff: Backoff | None = None,
        has_pods: Callable[[JobId], bool] = lambda job_id: True,
        denied_retry_s: float = 300.0,
        tenants: TenantBook | None = None,
        tenant_options: TenantOptions | None = None,
    ) -> None:
        self.api = api
        self.book = book
        self.reporter = reporter
        self.options = options
        self.cluster = options.cluster
        self.cancel_grace_s = cancel_grace_s
        self.denied_retry_s = denied_retry_s
        self._backoff = backoff or Backoff(0.2, 10.0)
        self.services = ServiceKeeper(api, self.cluster)
        self._namespaces: set[str] = set()
        self._has_pods = has_pods
        self._placed: set[JobId] = set()
        """Jobs this process placed pods for (the pod watch may not have shown them yet)."""
        self._current: dict[JobId, int] = {}
        """The newest run placed (on any cluster) of every live job whose placement was read."""
        self._over: dict[lifecycle.RunKey, None] = {}
        """Runs of this cluster ended by someone else (insertion-ordered, the oldest forgotten first)."""
        self.created = 0
        self.tenants = tenants if tenants is not None else TenantBook(None)
        self.tenant_options = tenant_options or TenantOptions()
        self.setup = TenantSetup(api, self.tenants, options, self.tenant_options, self._retrying)

    async def handle(self, record: LogRecord, envelope: Envelope) -> None:
        event = envelope.data
        try:
            if event.topic == JOBS.name or isinstance(event, JobRunClosed):
                spread = isinstance(event, RUN_END_EVENTS) and self.book.spreads(event.job_id)
                ended = self.book.apply(event)
                if isinstance(event, RUN_END_EVENTS) and event.cluster == self.cluster and not self._mine(envelope):
                    await self._ended_elsewhere(event)
                # the job ended for good: by an end that is not only its part's here, or by its run's close
                if (isinstance(event, JOB_END_EVENTS) and not ends_part(event, spread)) or (
                    isinstance(event, JobRunClosed) and ended
                ):
                    self._placed.discard(event.job_id)
                    self._current.pop(event.job_id, None)
            if event.topic == GOVERNANCE.name:
                changed = self.tenants.apply(record, event)
                if changed is not None:
                    await self.setup.refresh(changed)
            if isinstance(event, JobRetriesExhausted):
                self.book.forget(event.job_id)
            if isinstance(event, JobPlaced):
                await self._supersede(event)
            if isinstance(event, JobPlaced) and event.cluster == self.cluster:
                await self.place(event)
            elif isinstance(event, JobReplicasAdded) and event.cluster == self.cluster:
                await self.grow(event)
            elif isinstance(event, JobPreemptionRequested) and event.cluster == self.cluster:
                await self.stop(event.job_id, event.run, "preempted", event.grace_period_s, None)
            elif isinstance(event, JobReclaimRequested) and event.cluster == self.cluster:
                await self.stop(event.job_id, event.run, "reclaimed", event.grace_period_s, None)
            elif isinstance(event, JobCancelRequested) and self._ours(event.job_id):
                await self.stop(event.job_id, None, "cancelled", self.cancel_grace_s, event.requester)
        except ProducerFenced:
            raise
        except ClusterRefused as error:
            log.error("event=decision_given_up type=%s id=%s error=%r", envelope.type, envelope.id, str(error))
        except Exception:
            log.exception("event=decision_error type=%s id=%s", envelope.type, envelope.id)
            if isinstance(event, JobPlaced | JobReplicasAdded) and event.cluster == self.cluster:
                await self._failed(event, "the connector could not carry out the placement (see its log)")

    def _mine(self, envelope: Envelope) -> bool:
        """Whether this connector (this process or an earlier one for the cluster) published the event."""
        return envelope.source == self.reporter.publisher.source

    def is_over(self, key: lifecycle.RunKey) -> bool:
        """Whether the log says the run is over here: ended by someone else, or not the job's newest run."""
        return (
            key.run < self._current.get(key.job_id, 0) or key in self._over or self.book.ended_here(key.job_id, key.run)
        )

    async def _ended_elsewhere(self, event: RunEndEvent) -> None:
        run = event.run or None  # a cancellation of run 0 names no run: all of them
        self._over[lifecycle.RunKey(event.job_id, event.run)] = None
        while len(self._over) > MAX_OVER:
            del self._over[next(iter(self._over))]
        if self._ours(event.job_id):
            log.info("event=run_ended_elsewhere job=%s run=%s type=%s", event.job_id, run, type(event).__name__)
            await self.stop(event.job_id, run, "ended", self.cancel_grace_s, None)

    async def _supersede(self, placed: JobPlaced) -> None:
        """Note the job's newest run; stop the pods of its older runs here (a newer placement replaced them)."""
        newest = max(self._current.get(placed.job_id, 0), placed.run)
        older = self._current.get(placed.job_id)
        self._current[placed.job_id] = newest
        if placed.run < newest or not self._ours(placed.job_id):
            return
        if older is None and placed.run == 1:
            return  # the first run known: nothing older can be here (a restart relies on the pod watcher's view)
        try:
            await self.stop(placed.job_id, None, "stale", self.cancel_grace_s, None, before_run=placed.run)
        except KubeError as error:
            log.warning("event=stale_stop_error job=%s run=%d error=%r", placed.job_id, placed.run, str(error))

    def _ours(self, job_id: JobId) -> bool:
        """Whether the job may have pods here: cancel requests for every other job need no API call."""
        return job_id in self._placed or self._has_pods(job_id)

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run an API call, retrying transient failures (unreachable, 429, 5xx) with backoff forever, and
        refusals of the connector itself for ``denied_retry_s`` (then ``ClusterRefused``)."""
        loop = asyncio.get_running_loop()
        denied_since: float | None = None
        while True:
            try:
                result = await call()
                self._backoff.reset()
                return result
            except KubeError as error:
                if not error.retryable:
                    raise
                if error.denied:
                    denied_since = loop.time() if denied_since is None else denied_since
                    if loop.time() - denied_since >= self.denied_retry_s:
                        waited = loop.time() - denied_since
                        raise ClusterRefused(f"refused for {waited:.0f} s: {error}") from None
                delay = self._backoff.next_delay()
                log.warning("event=api_retry error=%r retry_in_s=%.2f", str(error), delay)
                await asyncio.sleep(delay)

    async def _failed(self, placed: pods.RunPods, message: str) -> None:
        event = JobFailed(
            job_id=placed.job_id,
            cluster=self.cluster,
            run=placed.run,
            reason=ReasonCode.LAUNCH_FAILED,
            message=message[:4096],
        )
        key = lifecycle.RunKey(placed.job_id, placed.run)
        await self.reporter.publish_one(event, lifecycle.event_id(self.cluster, key, lifecycle.Transition.FAILED))

    async def _namespace(self, job: JobSubmitted) -> str:
        manifest = pods.namespace_manifest(job.tenant, self.options)
        name = str(manifest["metadata"]["name"])
        if name not in self._namespaces:
            try:
                await self._retrying(lambda: self.api.request("POST", "/api/v1/namespaces", body=manifest))
                log.info("event=namespace_created namespace=%s tenant=%s", name, job.tenant)
            except KubeError as error:
                if error.status != 409:
                    raise LaunchFailed(f"the API server refused namespace {name}: {error}") from error
            self._namespaces.add(name)
        try:
            await self.setup.namespace_ready(job.tenant, name)
        except PullSecretMissing as error:
            raise LaunchFailed(str(error)) from None
        return name

    async def place(self, placed: JobPlaced) -> None:
        job_id, run = placed.job_id, placed.run
        if self.book.run_ended(job_id, run) or self.is_over(lifecycle.RunKey(job_id, run)):
            log.info("event=placement_skipped job=%s run=%d reason=run_already_ended", job_id, run)
            return
        job = await self.book.get(job_id)
        if job is None:
            await self._failed(placed, "the connector found no JobSubmitted for this job")
            return
        requester = self.book.cancel_requester(job_id)
        if requester is not None:
            await self._cancelled_before_pods(job_id, run, requester)
            return
        # A spread job's first part is here: its pods count the part's replicas, as those of later parts do.
        await self._launch(placed, job, "placed", part_replicas=len(placed.replicas) if spreads(job) else None)

    async def grow(self, added: JobReplicasAdded) -> None:
        """Create the pods of replicas added to a run here (names continue the run's, so a repeat creates
        nothing). Nothing for a run that ended, is over, or whose job's cancellation was asked for (its
        stop takes every pod of the run). A failure to launch them fails the run, as for a placement: the
        scheduler counts those replicas as held. For a job spread over clusters, see ``_grow_part``."""
        job_id, run = added.job_id, added.run
        if self._ended_here(job_id, run):
            log.info("event=replicas_added_skipped job=%s run=%d reason=run_already_ended", job_id, run)
            return
        job = await self.book.get(job_id)
        if job is not None and spreads(job):
            await self._grow_part(added, job)
            return
        if job is None or self.book.cancel_requester(job_id) is not None:
            log.info("event=replicas_added_skipped job=%s run=%d reason=no_job_or_cancelled", job_id, run)
            return
        await self._launch(added, job, "replicas_added")

    def _ended_here(self, job_id: JobId, run: int) -> bool:
        return self.book.run_ended(job_id, run) or self.is_over(lifecycle.RunKey(job_id, run))

    async def _grow_part(self, added: JobReplicasAdded, job: JobSubmitted) -> None:
        """Open the run's part here (no pods of the run here yet) or grow it, each pod saying how many
        replicas the part holds with it. A part that ended here is not opened again (the book reads the
        job's partition to its end first, so it knows that end even after a restart); one opened after the
        job's cancellation was asked for is reported cancelled, as a placement would be (the scheduler
        waits for every part it opened to end)."""
        job_id, run = added.job_id, added.run
        if not self._ended_here(job_id, run):
            await self.book.catch_up(job_id)  # its end here may be in the jobs topic, not read yet
        if self._ended_here(job_id, run):
            log.debug("event=part_not_reopened job=%s run=%d reason=part_ended_here", job_id, run)
            return
        held = await self._replicas_here(job_id, run)
        requester = self.book.cancel_requester(job_id)
        if requester is not None:
            if not held:
                await self._cancelled_before_pods(job_id, run, requester)
            return  # a part with pods: the cancellation's stop takes every one
        part = len(held | {r.replica for r in added.replicas})
        await self._launch(added, job, "part_grown" if held else "part_opened", part_replicas=part)

    async def _replicas_here(self, job_id: JobId, run: int) -> set[int]:
        """The replica numbers of the run's pods in this cluster, as the API server holds them now (the pod
        watch may not have shown pods this process has just made)."""
        selector = self._selector(job_id, run)
        listing = await self._retrying(lambda: self.api.request("GET", PODS, query={"labelSelector": selector}))
        found = set()
        for pod in listing.get("items") or []:
            ident = lifecycle.identify(pod)
            if ident is not None and ident.key == lifecycle.RunKey(job_id, run):
                found.add(ident.replica)
        return found

    async def _cancelled_before_pods(self, job_id: JobId, run: int, requester: str) -> None:
        message = "cancelled before its pods were created"
        cancelled = JobCancelled(job_id=job_id, cluster=self.cluster, run=run, requester=requester, message=message)
        ident = lifecycle.event_id(self.cluster, lifecycle.RunKey(job_id, run), lifecycle.Transition.CANCELLED)
        await self.reporter.publish_one(cancelled, ident)

    async def _launch(
        self, decided: JobPlaced | JobReplicasAdded, job: JobSubmitted, what: str, *, part_replicas: int | None = None
    ) -> None:
        """Create the pods of the replicas ``decided`` names; a launch that fails fails the run (for a
        spread job: its part here)."""
        job_id, run = decided.job_id, decided.run
        try:
            manifests = pods.render_pods(decided, job, self.options, part_replicas)
            run_services = services.render_services(decided, job, self.options)
            manifests = images.checked(
                manifests, job, self.tenants.images(job.tenant), self.cluster, self.tenant_options
            )
            namespace = await self._namespace(job)
            self._placed.add(job_id)
            for service in run_services:  # before the pods: a replica's peers resolve as soon as it starts
                await self._create_service(service)
            for manifest in manifests:
                await self._create(namespace, manifest)
        except (pods.RenderError, LaunchFailed) as error:
            log.warning("event=launch_failed job=%s run=%d error=%r", job_id, run, str(error))
            await self._failed(decided, str(error))
            if await self.stop(job_id, run, "failed", 0, None):
                await self._retrying(lambda: self.services.remove(job_id, run))  # else stop did
            return
        log.info("event=%s job=%s run=%d pods=%d namespace=%s", what, job_id, run, len(manifests), namespace)

    async def _create_service(self, manifest: Obj) -> None:
        try:
            await self._retrying(lambda: self.services.create(manifest))
        except KubeError as error:
            meta = manifest["metadata"]
            raise LaunchFailed(f"the API server refused service {meta['namespace']}/{meta['name']}: {error}") from error

    async def _create(self, namespace: str, manifest: Obj) -> None:
        path = f"/api/v1/namespaces/{namespace}/pods"
        try:
            await self._retrying(lambda: self.api.request("POST", path, body=manifest))
            self.created += 1
        except KubeError as error:
            if error.status != 409:
                name = manifest["metadata"]["name"]
                raise LaunchFailed(f"the API server refused pod {namespace}/{name}: {error}") from error

    def _selector(self, job_id: JobId, run: int | None) -> str:
        return names.run_selector(self.cluster, job_id, run)

    async def stop(
        self,
        job_id: JobId,
        run: int | None,
        why: str,
        grace_s: int,
        requester: str | None,
        *,
        before_run: int | None = None,
    ) -> int:
        """Annotate and delete the job's pods (of one run, or all, or all runs before ``before_run``); the
        number of pods being stopped."""
        selector = self._selector(job_id, run)
        listing = await self._retrying(lambda: self.api.request("GET", PODS, query={"labelSelector": selector}))
        count = 0
        for pod in listing.get("items") or []:
            meta = pod.get("metadata") or {}
            if (meta.get("annotations") or {}).get(names.ANN_JOB) != job_id:
                continue  # a shortened label shared by another job id
            ident = lifecycle.identify(pod)
            if before_run is not None and (ident is None or ident.key.run >= before_run):
                continue
            if lifecycle.reported_of(pod) & lifecycle.RUN_ENDS and why != "failed":
                continue  # this run has ended already; its pods stay as they are
            await self._stop_pod(pod, why, grace_s, requester)
            count += 1
        if count or before_run is None:
            log.info("event=stop job=%s run=%s why=%s grace_s=%d pods=%d", job_id, run, why, grace_s, count)
        if not count:  # no pod left to end the run by: the pod watcher will not see its end
            await self._retrying(lambda: self.services.remove(job_id, run, before_run=before_run))
        return count

    async def _stop_pod(self, pod: Obj, why: str, grace_s: int, requester: str | None) -> None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        annotations = meta.get("annotations") or {}
        if not annotations.get(names.ANN_STOP):
            changes = {names.ANN_STOP: why, names.ANN_STOP_BY: requester, names.ANN_STOP_GRACE: str(grace_s)}
            if why == "failed":  # the executor reported the failure itself: the pod watcher only cleans up
                changes[names.ANN_REPORTED] = lifecycle.Transition.FAILED.value
            patch = {"metadata": {"annotations": changes}}
            if await self._ignore_missing(lambda: self.api.request("PATCH", path, body=patch, content_type=MERGE)):
                return
        if not meta.get("deletionTimestamp") or grace_s == 0:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace_s}
            await self._ignore_missing(lambda: self.api.request("DELETE", path, body=body))

    async def _ignore_missing(self, call: Callable[[], Awaitable[Obj]]) -> bool:
        """Run the call; True if the object was gone (404)."""
        try:
            await self._retrying(call)
            return False
        except KubeError as error:
            if error.status == 404:
                return True
            raise


MERGE = "application/merge-patch+json"
