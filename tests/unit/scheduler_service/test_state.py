"""The scheduler's folded state: order-independent, and it honours governance's suspect-node findings."""

from __future__ import annotations

from events.catalog.decisions import JobPlaced, JobPreemptionRequested
from events.catalog.governance import FindingKind, GovernanceFinding, PolicyConfigured
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobPreempted, PriorityClass
from events.catalog.reasons import ReasonCode
from events.wire.envelope import Envelope
from services.scheduler.core.outputs import decision_events
from services.scheduler.core.policy import Place, schedule
from services.scheduler.core.state import SUSPECT_FOR_MS, SchedulerState
from tests.unit.projections.builders import a_job, a_node, placed

T0 = 1_800_000_000_000


def fleet_with_a_suspect(observed_ms: int) -> SchedulerState:
    state = SchedulerState()
    events = [
        ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"),
        a_node(node="n1", gpus=8),
        a_node(node="n2", gpus=8),
        GovernanceFinding(
            finding_id="suspect-n1",
            kind=FindingKind.SUSPECT_NODE,
            rule="suspect-node",
            reason=ReasonCode.SUSPECT_NODE,
            cluster="c1",
            node="n1",
            profile_penalty_milli=300,
            observed_ms=observed_ms,
            message="3 jobs failed on n1",
        ),
        a_job("j1", gpus=1),
    ]
    for i, event in enumerate(events):
        state.fold(Envelope(id=f"e{i}", time_ms=T0 + i, data=event))
    return state


def test_a_suspect_node_counts_as_degraded_and_work_goes_elsewhere() -> None:
    state = fleet_with_a_suspect(T0)
    snapshot = state.snapshot(T0 + 1000)
    health = {n.node_id: {g.health.value for g in n.gpus} for n in snapshot.nodes}
    assert health == {"c1/n1": {"degraded"}, "c1/n2": {"ok"}}
    placed = [d for d in schedule(snapshot, state.policy_config()).decisions if isinstance(d, Place)]
    assert [p.replicas[0].node_id for p in placed] == ["c1/n2"]
    assert decision_events(state, schedule(snapshot, state.policy_config()), 0)[0].type == "io.fedsched.JobPlaced"


def test_the_suspicion_lapses_after_its_period() -> None:
    state = fleet_with_a_suspect(T0)
    snapshot = state.snapshot(T0 + SUSPECT_FOR_MS + 1)
    assert {g.health.value for n in snapshot.nodes for g in n.gpus} == {"ok"}
    # With nothing between them, the stable order picks n1: the suspicion above is what moved the job.
    placed = [d for d in schedule(snapshot, state.policy_config()).decisions if isinstance(d, Place)]
    assert [p.replicas[0].node_id for p in placed] == ["c1/n1"]


def two_clusters_with(*events: object) -> SchedulerState:
    """A state folded from two registered clusters, c1 and c2, then ``events``."""
    state = SchedulerState()
    registered = [
        ClusterRegistered(cluster=c, kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR")
        for c in ("c1", "c2")
    ]
    for i, event in enumerate([*registered, *events]):
        state.fold(Envelope(id=f"e{i}", time_ms=T0 + i, data=event))  # type: ignore[arg-type]
    return state


def test_nodes_of_the_same_name_in_two_clusters_are_two_nodes() -> None:
    state = two_clusters_with(
        a_node(cluster="c1", node="gpu-node-1", gpus=1),
        a_node(cluster="c2", node="gpu-node-1", gpus=1),
        a_job("j1", gpus=1),
        a_job("j2", gpus=1),
    )
    result = schedule(state.snapshot(T0 + 1000), state.policy_config())
    placed = [e.data for e in decision_events(state, result, 0) if e.type == "io.fedsched.JobPlaced"]
    assert sorted((p.cluster, p.replicas[0].node) for p in placed) == [("c1", "gpu-node-1"), ("c2", "gpu-node-1")]


def test_a_placement_between_equal_clusters_says_what_decided() -> None:
    state = two_clusters_with(
        a_node(cluster="c1", node="n1", gpus=8), a_node(cluster="c2", node="n2", gpus=8), a_job("j1", gpus=2)
    )
    [placed] = decision_events(state, schedule(state.snapshot(T0 + 1000), state.policy_config()), 0)
    assert placed.data.cluster == "c1"  # type: ignore[attr-defined]
    assert "a tie decided by the stable cluster order (c1 before c2)" in placed.data.explanation  # type: ignore[attr-defined]


def test_a_placement_names_the_jobs_stopped_to_make_room_for_it() -> None:
    low = a_job("low", gpus=8).model_copy(update={"priority_class": PriorityClass.BEST_EFFORT, "preemptible": True})
    urgent = a_job("urgent", gpus=8).model_copy(update={"priority_class": PriorityClass.CRITICAL_TRAINING})
    state = two_clusters_with(a_node(cluster="c1", node="n1", gpus=8), low, placed("low", gpus=tuple(range(8))), urgent)
    first = decision_events(state, schedule(state.snapshot(T0 + 1000), state.policy_config()), 0)
    asked = [e.data for e in first if isinstance(e.data, JobPreemptionRequested)]
    assert [(a.job_id, a.preemptor) for a in asked] == [("low", "urgent")]
    for envelope in [*first, Envelope(id="stopped", time_ms=T0 + 2000, data=JobPreempted(job_id="low", cluster="c1"))]:
        state.fold(envelope)
    second = decision_events(state, schedule(state.snapshot(T0 + 3000), state.policy_config()), 1)
    [again] = [e.data for e in second if isinstance(e.data, JobPlaced) and e.data.job_id == "urgent"]
    assert again.victims == ("low",)
    for envelope in second:
        state.fold(envelope)
    assert state.jobs["urgent"].victims == ()  # its next run names only what is stopped for that one


def test_a_victim_gets_its_class_grace_period_and_a_later_cycle_waits_for_it_asking_nobody_else() -> None:
    policy = PolicyConfigured(
        policy="default",
        policy_version="p2",
        document={"preemption_classes": {"best_effort": {"grace_period_s": 300}}},
        configured_by="ops@example.com",
    )
    low = a_job("low", gpus=8).model_copy(update={"priority_class": PriorityClass.BEST_EFFORT, "preemptible": True})
    other = a_job("other", gpus=8).model_copy(update={"priority_class": PriorityClass.BEST_EFFORT})
    urgent = a_job("urgent", gpus=8).model_copy(update={"priority_class": PriorityClass.CRITICAL_TRAINING})
    state = two_clusters_with(
        policy,
        a_node(cluster="c1", node="n1", gpus=8),
        a_node(cluster="c1", node="n2", gpus=8),
        low,
        placed("low", node="n1", gpus=tuple(range(8))),
        other,
        placed("other", node="n2", gpus=tuple(range(8))),
        urgent,
    )
    first = decision_events(state, schedule(state.snapshot(T0 + 1000), state.policy_config()), 0)
    [asked] = [e.data for e in first if isinstance(e.data, JobPreemptionRequested)]
    assert asked.grace_period_s == 300 and "it has 300 s to stop" in asked.message
    for envelope in first:
        state.fold(envelope)
    # The victim checkpoints for up to 5 minutes; meanwhile the next cycles ask nobody else.
    later = decision_events(state, schedule(state.snapshot(T0 + 61_000), state.policy_config()), 1)
    assert not [e for e in later if isinstance(e.data, JobPreemptionRequested)]
    running = {r.job.job_id: r for r in state.snapshot(T0 + 61_000).running}
    assert running[asked.job_id].stopping and running[asked.job_id].stopping_for == "urgent"
