"""Configuration documents (issue 20): parsed with errors that name the document, the field and the
reason; their differences recorded field by field; and carried by their events both ways, through the
wire, unchanged."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.configuration import canonical, deletion_of, document_of, event_of, owner
from events.catalog.documents import (
    SPECS,
    Document,
    DocumentChange,
    DocumentError,
    Kind,
    Metadata,
    PolicySpec,
    changes,
    parse,
    parse_all,
)
from events.wire import codec
from events.wire.envelope import Envelope
from services.scheduler.core.policy.model import PolicyConfig
from tests.unit.events.catalog_strategies import fixup_for, strategy_for

pytestmark = pytest.mark.timeout(120)


def doc(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"api_version": "fedsched.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


THE_ISSUES_BUDGET = {
    "api_version": "fedsched.io/v1",
    "kind": "Budget",
    "metadata": {"name": "team-a-monthly"},
    "spec": {"tenant": "team-a", "window": "month", "timezone": "UTC", "gpu_hours": 500, "mode": "hard"},
}


def test_the_minimal_budget_of_the_issue_parses_as_written() -> None:
    budget = parse(THE_ISSUES_BUDGET)
    assert budget.kind is Kind.BUDGET and budget.name == "team-a-monthly"
    assert budget.spec_json() == {**THE_ISSUES_BUDGET["spec"], "cohort": None}


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"kind": "Tenant", "metadata": {"name": "a"}, "spec": {}}, "api_version", "must be fedsched.io/v1"),
        ({**doc("Team", "a")}, "kind", "must be one of Tenant, Cohort, Quota, Budget, Policy"),
        ({**doc("Tenant", "a"), "status": {}}, "status", "unknown field"),
        (doc("Tenant", "Team A"), "metadata.name", "should match pattern"),
        (doc("Tenant", "a", weight=0), "spec.weight", "greater than or equal to 1"),
        (doc("Tenant", "a", wieght=2), "spec.wieght", "Extra inputs are not permitted"),
        (doc("Policy", "p", preemption="false"), "spec.preemption", "valid boolean"),
        (doc("Policy", "p", usage_half_life_ms=5), "spec", "at least 60000 ms"),
        (doc("Budget", "b", window="day", gpu_hours=5), "spec", "exactly one of tenant and cohort"),
        (doc("Budget", "b", tenant="t", window="year", gpu_hours=5), "spec.window", "'day', 'week' or 'month'"),
        (
            doc("Quota", "q", tenant="t", lines=[{"resource": "gpu", "guaranteed": 8000, "limit": 4000}]),
            "spec.lines.0",
            "limit is less than guaranteed",
        ),
    ],
)
def test_a_refused_document_names_itself_the_field_and_the_reason(body: Any, field: str, reason: str) -> None:
    with pytest.raises(DocumentError) as refused:
        parse_all([doc("Cohort", "fine"), body])
    error = refused.value
    assert error.index == 1 and error.field == field and reason in error.reason, str(error)
    assert str(error).startswith("document 2 (")


def test_the_same_document_twice_in_one_request_is_refused() -> None:
    with pytest.raises(DocumentError, match=r"document 2 \(Tenant 'a'\): metadata.name: given twice"):
        parse_all([doc("Tenant", "a"), doc("Tenant", "a", weight=2)])


def test_a_change_is_recorded_field_by_field_and_nothing_for_the_same_spec() -> None:
    before = parse(doc("Tenant", "a", weight=1)).body()
    after = parse(doc("Tenant", "a", weight=3, cohort="research")).body()
    found = changes(before, after)
    assert [(c.path, c.before, c.after) for c in found] == [
        ("spec.cohort", "null", '"research"'),
        ("spec.weight", "1", "3"),
    ]
    assert changes(after, after) == ()
    created = changes(None, after)
    assert all(c.before is None for c in created) and {c.path for c in created} >= {"spec.weight", "metadata.name"}


def test_the_policy_spec_has_every_setting_of_the_schedulers_policy_with_its_default() -> None:
    # The API validates a Policy with the catalogue's spec, the scheduler reads it as its PolicyConfig.
    config = PolicyConfig()
    spec = PolicySpec().model_dump(mode="json")
    fields = {f.name for f in dataclasses.fields(config)} - {"version"}
    assert set(spec) == fields
    assert spec["node_policy"] == config.node_policy.value
    assert spec["cluster_weights"] == dataclasses.asdict(config.cluster_weights)
    assert spec["preemption_classes"] == {p.value: dataclasses.asdict(r) for p, r in config.preemption_classes}
    assert spec["retry_classes"] == {p.value: dataclasses.asdict(r) for p, r in config.retry_classes}
    for name in fields - {"node_policy", "cluster_weights", "typical_shapes", "preemption_classes", "retry_classes"}:
        assert spec[name] == getattr(config, name), name


def _documents() -> st.SearchStrategy[Document]:
    def build(kind: Kind) -> st.SearchStrategy[Document]:
        spec_cls = SPECS[kind]
        return st.builds(
            lambda meta, spec: canonical(Document(api_version="fedsched.io/v1", kind=kind, metadata=meta, spec=spec)),
            strategy_for(Metadata),
            strategy_for(spec_cls),
        )

    return st.sampled_from(list(Kind)).flatmap(build)


def _change(document: Document, deleted: bool = False) -> DocumentChange:
    return DocumentChange(
        kind=document.kind,
        name=document.name,
        generation=4,
        author="ops@example.com",
        labels=document.metadata.labels,
        deleted=deleted,
        changes=changes(None, document.body()),
    )


def _through_the_wire(event: Any) -> Any:
    wire = codec.encode(Envelope(id="e-1", time_ms=1, data=event))
    return codec.decode(wire.headers, wire.value).data


@settings(max_examples=400, deadline=None)
@given(_documents())
def test_a_document_comes_back_from_its_event_through_the_wire_unchanged(document: Document) -> None:
    change = _change(document)
    event = _through_the_wire(event_of(document, change))
    found = document_of(event)
    assert found is not None
    assert found[0] == document and found[1] == change
    assert owner(found[0]) == owner(document)


@settings(max_examples=100, deadline=None)
@given(_documents())
def test_a_deletion_is_a_change_without_a_document(document: Document) -> None:
    change = _change(document, deleted=True)
    found = document_of(_through_the_wire(deletion_of(document, change)))
    assert found == (None, change)


def test_the_strategies_keep_the_specs_rules() -> None:
    assert fixup_for(SPECS[Kind.BUDGET]) is not None and fixup_for(SPECS[Kind.POLICY]) is not None
