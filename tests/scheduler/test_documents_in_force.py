"""What the scheduler decides under comes from the configuration documents applied (issue 20): a
Tenant's weight, cohort and hot-model cap, the Policy's settings, a Quota's lines; a deleted document
puts back what there is without it. Documents reach the scheduler as their events
(``events.catalog.configuration``), as the API publishes them."""

from __future__ import annotations

from typing import Any

from events.catalog.configuration import deletion_of, event_of
from events.catalog.documents import DocumentChange, changes, parse
from events.catalog.types import TenantId
from events.wire.envelope import Envelope
from services.scheduler.core.policy import model as m
from services.scheduler.core.state import SchedulerState

T0 = 1_900_000_000_000


def applied(*documents: dict[str, Any], deleted: bool = False) -> list[Envelope]:
    out = []
    for index, body in enumerate(documents):
        document = parse(body)
        change = DocumentChange(
            kind=document.kind,
            name=document.name,
            generation=index + 1,
            author="ops@example.com",
            changes=changes(None, document.body()),
            deleted=deleted,
        )
        event = deletion_of(document, change) if deleted else event_of(document, change)
        out.append(Envelope(id=f"{document.name}-{index}-{deleted}", time_ms=T0 + index, data=event))
    return out


def doc(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"api_version": "fedsched.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def state_after(*envelopes: Envelope) -> SchedulerState:
    state = SchedulerState()
    for envelope in envelopes:
        state.fold(envelope)
    state.refresh()
    return state


def tenant(state: SchedulerState, name: str) -> m.Tenant | None:
    return next((t for t in state.snapshot(T0 + 10_000).tenants if t.tenant_id == TenantId(name)), None)


TEAM_A = doc("Tenant", "team-a", weight=3, cohort="research", hot_model_cap_milli=4000)
QUOTA = doc("Quota", "team-a-default", tenant="team-a", lines=[{"resource": "gpu", "guaranteed": 8000}])


def test_a_tenant_document_sets_the_weight_cohort_and_hot_model_cap_the_scheduler_decides_with() -> None:
    state = state_after(*applied(doc("Cohort", "research"), TEAM_A))
    expected = m.Tenant(TenantId("team-a"), weight=3, cohort="research", hot_model_cap_milli=4000)
    assert tenant(state, "team-a") == expected


def test_a_deleted_tenant_document_puts_back_the_defaults() -> None:
    state = state_after(*applied(TEAM_A), *applied(TEAM_A, deleted=True))
    assert tenant(state, "team-a") is None  # a tenant no document names: weight 1, no cohort, the policy's cap


def test_a_quota_document_sets_the_queue_lines_and_its_deletion_takes_them_out() -> None:
    state = state_after(*applied(QUOTA))
    found = tenant(state, "team-a")
    assert found is not None and found.quotas == (m.Quota("gpu", 8000, 2**62, ""),)
    state = state_after(*applied(QUOTA), *applied(QUOTA, deleted=True))
    found = tenant(state, "team-a")
    assert found is None or found.quotas == ()


def test_the_policy_document_is_the_policy_in_force_and_its_deletion_the_default() -> None:
    policy = doc("Policy", "default", node_policy="bestfit", preemption=False, cluster_weights={"cost": 9})
    state = state_after(*applied(policy))
    config = state.policy_config()
    assert (config.node_policy, config.preemption, config.cluster_weights.cost) == (m.NodePolicy.BEST_FIT, False, 9)
    assert config.cluster_weights.fit == m.ClusterWeights().fit  # left out: its default
    assert config.version == "default.g1"
    state = state_after(*applied(policy), *applied(policy, deleted=True))
    deleted = state.policy_config()
    assert (deleted.node_policy, deleted.preemption) == (m.PolicyConfig().node_policy, True)
