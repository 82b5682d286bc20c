"""The core's models of what events say: a submitted job, a node's id, its taints.

Called by the fold and by ``SchedulerState`` when it derives a snapshot, and by the scheduler's decision
events (``event_node``). Pure.
"""

from __future__ import annotations

from dataclasses import replace

from events.catalog.inventory import NodeObserved
from events.catalog.jobs import JobKind, JobSubmitted
from events.catalog.lifecycle import spreads
from events.catalog.types import JobId, NodeId
from services.scheduler.core.policy import model as m
from services.scheduler.core.state.facts import JobFacts


def core_node_id(cluster: str, node: str) -> NodeId:
    """The core's id of a node: node names are unique only within a cluster (two clusters may well
    both have a ``gpu-node-1``), and ids have no ``/``, so ``cluster/node`` is unique and reversible."""
    return NodeId(f"{cluster}/{node}")


def event_node(node_id: str) -> NodeId:
    """The node's own name, as events carry it (beside their cluster field)."""
    return NodeId(node_id.partition("/")[2] or node_id)


def job_model(facts: JobFacts) -> m.Job:
    spec = facts.spec
    assert spec is not None
    preempted = facts.times_preempted()
    return spec if preempted == spec.times_preempted else replace(spec, times_preempted=preempted)


def job_of(e: JobSubmitted, submitted_ms: int) -> m.Job:
    r = e.resources
    return m.Job(
        job_id=JobId(e.job_id),
        tenant=e.tenant,
        queue=e.queue,
        kind=e.kind,
        priority_class=e.priority_class,
        replicas=e.replicas,
        gang=e.is_gang(),
        cpu_milli=r.cpu_milli,
        memory_mib=r.memory_mib,
        gpus=r.gpus,
        gpu_milli=r.gpu_milli,
        gpu_models=tuple(sorted(r.gpu_models)),
        min_gpu_memory_mib=r.min_gpu_memory_mib,
        npus=r.npus,
        npu_models=tuple(sorted(r.npu_models)),
        min_npu_memory_mib=r.min_npu_memory_mib,
        interconnect=e.interconnect,
        interconnect_required=e.interconnect_required,
        datasets=tuple(sorted(e.datasets)),
        preemptible=e.preemptible,
        expected_runtime_s=e.expected_runtime_s,
        max_runtime_s=e.max_runtime_s,
        submitted_at_ms=submitted_ms,
        times_preempted=0,
        min_replicas=_min_replicas(e),
        application_retries=e.retry.on_application_failure,
        spread_clusters=e.inference.spread_clusters if spreads(e) and e.inference is not None else 1,
        tolerations=tuple(
            sorted(
                ((t.key, t.value, None if t.effect is None else t.effect.value) for t in e.tolerations),
                key=lambda t: (t[0], t[1] or "", t[2] or ""),
            )
        ),
    )


def _min_replicas(e: JobSubmitted) -> int | None:
    """A job of several replicas that is not a gang may start with what fits: at least one replica, or an
    inference service's ``inference.min_replicas`` (at least one); a gang starts with all its replicas or
    waits. Every run started with fewer grows in its cluster as room appears."""
    if e.is_gang() or e.replicas <= 1:
        return None
    if e.kind is JobKind.INFERENCE and e.inference is not None:
        return None if e.inference.min_replicas >= e.replicas else max(1, e.inference.min_replicas)
    return 1


def taints(observed: NodeObserved) -> tuple[m.Taint, ...]:
    return tuple(sorted((t.key, t.value, t.effect.value) for t in observed.taints))
