"""Makes and removes the Services of runs (``services``) in the API server.

Called by the ``executor`` (``create`` before a run's pods; ``remove`` when a launch fails, and when a stop
finds no pod left to end the run by) and by the ``pod_watcher`` (``remove`` once a run has ended, its
end reported or its pods stopped quietly, including stale runs). Calls the API server.

Nothing owns a run's Service (its pods come and go, and a Service owned by a pod would vanish with the
first replica that stops), so it lives until ``remove``. Both calls are idempotent: 409 AlreadyExists
counts as made, 404 NotFound as removed, and a Service is recognised by our labels and the full job id.
"""

from __future__ import annotations

import logging

from connectors.kubernetes import names
from connectors.kubernetes.kubeapi import KubeApi, KubeError, Obj
from events.catalog.types import ClusterId, JobId

log = logging.getLogger("fedsched.connector.kubernetes")
SERVICES = "/api/v1/services"


class ServiceKeeper:
    def __init__(self, api: KubeApi, cluster: ClusterId) -> None:
        self.api = api
        self.cluster = cluster

    async def create(self, manifest: Obj) -> bool:
        """Create one Service; False if it existed already. Raises ``KubeError`` for a refusal."""
        meta = manifest["metadata"]
        try:
            await self.api.request("POST", f"/api/v1/namespaces/{meta['namespace']}/services", body=manifest)
        except KubeError as error:
            if error.status == 409:
                return False
            raise
        job = (meta.get("annotations") or {}).get(names.ANN_JOB)
        log.info("event=service_created service=%s/%s job=%s", meta["namespace"], meta["name"], job)
        return True

    async def runs(self) -> set[tuple[JobId, int]]:
        """The (job, run) of every Service of ours in the cluster, in one list (the pod watcher's start)."""
        selector = (
            f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE},{names.LABEL_CLUSTER}={names.label_value(self.cluster)}"
        )
        listing = await self.api.request("GET", SERVICES, query={"labelSelector": selector})
        found: set[tuple[JobId, int]] = set()
        for service in listing.get("items") or []:
            meta = service.get("metadata") or {}
            job, run = (
                (meta.get("annotations") or {}).get(names.ANN_JOB),
                str((meta.get("labels") or {}).get(names.LABEL_RUN)),
            )
            if job and run.isdigit():
                found.add((JobId(str(job)), int(run)))
        return found

    def _selector(self, job_id: JobId, run: int | None) -> str:
        return names.run_selector(self.cluster, job_id, run)

    async def remove(self, job_id: JobId, run: int | None = None, *, before_run: int | None = None) -> int:
        """Delete the Services of the job's run (or of all its runs, or of those before ``before_run``);
        how many were deleted."""
        listing = await self.api.request("GET", SERVICES, query={"labelSelector": self._selector(job_id, run)})
        count = 0
        for service in listing.get("items") or []:
            meta = service.get("metadata") or {}
            if (meta.get("annotations") or {}).get(names.ANN_JOB) != job_id:
                continue  # a shortened job label shared by another job id
            its_run = str((meta.get("labels") or {}).get(names.LABEL_RUN, ""))
            if before_run is not None and not (its_run.isdigit() and int(its_run) < before_run):
                continue
            try:
                await self.api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/services/{meta['name']}")
                count += 1
            except KubeError as error:
                if error.status != 404:
                    raise
        if count:
            log.info("event=services_removed job=%s run=%s count=%d", job_id, run, count)
        return count
