"""The fold: one handler per event type, each changing the facts of the one entity the event is about.

Called by ``SchedulerState.fold``. Pure. See ``services.scheduler.core.state`` for why the result does not
depend on how partitions interleave.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from events.catalog.decisions import (
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReclaimRequested,
    SchedulingCycleCompleted,
)
from events.catalog.governance import GovernanceFinding, PolicyConfigured, QuotaSet, TenantRegistered
from events.catalog.inventory import (
    ClusterRegistered,
    ClusterStatusChanged,
    GpuHealthReported,
    NodeObserved,
    NodeRemoved,
)
from events.catalog.jobs import JobCancelRequested, JobRejected, JobSubmitted
from events.catalog.lifecycle import RUN_END_OF, JobStatus, RunEnd, RunEndEvent, ends_run, final_status
from events.catalog.profiles import ResourceProfileUpdated
from services.scheduler.core.state.convert import job_of
from services.scheduler.core.state.facts import SUSPECT_FOR_MS, Facts, NodeFacts, Placement
from services.scheduler.core.state.policy_document import policy_from_document


def _node_observed(state: Facts, e: NodeObserved, _: int) -> None:
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    if facts.observed is None or e.generation > facts.observed.generation:
        facts.observed = e
        facts.gpu_health = {}


def _node_removed(state: Facts, e: NodeRemoved, _: int) -> None:
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    facts.removed_generation = max(facts.removed_generation, e.generation)


def _gpu_health(state: Facts, e: GpuHealthReported, _: int) -> None:
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    for sample in e.gpus:
        facts.gpu_health[sample.index] = sample.health.value


def _cluster_registered(state: Facts, e: ClusterRegistered, _: int) -> None:
    state.clusters[e.cluster] = e


def _cluster_status(state: Facts, e: ClusterStatusChanged, _: int) -> None:
    state.cluster_status[e.cluster] = e.status.value


def _profile(state: Facts, e: ResourceProfileUpdated, _: int) -> None:
    if e.node is None and e.version > state.congestion.get(e.cluster, (0, 0))[0]:
        state.congestion[e.cluster] = (e.version, e.congestion_milli)


def _tenant(state: Facts, e: TenantRegistered, _: int) -> None:
    state.tenants[e.tenant] = e


def _quota(state: Facts, e: QuotaSet, _: int) -> None:
    state.quotas[(e.tenant, e.queue)] = e


def _policy(state: Facts, e: PolicyConfigured, _: int) -> None:
    try:
        policy_from_document(e.policy_version, e.document)
    except (ValueError, TypeError):
        return  # an invalid policy never takes effect; the intake should have refused it
    state.policy = e


def _submitted(state: Facts, e: JobSubmitted, time_ms: int) -> None:
    facts = state.job(e.job_id)
    if facts.spec is None:
        facts.spec = job_of(e, time_ms)
        facts.submitted_ms = time_ms


def _cancel_requested(state: Facts, e: JobCancelRequested, _: int) -> None:
    state.job(e.job_id).cancel_requested = True


def _ended(how: RunEnd) -> Callable[[Facts, RunEndEvent, int], None]:
    """The handler of the events that end a run ``how`` (``events.catalog.lifecycle``)."""
    final = final_status(how)  # once here, not per event

    def handle(state: Facts, e: RunEndEvent, time_ms: int) -> None:
        facts = state.job(e.job_id)
        if not ends_run(e):  # a job cancelled before it ever ran: it ends, and no run does
            facts.terminal = facts.terminal or final
            return
        run = e.run
        if run in facts.ended:
            return  # a run's first end is final: a later report (a failure while it was being stopped) is not
        facts.ended[run] = how
        facts.ended_at[run] = time_ms
        if final is not None:
            facts.terminal = final

    return handle


def _rejected(state: Facts, e: JobRejected, _: int) -> None:
    facts = state.job(e.job_id)
    facts.terminal = facts.terminal or JobStatus.REJECTED


def _placed(state: Facts, e: JobPlaced, time_ms: int) -> None:
    facts = state.job(e.job_id)
    if e.run in facts.placements:
        return
    facts.victims = ()
    facts.placements[e.run] = Placement(e.cluster, e.replicas)
    facts.placed_at[e.run] = time_ms


def _queued(state: Facts, e: JobQueued, _: int) -> None:
    state.job(e.job_id).last_queued = tuple(r.value for r in e.reasons)


def _stop_requested(state: Facts, e: JobPreemptionRequested | JobReclaimRequested, _: int) -> None:
    state.job(e.job_id).stop_requested.add(e.run)
    if isinstance(e, JobPreemptionRequested) and e.preemptor is not None:
        preemptor = state.job(e.preemptor)
        if e.job_id not in preemptor.victims:
            preemptor.victims += (e.job_id,)


def _finding(state: Facts, e: GovernanceFinding, _: int) -> None:
    if e.node is None or e.cluster is None or e.profile_penalty_milli <= 0:
        return
    facts = state.nodes.setdefault((e.cluster, e.node), NodeFacts())
    facts.suspect_until_ms = max(facts.suspect_until_ms, e.observed_ms + SUSPECT_FOR_MS)


def _cycle(state: Facts, e: SchedulingCycleCompleted, _: int) -> None:
    state.cycles = max(state.cycles, e.sequence + 1)


HANDLERS: dict[type, Any] = {
    NodeObserved: _node_observed,
    NodeRemoved: _node_removed,
    GpuHealthReported: _gpu_health,
    ClusterRegistered: _cluster_registered,
    ClusterStatusChanged: _cluster_status,
    ResourceProfileUpdated: _profile,
    TenantRegistered: _tenant,
    QuotaSet: _quota,
    PolicyConfigured: _policy,
    JobSubmitted: _submitted,
    JobCancelRequested: _cancel_requested,
    **{cls: _ended(how) for cls, how in RUN_END_OF.items()},
    JobRejected: _rejected,
    JobPlaced: _placed,
    JobQueued: _queued,
    JobPreemptionRequested: _stop_requested,
    JobReclaimRequested: _stop_requested,
    SchedulingCycleCompleted: _cycle,
    GovernanceFinding: _finding,
}
