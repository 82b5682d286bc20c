"""``fedsched.v1.ConfigService``: configuration documents applied, read and deleted, as kubectl does.

Called by the gRPC server through ``services.api.handlers``. Reads the documents in force from the read
model (``ReadModels.documents``); writes one event per changed document through the ``Publisher``
(``events.catalog.configuration``), then waits, boundedly, until the read model shows them, so that a
``get`` or a second ``apply`` right after sees what this one did.

What an apply checks before anything is published (a refused request changes nothing):
- each document parses (``events.catalog.documents``: the error names the document, field and reason);
- the token covers it: a Tenant, Quota or tenant Budget document its tenant, any other (a Cohort, the
  Policy, a cohort's Budget) every tenant;
- a Budget's timezone exists; a Tenant's or Budget's cohort is a Cohort in force or in the request;
- one Policy is in force at a time (another name is refused until that one is deleted), and one Quota
  document per tenant queue.
A document equal to the one in force (defaults filled in, labels included) is ``unchanged`` and
publishes nothing; the event of a change has an id derived from the document, its generation and
content, so the same apply retried is recognised downstream as one change.
"""

from __future__ import annotations

import asyncio
import json
import time
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from events.catalog.configuration import canonical, deletion_of, event_of, owner
from events.catalog.documents import (
    BudgetSpec,
    Document,
    DocumentChange,
    DocumentError,
    FieldChange,
    Kind,
    PolicySpec,
    QuotaSpec,
    TenantSpec,
    changes,
    parse,
    parse_all,
)
from events.log.publisher import Publisher
from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.typed import DocumentRow
from services.api.auth import Principal, current_principal
from services.api.commands import derived_id
from services.api.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from services.api.handlers import Context
from services.api.pb import config_pb2

MAX_DOCUMENT_BYTES = 256 * 1024
VISIBLE_WITHIN_S = 10.0
"""How long an apply waits for the read model to show what it published."""


@dataclass(frozen=True, slots=True)
class Planned:
    """What one document of a request does."""

    document: Document
    action: str  # created, configured, unchanged, deleted
    generation: int
    changes: tuple[FieldChange, ...]
    event_id: str = ""


class ConfigCommands:
    def __init__(self, publisher: Publisher, reads: ReadModels) -> None:
        self._publisher = publisher
        self._reads = reads

    async def apply(self, principal: Principal, bodies: Sequence[Any], *, dry_run: bool) -> list[Planned]:
        documents = _parsed(bodies)
        for index, document in enumerate(documents):
            _may_configure(principal, document, f"documents[{index}]")
        current = {(row.kind, row.name): row for row in await self._reads.documents(None, deleted=True)}
        _check_against(documents, current)
        planned = [_plan(document, current.get((document.kind.value, document.name))) for document in documents]
        if dry_run:
            return planned
        published = await self._publish([p for p in planned if p.action != "unchanged"], principal, deleting=False)
        ids = {(p.document.kind, p.document.name): p for p in published}
        return [ids.get((p.document.kind, p.document.name), p) for p in planned]

    async def delete(self, principal: Principal, kind_text: str, name: str, *, dry_run: bool) -> Planned:
        kind = _kind(kind_text)
        rows = await self._reads.documents(principal.tenant_scope(), kind.value, name)
        if not rows or rows[0].body is None:
            raise NotFound(f"no {kind.value} document named {name[:128]!r}", field="name")
        document = parse(rows[0].body)
        _may_configure(principal, document, "name")
        if kind is Kind.COHORT:
            members = [r.name for r in await self._reads.documents(None, Kind.TENANT.value) if _cohort_of(r) == name]
            if members:
                raise FailedPrecondition(f"tenants {', '.join(members[:20])} are in cohort {name!r}: change them first")
        generation = rows[0].generation + 1
        planned = Planned(document, "deleted", generation, changes(document.body(), None))
        if not dry_run:
            planned = (await self._publish([planned], principal, deleting=True))[0]
        return planned

    async def get(self, principal: Principal, kind_text: str, name: str) -> list[DocumentRow]:
        kind = _kind(kind_text).value if kind_text else None
        return await self._reads.documents(principal.tenant_scope(), kind, name or None)

    async def _publish(self, planned: Sequence[Planned], principal: Principal, *, deleting: bool) -> list[Planned]:
        envelopes, out = [], []
        for item in planned:
            document = item.document
            change = DocumentChange(
                kind=document.kind,
                name=document.name,
                generation=item.generation,
                author=principal.subject,
                changes=item.changes,
                labels=document.metadata.labels,
                deleted=deleting,
            )
            event = deletion_of(document, change) if deleting else event_of(document, change)
            content = json.dumps(document.body(), sort_keys=True) + ("\x00deleted" if deleting else "")
            event_id = derived_id("cfg", document.kind.value, document.name, str(item.generation), content)
            envelopes.append(self._publisher.envelope(event, id=event_id, tenant=owner(document) or None))
            out.append(Planned(document, item.action, item.generation, item.changes, event_id))
        if envelopes:
            await self._publisher.publish(envelopes)
            await self._visible(out)
        return out

    async def _visible(self, planned: Sequence[Planned]) -> None:
        """Until the read model shows every one of them (bounded: the events are in the log either way)."""
        wanted = {(p.document.kind.value, p.document.name): p.generation for p in planned}
        deadline = time.monotonic() + VISIBLE_WITHIN_S
        while time.monotonic() < deadline:
            rows = {(r.kind, r.name): r.generation for r in await self._reads.documents(None, deleted=True)}
            if all(rows.get(key, 0) >= generation for key, generation in wanted.items()):
                return
            await asyncio.sleep(0.05)  # the projections fold it within a cycle or two


