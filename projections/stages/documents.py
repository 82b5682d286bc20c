"""The configuration documents in force: each ``Tenant``, ``Cohort``, ``Quota``, ``Budget`` and ``Policy``
as last applied through the API, with its generation and author; keyed ``<kind>/<name>``.

Called by the projection hosts. Pure. Reads the events that carry a document (``events.catalog.
configuration.DOCUMENT_EVENTS`` with a ``change``); what ``fedsched get`` shows and what ``apply`` and
``diff`` compare against. A deleted document stays as a row marked deleted (its generation goes on from
there if it is applied again).

Which change is in force: the governance topic has one partition, so every host reads changes in one
order; a change of a lower generation than the one in force, or the same event appended again, changes
nothing (two administrators applying at once make two changes of one generation: the later in the log
wins).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import field

from events.catalog.base import Event
from events.catalog.configuration import DOCUMENT_EVENTS, document_of, key, owner
from events.wire.envelope import Envelope
from projections.stages.core import Applied, Emitted, Input, Silent, evolve, record

STAGE = "documents"


@record
class DocumentView:
    kind: str
    name: str
    generation: int = 0
    body: str = ""
    """The document as JSON (``api_version``, ``kind``, ``metadata``, ``spec``); "" once deleted."""
    tenant: str = ""
    """Whose it is (a Tenant's, a Quota's or a tenant Budget's tenant); "" for the fleet's own."""
    author: str = ""
    changed_ms: int = 0
    deleted: bool = False
    event_id: str = ""
    applied: Applied = field(default_factory=Applied)


class DocumentStage(Silent[DocumentView]):
    name = STAGE
    event_types = DOCUMENT_EVENTS

    def keys(self, envelope: Envelope) -> Sequence[str]:
        change = getattr(envelope.data, "change", None)
        return () if change is None else (key(change.kind, change.name),)

    def reduce(self, entity: DocumentView | None, item: Input) -> tuple[DocumentView | None, list[Emitted]]:
        kind, _, name = item.key.partition("/")
        view = entity or DocumentView(kind, name)
        event = item.item
        found = document_of(event) if isinstance(event, Event) and not view.applied.seen(item) else None
        if found is None:
            return entity, []
        document, change = found
        if change.generation < view.generation or item.envelope_id == view.event_id:
            return entity, []
        body = "" if document is None else json.dumps(document.body(), sort_keys=True, separators=(",", ":"))
        view = evolve(
            view,
            generation=change.generation,
            body=body,
            tenant=view.tenant if document is None else owner(document),
            author=change.author,
            changed_ms=item.time_ms,
            deleted=change.deleted,
            event_id=item.envelope_id,
            applied=view.applied.after(item),
        )
        return view, []


__all__ = ["STAGE", "DocumentStage", "DocumentView"]
