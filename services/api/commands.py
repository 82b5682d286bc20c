"""The write side shared by the gRPC API and the intake: submit and cancel jobs.

Called by the servicers (``services.api.jobs``, ``services.api.audit``) and by ``services.api.intake``,
so a request is validated and authorised by the same code whichever way it came; its helpers (derived
ids, ``authorize_on``) by the other commands too (``quota_commands``, ``documents``). Calls the catalogue
(validation), ``services.api.auth`` (claim checks), the API store (idempotency) and ``Publisher``
(``JobSubmitted`` and ``JobCancelRequested`` to the jobs topic).

Ids are derived, never drawn: a job id from its tenant and client request id, an event id from what it
records, so a retried request or a re-published event is recognisable as the same one downstream.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from events.catalog.documents import Kind
from events.catalog.images import template_images
from events.catalog.jobs import JobCancelRequested, JobSubmitted
from events.catalog.lifecycle import FINAL_STATUSES
from events.log.publisher import Publisher
from projections.readmodel.reader import ReadModels
from services.api import templates, validation
from services.api.auth import Action, Principal, authorize
from services.api.errors import FailedPrecondition, InvalidArgument, NotFound
from services.api.store import ApiStore, Submission


def derived_id(prefix: str, *parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]
    return f"{prefix}-{digest}"


def job_id_for(tenant: str, client_request_id: str) -> str:
    """The job id of a submission: the same tenant and request id always give the same job."""
    return derived_id("j", tenant, client_request_id)


def new_request_id() -> str:
    return "srv-" + uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class Submitted:
    job_id: str
    created: bool
    client_request_id: str
    event: JobSubmitted


@dataclass(frozen=True, slots=True)
class JobRef:
    """What a command needs to know about an existing job: its tenant and its status."""

    job_id: str
    tenant: str
    status: str


TENANT_DEFAULTS_TTL_S = 2.0
"""How long a tenant's settings (default priority class, image policy) are remembered: a Tenant
document's change reaches new submissions within this long."""