def _parsed(bodies: Sequence[Any]) -> list[Document]:
    try:
        return [canonical(d) for d in parse_all(bodies)]
    except DocumentError as error:
        raise InvalidArgument(f"documents[{error.index}].{error.field}", str(error)) from None


def _kind(text: str) -> Kind:
    if text in Kind._value2member_map_:
        return Kind(text)
    raise InvalidArgument("kind", f"must be one of {', '.join(k.value for k in Kind)}")


def _may_configure(principal: Principal, document: Document, field: str) -> None:
    tenant = owner(document)
    if tenant and not principal.sees(tenant):
        raise PermissionDenied(f"this token does not cover tenant {tenant!r}", field=field)
    if not tenant and not principal.all_tenants:
        raise PermissionDenied(
            f"a {document.kind.value} document concerns every tenant: it needs a token for all of them", field=field
        )


def _check_against(documents: Sequence[Document], current: Mapping[tuple[str, str], DocumentRow]) -> None:
    """The rules across documents (see the module docstring), against those in force and each other."""
    live = {key: row for key, row in current.items() if row.body is not None}
    cohorts = {name for (kind, name) in live if kind == Kind.COHORT.value}
    cohorts |= {d.name for d in documents if d.kind is Kind.COHORT}
    policies = {name for (kind, name) in live if kind == Kind.POLICY.value}
    queues = {_queue_of(row): name for (kind, name), row in live.items() if kind == Kind.QUOTA.value}
    for index, document in enumerate(documents):
        spec, where = document.spec, f"documents[{index}]"
        if isinstance(spec, TenantSpec | BudgetSpec) and spec.cohort is not None and spec.cohort not in cohorts:
            raise InvalidArgument(
                f"{where}.spec.cohort", f"no Cohort named {spec.cohort!r} (apply one first, or with it)"
            )
        if isinstance(spec, BudgetSpec):
            try:
                zoneinfo.ZoneInfo(spec.timezone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise InvalidArgument(f"{where}.spec.timezone", f"no time zone named {spec.timezone!r}") from None
        if isinstance(spec, PolicySpec):
            others = sorted((policies | {d.name for d in documents if d.kind is Kind.POLICY}) - {document.name})
            if others:
                reason = (
                    f"the Policy {others[0]!r} is in force: one Policy at a time (apply under that name, or delete it)"
                )
                raise InvalidArgument(f"{where}.metadata.name", reason)
        if isinstance(spec, QuotaSpec):
            holder = queues.get((spec.tenant, spec.queue))
            if holder is not None and holder != document.name:
                raise InvalidArgument(
                    f"{where}.spec.queue", f"the Quota {holder!r} sets queue {spec.tenant}/{spec.queue} already"
                )
            queues[(spec.tenant, spec.queue)] = document.name


def _plan(document: Document, row: DocumentRow | None) -> Planned:
    before = None if row is None else row.body
    after = document.body()
    found = changes(before, after)
    generation = 0 if row is None else row.generation
    if before is None:
        return Planned(document, "created", generation + 1, found)
    if not found:
        return Planned(document, "unchanged", generation, ())
    return Planned(document, "configured", generation + 1, found)


def _queue_of(row: DocumentRow) -> tuple[str, str]:
    spec = (row.body or {}).get("spec", {})
    return str(spec.get("tenant", "")), str(spec.get("queue", "default"))


def _cohort_of(row: DocumentRow) -> str | None:
    cohort = (row.body or {}).get("spec", {}).get("cohort")
    return cohort if isinstance(cohort, str) else None


# -- the servicer ------------------------------------------------------------------------------------


class ConfigService:
    def __init__(self, commands: ConfigCommands) -> None:
        self._commands = commands

    async def ApplyDocuments(
        self, request: config_pb2.ApplyDocumentsRequest, context: Context
    ) -> config_pb2.ApplyDocumentsResponse:
        bodies = [_json_document(index, text) for index, text in enumerate(request.documents)]
        planned = await self._commands.apply(current_principal(), bodies, dry_run=request.dry_run)
        return config_pb2.ApplyDocumentsResponse(results=[_result(p) for p in planned], dry_run=request.dry_run)

    async def GetDocuments(
        self, request: config_pb2.GetDocumentsRequest, context: Context
    ) -> config_pb2.GetDocumentsResponse:
        rows = await self._commands.get(current_principal(), request.kind, request.name)
        return config_pb2.GetDocumentsResponse(
            documents=[
                config_pb2.StoredDocument(
                    kind=r.kind,
                    name=r.name,
                    generation=r.generation,
                    document=json.dumps(r.body, sort_keys=True),
                    author=r.author,
                    changed_ms=r.changed_ms,
                )
                for r in rows
            ]
        )

    async def DeleteDocument(
        self, request: config_pb2.DeleteDocumentRequest, context: Context
    ) -> config_pb2.DeleteDocumentResponse:
        planned = await self._commands.delete(current_principal(), request.kind, request.name, dry_run=request.dry_run)
        return config_pb2.DeleteDocumentResponse(result=_result(planned))


def _json_document(index: int, text: str) -> Any:
    if len(text.encode()) > MAX_DOCUMENT_BYTES:
        raise InvalidArgument(f"documents[{index}]", f"larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return json.loads(text)
    except ValueError as error:
        raise InvalidArgument(f"documents[{index}]", f"not JSON: {str(error)[:200]}") from None


def _result(planned: Planned) -> config_pb2.DocumentResult:
    return config_pb2.DocumentResult(
        kind=planned.document.kind.value,
        name=planned.document.name,
        action=planned.action,
        generation=planned.generation,
        changes=[config_pb2.FieldChange(path=c.path, before=c.before, after=c.after) for c in planned.changes],
        event_id=planned.event_id,
    )


__all__ = ["ConfigCommands", "ConfigService", "Planned"]
