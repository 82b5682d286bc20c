"""Configuration documents and the events that carry them, both ways.

Called by the API (a document applied or deleted becomes one event, ``event_of`` and ``deletion_of``),
by the documents projection (``document_of``: what ``fedsched get`` shows) and by the tests. Pure.

Each kind has its event (``events.catalog.governance``): ``Tenant`` -> ``TenantRegistered``, ``Cohort``
-> ``CohortConfigured``, ``Quota`` -> ``QuotaSet``, ``Budget`` -> ``BudgetSet``, ``Policy`` ->
``PolicyConfigured`` (its document is the whole spec, defaults included, so a later release's new
defaults never change a policy already in force). The event's ``change`` says which document, its
generation and author, what changed, its labels and whether it was deleted; a deletion carries the
kind's settings without the document (defaults, no quota lines, an empty policy).
"""

from __future__ import annotations

import json

from events.catalog.base import Event
from events.catalog.documents import (
    API_VERSION,
    BudgetSpec,
    CohortSpec,
    Document,
    DocumentChange,
    Kind,
    Metadata,
    PolicySpec,
    QuotaSpec,
    TenantSpec,
)
from events.catalog.governance import BudgetSet, CohortConfigured, PolicyConfigured, QuotaSet, TenantRegistered
from events.catalog.types import QueueId, TenantId

DOCUMENT_EVENTS: tuple[type[Event], ...] = (TenantRegistered, CohortConfigured, QuotaSet, BudgetSet, PolicyConfigured)
"""The events that may carry a document (a ``QuotaSet`` of a grant does not)."""


def policy_version(name: str, generation: int) -> str:
    """The policy version a ``Policy`` document's generation is recorded under (cycles name it)."""
    return f"{name}.g{generation}"


def event_of(document: Document, change: DocumentChange) -> Event:
    """The one event that puts ``document`` in force, recording ``change``."""
    spec, name = document.spec, document.name
    if isinstance(spec, TenantSpec):
        return TenantRegistered(
            tenant=TenantId(name),
            display_name=spec.display_name or name,
            cohort=spec.cohort,
            weight=spec.weight,
            labels=document.metadata.labels,
            hot_model_cap_milli=spec.hot_model_cap_milli,
            default_priority_class=spec.default_priority_class,
            images=spec.images,
            change=change,
        )
    if isinstance(spec, CohortSpec):
        return CohortConfigured(
            cohort=name, display_name=spec.display_name or name, description=spec.description, change=change
        )
    if isinstance(spec, QuotaSpec):
        return QuotaSet(tenant=spec.tenant, queue=spec.queue, lines=spec.lines, set_by=change.author, change=change)
    if isinstance(spec, BudgetSpec):
        return BudgetSet(budget=name, spec=spec, change=change)
    return PolicyConfigured(
        policy=name,
        policy_version=policy_version(name, change.generation),
        document=document.spec_json(),
        configured_by=change.author,
        change=change,
    )


def deletion_of(document: Document, change: DocumentChange) -> Event:
    """The one event that takes ``document`` (as in force) out: its kind's settings without it."""
    spec, name = document.spec, document.name
    if isinstance(spec, TenantSpec):
        return TenantRegistered(tenant=TenantId(name), display_name=name, change=change)
    if isinstance(spec, CohortSpec):
        return CohortConfigured(cohort=name, display_name=name, change=change)
    if isinstance(spec, QuotaSpec):
        return QuotaSet(tenant=spec.tenant, queue=spec.queue, lines=(), set_by=change.author, change=change)
    if isinstance(spec, BudgetSpec):
        return BudgetSet(budget=name, spec=spec, change=change)
    return PolicyConfigured(
        policy=name,
        policy_version=policy_version(name, change.generation),
        document={},
        configured_by=change.author,
        change=change,
    )


def document_of(event: Event) -> tuple[Document | None, DocumentChange] | None:
    """The document an event puts in force (``None`` with the change when it deletes one); ``None`` for
    an event that carries no document."""
    change = getattr(event, "change", None)
    if not isinstance(change, DocumentChange):
        return None
    if change.deleted:
        return None, change
    metadata = Metadata(name=change.name, labels=change.labels)
    spec: TenantSpec | CohortSpec | QuotaSpec | BudgetSpec | PolicySpec
    if isinstance(event, TenantRegistered):
        spec = TenantSpec(
            display_name=None if event.display_name == event.tenant else event.display_name,
            cohort=event.cohort,
            weight=event.weight,
            hot_model_cap_milli=event.hot_model_cap_milli,
            default_priority_class=event.default_priority_class,
            images=event.images,
        )
    elif isinstance(event, CohortConfigured):
        spec = CohortSpec(
            display_name=None if event.display_name == event.cohort else event.display_name,
            description=event.description,
        )
    elif isinstance(event, QuotaSet):
        spec = QuotaSpec(tenant=event.tenant, queue=QueueId(event.queue), lines=event.lines)
    elif isinstance(event, BudgetSet):
        spec = event.spec
    elif isinstance(event, PolicyConfigured):
        spec = PolicySpec.model_validate_json(json.dumps(event.document))
    else:
        return None
    return Document(api_version=API_VERSION, kind=change.kind, metadata=metadata, spec=spec), change


def canonical(document: Document) -> Document:
    """The document as ``document_of`` gives it back: a display name equal to the name is left out."""
    spec = document.spec
    if isinstance(spec, TenantSpec | CohortSpec) and spec.display_name == document.name:
        return document.model_copy(update={"spec": spec.model_copy(update={"display_name": None})})
    return document


def owner(document: Document) -> str:
    """The tenant whose document it is (what a token's tenants must include to see it); "" for the
    fleet's own (cohorts, the policy, a cohort's budget)."""
    spec = document.spec
    if isinstance(spec, TenantSpec):
        return document.name
    if isinstance(spec, QuotaSpec):
        return spec.tenant
    if isinstance(spec, BudgetSpec):
        return spec.tenant or ""
    return ""


def key(kind: Kind | str, name: str) -> str:
    """The documents projection's key of a document."""
    return f"{Kind(kind).value}/{name}"


__all__ = [
    "DOCUMENT_EVENTS",
    "canonical",
    "deletion_of",
    "document_of",
    "event_of",
    "key",
    "owner",
    "policy_version",
]
