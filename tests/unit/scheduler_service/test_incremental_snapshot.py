"""The scheduler keeps its snapshot up to date per touched entity; it must equal a rebuild from scratch.

``full_snapshot`` below is the straightforward rebuild (every job, node and ended run, each cycle) that
the incremental one replaced; Hypothesis drives random histories through both, taking snapshots at
random moments so that the incremental caches see every kind of change between two cycles.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from events.catalog.base import Event
from events.catalog.decisions import JobPreemptionRequested
from events.catalog.governance import FindingKind, GovernanceFinding, PolicyConfigured, QuotaLine, QuotaSet
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuHealthReported,
    GpuHealthSample,
    NodeObserved,
    NodeRemoved,
    NpuDevice,
)
from events.catalog.jobs import JobCancelRequested, JobFailed, JobPreempted, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.catalog.types import Health, JobId, ResourceKind, TenantId
from events.wire.envelope import Envelope
from services.scheduler.core.policy import CycleMemo, schedule
from services.scheduler.core.policy import model as m
from services.scheduler.core.policy.usage import history_of
from services.scheduler.core.state import Placement, SchedulerState, core_node_id, job_model
from tests.unit.projections.builders import a_job, a_node, placed

T0 = 1_800_000_000_000
NODES = ("n1", "n2", "n3")
MODELS = {"n1": "A100", "n2": "A100", "n3": "H100"}


def full_snapshot(state: SchedulerState, now_ms: int) -> m.FleetSnapshot:
    """Everything recomputed from the facts (the reference)."""
    running = []
    used_gpu: dict[tuple[str, str], dict[int, int]] = {}
    used_npu: dict[tuple[str, str], set[int]] = {}
    used_cpu: dict[tuple[str, str], tuple[int, int]] = {}
    usage: dict[str, list[m.UsageRecord]] = {}
    pending = []
    for job_id in sorted(state.jobs):
        facts = state.jobs[job_id]
        if facts.spec is None:
            continue
        for run in sorted(facts.ended):
            done = facts.placements.get(run)
            if done is not None:
                milli = sum(len(r.gpu_indices) * r.gpu_milli_each for r in done.replicas)
                span = max(0, facts.ended_at.get(run, 0) - facts.placed_at.get(run, 0))
                usage.setdefault(facts.spec.tenant, []).append(m.UsageRecord(facts.ended_at.get(run, 0), milli * span))
        if facts.pending():
            pending.append(job_model(facts))
        now = facts.running_placement()
        if now is None:
            continue
        job = job_model(facts)
        replicas = tuple(
            m.ReplicaPlacement(
                core_node_id(now.cluster, r.node), tuple(r.gpu_indices), r.gpu_milli_each, tuple(r.npu_indices)
            )
            for r in now.replicas
        )
        run = facts.current_run()
        started = facts.started_at.get(run, facts.placed_at.get(run, facts.submitted_ms))
        stop = facts.stop_requested.get(run)
        for_job = JobId(stop[0]) if stop is not None and stop[0] else None
        running.append(m.RunningJob(job, now.cluster, replicas, started, stop is not None, for_job))
        for r in now.replicas:
            key = (now.cluster, r.node)
            gpus = used_gpu.setdefault(key, {})
            for index in r.gpu_indices:
                gpus[index] = gpus.get(index, 0) + r.gpu_milli_each
            used_npu.setdefault(key, set()).update(r.npu_indices)
            cpu, mem = used_cpu.get(key, (0, 0))
            used_cpu[key] = (cpu + job.cpu_milli, mem + job.memory_mib)
    nodes = []
    for key, facts in sorted(state.nodes.items()):
        seen = facts.observed
        if seen is None or facts.removed_generation >= seen.generation:
            continue
        suspect = now_ms < facts.suspect_until_ms
        gpus = []
        for device in seen.gpus:
            health = facts.gpu_health.get(device.index, device.health.value)
            if suspect and health == "ok":
                health = "degraded"
            free = max(0, 1000 - used_gpu.get(key, {}).get(device.index, 0))
            gpus.append(m.Gpu(device.index, free, m.Health(health), device.model, device.memory_mib))
        npus = tuple(
            m.Npu(
                u.index,
                u.model,
                u.memory_mib,
                u.index not in used_npu.get(key, set()),
                m.Health.DEGRADED if suspect and u.health.value == "ok" else m.Health(u.health.value),
            )
            for u in seen.npus
        )
        cpu, mem = used_cpu.get(key, (0, 0))
        nodes.append(
            m.Node(
                node_id=core_node_id(*key),
                cluster=key[0],
                cpu_milli=seen.cpu_milli,
                memory_mib=seen.memory_mib,
                cpu_free_milli=max(0, seen.cpu_milli - cpu),
                memory_free_mib=max(0, seen.memory_mib - mem),
                gpu_model=seen.gpus[0].model if seen.gpus else "",
                gpu_memory_mib=seen.gpus[0].memory_mib if seen.gpus else 0,
                gpus=tuple(gpus),
                schedulable=seen.schedulable and state.cluster_status.get(key[0], "reachable") == "reachable",
                nvlink_domain=seen.nvlink_domain or "",
                rdma_fabric=seen.rdma_fabric or "",
                npus=npus,
            )
        )
    incremental = state.snapshot(now_ms)
    tenants = tuple(
        m.Tenant(
            tenant_id=t.tenant_id,
            weight=t.weight,
            cohort=t.cohort,
            quotas=t.quotas,
            usage=history_of(usage.get(t.tenant_id, []), state.policy_config().usage_half_life_ms),
        )
        for t in incremental.tenants
    )
    return m.FleetSnapshot(
        now_ms=now_ms,
        clusters=incremental.clusters,
        nodes=tuple(nodes),
        tenants=tenants,
        running=tuple(running),
        pending=tuple(pending),
        preempted_last_hour=_preempted_last_hour(state, now_ms),
    )


def _preempted_last_hour(state: SchedulerState, now_ms: int) -> tuple[tuple[TenantId, int], ...]:
    """Per tenant, its jobs' preemption requests in the hour up to ``now_ms``, of those within the hour
    up to its latest (what the state keeps)."""
    times: dict[str, list[int]] = {}
    for facts in state.jobs.values():
        for _, asked_ms in facts.stop_requested.values():
            if facts.spec is not None and asked_ms >= 0:
                times.setdefault(facts.spec.tenant, []).append(asked_ms)
    window = m.PREEMPTION_RATE_WINDOW_MS
    counts = {
        tenant: sum(1 for t in kept if t > max(kept) - window and now_ms - window < t <= now_ms)
        for tenant, kept in times.items()
    }
    return tuple((TenantId(tenant), n) for tenant, n in sorted(counts.items()) if n)


def _node(node: str, generation: int = 1) -> NodeObserved:
    """A node of 4 GPUs and 2 NPUs."""
    observed = a_node(node=node, gpus=4, generation=generation, model=MODELS[node])
    return observed.model_copy(
        update={"npus": tuple(NpuDevice(index=i, model="Ascend910B", memory_mib=65536) for i in range(2))}
    )


def _job_event(kind: int, job: str, node: str, run: int, gpu: int) -> Event:
    npus = int(job[1:]) % 2  # odd jobs ask an NPU per replica too, and hold one when placed
    if kind == 0:
        submitted = a_job(job, tenant=f"team-{int(job[1:]) % 2}", gpus=1)
        return submitted.model_copy(update={"resources": submitted.resources.model_copy(update={"npus": npus})})
    if kind == 1:
        event = placed(job, node=node, gpus=(gpu,), run=run)
        replica = event.replicas[0].model_copy(update={"npu_indices": (gpu % 2,) if npus else ()})
        return event.model_copy(update={"replicas": (replica,)})
    if kind == 2:
        return JobSucceeded(job_id=job, cluster="c1", run=run)
    if kind == 3:
        return JobPreempted(job_id=job, cluster="c1", run=run)
    if kind == 4:
        return JobFailed(job_id=job, cluster="c1", run=run, reason=ReasonCode.NODE_FAILURE, node=node)
    if kind == 5:  # asked to stop for another job (a later cycle counts its room as coming)
        return JobPreemptionRequested(job_id=job, cycle_id="c-1", cluster="c1", run=run, rule="r", preemptor=f"j{gpu}")
    return JobCancelRequested(job_id=job, requester="someone")


def _fleet_event(kind: int, node: str, gpu: int) -> Event:
    if kind == 0:
        return _node(node, generation=1 + gpu)
    if kind == 1:
        return NodeRemoved(cluster="c1", node=node, generation=1 + gpu, reason=ReasonCode.NODE_DELETED)
    if kind == 2:
        sample = GpuHealthSample(index=gpu, health=Health.FAILED if gpu % 2 else Health.OK, xid_errors=0)
        return GpuHealthReported(cluster="c1", node=node, gpus=(sample,))
    if kind == 3:
        status = ClusterStatus.UNREACHABLE if gpu % 2 else ClusterStatus.REACHABLE
        return ClusterStatusChanged(cluster="c1", status=status, reason=ReasonCode.CLUSTER_UNREACHABLE)
    if kind == 4:
        return QuotaSet(
            tenant="team-0", lines=(QuotaLine(resource=ResourceKind.GPU, guaranteed=gpu * 1000),), set_by="admin"
        )
    if kind == 6:  # another half-life: every tenant's usage history is grown again
        return PolicyConfigured(
            policy="default",
            policy_version=f"v{gpu}",
            document={"usage_half_life_ms": (gpu + 1) * 3_600_000},
            configured_by="admin",
        )
    return GovernanceFinding(
        finding_id=f"f-{node}-{gpu}",
        kind=FindingKind.SUSPECT_NODE,
        rule="suspect-node",
        reason=ReasonCode.SUSPECT_NODE,
        cluster="c1",
        node=node,
        profile_penalty_milli=300,
        observed_ms=T0 + gpu * 1000,
        message="test",
    )


step = st.one_of(
    st.tuples(
        st.just("job"),
        st.integers(0, 6),
        st.integers(0, 5),
        st.sampled_from(NODES),
        st.integers(1, 3),
        st.integers(0, 3),
    ),
    st.tuples(st.just("fleet"), st.integers(0, 6), st.just(0), st.sampled_from(NODES), st.just(0), st.integers(0, 3)),
    st.tuples(st.just("snapshot"), st.integers(0, 5), st.just(0), st.just(""), st.just(0), st.integers(0, 3)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=60))
# Usage recorded under one half-life, then a policy with another (the history is grown again).
@example(
    [
        ("job", 0, 2, "", 0, 0),
        ("job", 1, 2, "n1", 1, 0),
        ("job", 2, 2, "n1", 1, 0),
        ("fleet", 4, 0, "n1", 0, 1),
        ("snapshot", 0, 0, "", 0, 0),
        ("fleet", 6, 0, "n1", 0, 2),
        ("snapshot", 0, 0, "", 0, 0),
    ]
)
# A job placed again on another GPU model between two cycles (its group changes with the model).
@example(
    [
        ("job", 0, 1, "n1", 1, 0),
        ("job", 1, 1, "n1", 1, 0),
        ("snapshot", 0, 0, "", 0, 0),
        ("job", 1, 1, "n3", 2, 0),
        ("snapshot", 0, 0, "", 0, 0),
    ]
)
# A run's end read before its placement: the job is not settled until the placement is in.
@example(
    [
        ("fleet", 4, 0, "n1", 0, 1),
        ("job", 0, 0, "", 0, 0),
        ("job", 2, 0, "", 1, 3),
        ("snapshot", 0, 0, "", 0, 0),
        ("job", 1, 0, "n1", 1, 0),
        ("snapshot", 0, 0, "", 0, 0),
    ]
)
# A second report of a settled run's end, later: the first one stands, settled or not.
@example(
    [
        ("fleet", 4, 0, "n1", 0, 1),
        ("job", 0, 0, "", 0, 0),
        ("job", 1, 0, "n1", 1, 0),
        ("job", 2, 0, "", 1, 0),
        ("snapshot", 0, 0, "", 0, 0),
        ("job", 4, 0, "n1", 1, 3),
        ("snapshot", 0, 0, "", 0, 0),
    ]
)
# A run placed with no placement of the run before it (a history no log holds), then that earlier run's
# end: it is skipped, as the decisions topic never holds it.
@example(
    [
        ("job", 0, 0, "n1", 1, 0),
        ("job", 1, 0, "n1", 2, 0),
        ("job", 2, 0, "n1", 2, 0),
        ("snapshot", 0, 0, "", 0, 0),
        ("job", 2, 0, "n1", 1, 0),
        ("snapshot", 0, 0, "", 0, 0),
    ]
)
# A job that ended for good, then the end of a later run (none was ever placed, none can be): skipped.
@example(
    [
        ("job", 0, 0, "n1", 1, 0),
        ("job", 1, 0, "n1", 1, 0),
        ("job", 2, 0, "n1", 1, 0),
        ("snapshot", 0, 0, "", 0, 0),
        ("job", 2, 0, "n1", 2, 0),
        ("snapshot", 0, 0, "", 0, 0),
    ]
)
def test_the_incremental_snapshot_equals_a_rebuild_at_every_moment(
    steps: list[tuple[str, int, int, str, int, int]],
) -> None:
    # The state as the services keep it (settled jobs dropped) against one that keeps every job's facts,
    # rebuilt from scratch.
    state, reference = SchedulerState(), SchedulerState(keep_settled=True)
    memo = CycleMemo()

    def fold(envelope: Envelope) -> None:
        state.fold(envelope)
        reference.fold(envelope)

    fold(
        Envelope(
            id="c",
            time_ms=T0,
            data=ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"),
        )
    )
    for node in NODES:
        fold(Envelope(id=f"o-{node}", time_ms=T0, data=_node(node)))
    for i, (what, kind, job, node, run, gpu) in enumerate(steps):
        now = T0 + (i + 1) * 60_000 * (1 + gpu)
        if what == "snapshot":
            snapshot = state.snapshot(now)
            assert snapshot == full_snapshot(reference, now)
            assert set(state.jobs) | state.settled == set(reference.jobs)
            assert all(reference.jobs[j].settled() for j in state.settled)
            # A cycle memo carried from cycle to cycle changes nothing of what a cycle decides.
            fresh = CycleMemo()
            config = state.policy_config()
            assert schedule(snapshot, config, memo) == schedule(snapshot, config, fresh)
            assert memo.group_counts() == fresh.group_counts()
            continue
        event = _job_event(kind, f"j{job}", node, run, gpu) if what == "job" else _fleet_event(kind, node, gpu)
        facts = reference.jobs.get(f"j{job}")
        if what == "job" and kind == 1 and facts is not None and facts.terminal and run not in facts.ended:
            # The scheduler never places a job that has ended for good: a placement read after the end
            # is one of a run whose end is in (the two topics' records interleave in any order).
            continue
        if (
            what == "job"
            and kind in (2, 3, 4)
            and facts is not None
            and facts.terminal
            and run > max((*facts.placements, *facts.ended), default=0)
        ):
            # A job ended for good gets no new run, so no end of a later run exists in any log.
            continue
        if what == "job" and kind == 1 and run > 1 and (facts is None or run - 1 not in facts.placements):
            # Runs are placed in turn, on one partition of the decisions topic: run 2's placement comes
            # after run 1's, so no end of run 1 can come for a job whose run 1 was never placed.
            continue
        fold(Envelope(id=f"e{i}", time_ms=now, data=event))
    end = T0 + 10**9
    assert state.snapshot(end) == full_snapshot(reference, end)
    config = state.policy_config()
    assert schedule(state.snapshot(end), config, memo) == schedule(state.snapshot(end), config)
    assert state.open_cancellations() == sorted(
        j for j, f in reference.jobs.items() if f.cancel_requested and not f.terminal
    )


def test_a_what_if_under_another_half_life_gets_the_history_grown_with_it() -> None:
    state = SchedulerState()
    steps = [a_node(node="n1", gpus=4, model="A100"), _fleet_event(4, "n1", 1)]
    steps += [_job_event(0, "j2", "", 0, 0), _job_event(1, "j2", "n1", 1, 0), _job_event(2, "j2", "n1", 1, 0)]
    for i, event in enumerate(steps):
        state.fold(Envelope(id=f"e{i}", time_ms=T0 + i * 60_000, data=event))
    facts = state.jobs["j2"]
    record = m.UsageRecord(facts.ended_at[1], 1000 * (facts.ended_at[1] - facts.placed_at[1]))
    recorded = state.snapshot(T0 + 10 * 60_000)
    assert "j2" in state.settled  # its usage is read from the packed records of settled jobs
    (team,) = recorded.tenants
    assert team.usage.half_life_ms == m.PolicyConfig().usage_half_life_ms and team.usage.epochs
    hour = 3_600_000
    assert state.usage_histories(hour) == {"team-0": history_of([record], hour)}
    # The recorded history under a policy with another half-life is refused, the regrown one taken.
    other = m.PolicyConfig(usage_half_life_ms=hour)
    with pytest.raises(ValueError, match="half-life"):
        schedule(recorded, other)
    regrown = replace(recorded, tenants=(replace(team, usage=state.usage_histories(hour)["team-0"]),))
    assert schedule(regrown, other).decisions == schedule(recorded).decisions


def test_the_state_keeps_what_it_decides_on_not_the_events() -> None:
    """Every job ever submitted stays in the state: a whole ``JobSubmitted`` and ``JobPlaced`` per job
    (scores, explanations, labels) was three times what the state needs of them."""
    state = SchedulerState()
    steps = [a_node(node="n1", gpus=4, model="A100"), _job_event(0, "j1", "", 0, 0), _job_event(1, "j1", "n1", 1, 2)]
    for i, event in enumerate(steps):
        state.fold(Envelope(id=f"e{i}", time_ms=T0 + i, data=event))
    facts = state.jobs["j1"]
    assert type(facts.spec) is m.Job and facts.spec.tenant == "team-1" and facts.spec.submitted_at_ms == T0 + 1
    (placement,) = facts.placements.values()
    assert type(placement) is Placement and placement.cluster == "c1"
    assert [(r.node, tuple(r.gpu_indices)) for r in placement.replicas] == [("n1", (2,))]
    (running,) = state.snapshot(T0 + 10).running
    assert running.job is facts.spec  # not rebuilt per snapshot while nothing about it changes
