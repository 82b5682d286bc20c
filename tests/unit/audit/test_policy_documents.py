"""``audit whatif --policy`` and ``audit at`` speak the Policy document format of ``fedsched apply``."""

from __future__ import annotations

import pytest

from events.catalog.configuration import event_of
from events.catalog.documents import DocumentChange, PolicySpec, parse
from events.wire.envelope import Envelope
from services.cli.audit_cmd import policy_in_force, policy_settings
from services.scheduler.core.state import SchedulerState, policy_from_document

pytestmark = pytest.mark.timeout(30)

POLICY = {
    "api_version": "fedsched.io/v1",
    "kind": "Policy",
    "metadata": {"name": "default"},
    "spec": {"node_policy": "bestfit", "backfill": False},
}


def test_whatif_reads_a_policy_document_and_the_bare_settings_alike() -> None:
    from_document = policy_from_document("w", policy_settings(POLICY))
    from_settings = policy_from_document("w", policy_settings({"node_policy": "bestfit", "backfill": False}))
    assert from_document == from_settings and from_document.backfill is False


def test_whatif_refuses_another_kind_or_a_bad_setting_naming_it() -> None:
    with pytest.raises(ValueError, match="a Tenant document, not a Policy"):
        policy_settings({**POLICY, "kind": "Tenant", "spec": {}})
    with pytest.raises(ValueError, match=r"spec.backfill"):
        policy_settings({**POLICY, "spec": {"backfill": "no"}})


def test_audit_at_shows_the_policy_in_force_as_a_document_that_applies_as_it_is() -> None:
    state = SchedulerState()
    assert policy_in_force(state)["spec"] == PolicySpec().model_dump(mode="json")  # none applied: defaults
    document = parse(POLICY)
    change = DocumentChange(kind=document.kind, name="default", generation=3, author="ops")
    state.fold(Envelope(id="p", time_ms=1, data=event_of(document, change)))
    shown = policy_in_force(state)
    assert parse(shown).spec == document.spec
    assert shown["metadata"]["labels"] == {"version": "default.g3"}