class JobCommands:
    def __init__(self, publisher: Publisher, store: ApiStore, reads: ReadModels) -> None:
        self._publisher = publisher
        self._store = store
        self._reads = reads
        self._tenants: dict[str, tuple[float, Mapping[str, Any]]] = {}

    async def _tenant_spec(self, tenant: str) -> Mapping[str, Any]:
        """The spec of the tenant's Tenant document as the read model holds it ({} without one)."""
        now = time.monotonic()
        known = self._tenants.get(tenant)
        if known is not None and now - known[0] < TENANT_DEFAULTS_TTL_S:
            return known[1]
        rows = await self._reads.documents(None, Kind.TENANT.value, tenant)
        spec = (rows[0].body or {}).get("spec", {}) if rows else {}
        if len(self._tenants) > 10_000:  # bounded: tenants are few, but names come from requests
            self._tenants.clear()
        self._tenants[tenant] = (now, spec if isinstance(spec, Mapping) else {})
        return self._tenants[tenant][1]

    async def default_priority_class(self, tenant: str) -> str | None:
        """The priority class a job of ``tenant`` that names none gets: its Tenant document's
        ``default_priority_class`` (None: the catalogue's default, standard)."""
        found = (await self._tenant_spec(tenant)).get("default_priority_class")
        return found if isinstance(found, str) else None

    async def _images_allowed(self, event: JobSubmitted) -> None:
        """Refuse a template naming an image its tenant's ``images.registries`` does not allow (or that is
        no image reference at all). A template naming no image runs the connector's default image, which
        the connector checks; so does every connector against its cluster's own registries."""
        if not template_images(event.template):
            return
        images = (await self._tenant_spec(event.tenant)).get("images")
        registries = images.get("registries") if isinstance(images, Mapping) else None
        validation.images_allowed(event, registries if isinstance(registries, list) else None)

    async def submit(
        self,
        principal: Principal,
        spec: Mapping[str, Any],
        client_request_id: str | None,
        *,
        causation_id: str | None = None,
    ) -> Submitted:
        """Validate, authorise, record once and publish a ``JobSubmitted``.

        ``spec`` is the JSON body of a ``JobSubmitted`` without ``job_id``, ``client_request_id`` and
        ``submitted_by``, which the API sets. Raises ``PermissionDenied``, ``InvalidArgument`` naming the
        field, or ``AlreadyExists`` (the request id was used for another spec)."""
        tenant = spec.get("tenant")
        authorize_on(principal, Action.SUBMIT_JOB, tenant)
        request_id = client_request_id or new_request_id()
        body = dict(spec)
        if "priority_class" not in body and isinstance(tenant, str) and validation.is_identifier(tenant):
            default = await self.default_priority_class(tenant)  # the tenant's, recorded in the event
            if default is not None:
                body["priority_class"] = default
        body.pop("job_id", None)
        body.update(
            job_id=job_id_for(str(tenant), request_id),
            client_request_id=request_id,
            submitted_by=principal.subject,
        )
        event = validation.spreads_as_it_can(validation.asks_for_something(validation.event_from(JobSubmitted, body)))
        templates.fits_its_template(event)
        await self._images_allowed(event)
        await self._fleet_can_hold(event)
        envelope = self._publisher.envelope(
            event,
            id=f"submit-{event.job_id}",
            tenant=event.tenant,
            correlation_id=request_id,
            causation_id=causation_id,
        )
        entry = Submission(
            job_id=event.job_id,
            tenant=event.tenant,
            client_request_id=request_id,
            spec_sha256=spec_digest(event),
            event_json=event.model_dump_json(),
            submitted_by=principal.subject,
            created_ms=envelope.time_ms,
        )
        job_id, created = await self._store.submit(entry, lambda: self._publisher.publish([envelope]))
        return Submitted(job_id, created, request_id, event)

    async def _fleet_can_hold(self, event: JobSubmitted) -> None:
        """Refuse a replica asking GPUs and NPUs when no node of the known fleet has both kinds: it could
        never start, and the fix is the submitter's (one kind per replica, or two jobs). Read only for
        such a replica; a fleet not known yet (no node reported) refuses nothing, and the scheduler then
        explains the wait (``GpuModelUnavailable``, category misconfigured: no node has both GPUs and
        NPUs). The shapes nodes could hold one day (more GPUs than any node has, a model no node has)
        stay accepted with a warning (``services.api.jobs.shape_warnings``): fleets grow, and a rejected
        job cannot wait for them."""
        r = event.resources
        if not (r.npus and (r.gpus or r.gpu_milli)):
            return
        known, both = await self._reads.accelerators()
        if known and not both:
            gpus = f"{r.gpus} GPU{'s' if r.gpus > 1 else ''}" if r.gpus else f"{r.gpu_milli}m of a GPU"
            npus = f"{r.npus} NPU{'s' if r.npus > 1 else ''}"
            raise InvalidArgument(
                "resources.npus",
                f"asks {gpus} and {npus} per replica, and no node of the fleet has both GPUs and NPUs: "
                "ask one kind per replica, or submit one job for each",
            )

    async def find(self, principal: Principal, job_id: str) -> JobRef:
        """The job if the principal may see it; ``NotFound`` otherwise (another tenant's job included)."""
        row = await self._reads.job(job_id)
        if row is not None and not row.orphan:
            ref = JobRef(job_id, row.tenant, row.status)
        else:
            entry = await self._store.submission(job_id)
            if entry is None:
                raise NotFound(f"no job {job_id}", field="job_id")
            ref = JobRef(job_id, entry.tenant, "submitted")
        if not principal.sees(ref.tenant):
            raise NotFound(f"no job {job_id}", field="job_id")
        return ref

    async def cancel(
        self,
        principal: Principal,
        job_id: str,
        reason: str,
        client_request_id: str | None,
        *,
        causation_id: str | None = None,
    ) -> JobRef:
        job_id = validation.identifier("job_id", job_id)
        ref = await self.find(principal, job_id)
        authorize(principal, Action.CANCEL_JOB, ref.tenant)
        if ref.status in FINAL_STATUSES:
            raise FailedPrecondition(f"job {job_id} has already ended ({ref.status})", field="job_id")
        body = {
            "job_id": job_id,
            "requester": principal.subject,
            "reason": reason,
            "client_request_id": client_request_id,
        }
        event = validation.event_from(JobCancelRequested, body, whole="request")
        request_key = client_request_id or new_request_id()
        envelope = self._publisher.envelope(
            event,
            id=derived_id("cancel", job_id, request_key),
            tenant=ref.tenant,
            correlation_id=client_request_id,
            causation_id=causation_id,
        )
        await self._publisher.publish([envelope])
        return ref


def authorize_on(principal: Principal, action: Action, tenant: object) -> None:
    """Authorise an action on the tenant a request names. A missing or malformed tenant is left to
    validation (which names the field) once the role allows the action at all."""
    authorize(principal, action, tenant if isinstance(tenant, str) and tenant else None)


def spec_digest(event: JobSubmitted) -> str:
    """What makes two submissions the same: every field but who sent it."""
    return hashlib.sha256(event.model_dump_json(exclude={"submitted_by"}).encode()).hexdigest()


__all__ = ["JobCommands", "JobRef", "Submitted", "authorize_on", "derived_id", "job_id_for", "new_request_id"]
