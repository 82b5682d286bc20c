"""The core's output: an ordered list of decisions, each with reason codes and a plain sentence.

Called by the cycle (which builds them) and by whoever publishes them (a later issue maps them to
``JobPlaced``, ``JobQueued``, ``JobPreemptionRequested`` events). ``CycleResult.to_json`` is the canonical
serialisation: sorted keys, no whitespace, so the same decisions are the same bytes on every machine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Literal

from services.scheduler.core.policy.model import ClusterId, JobId, ReplicaPlacement, TenantId
from services.scheduler.core.policy.reasons import ReasonCode

JsonScalar = str | int | bool | None


@dataclass(frozen=True, slots=True)
class CandidateScore:
    cluster: ClusterId
    nodes: tuple[str, ...]
    breakdown: tuple[tuple[str, int], ...]  # term -> integer, lower total is better


@dataclass(frozen=True, slots=True)
class Place:
    job_id: JobId
    tenant: TenantId
    cluster: ClusterId
    replicas: tuple[ReplicaPlacement, ...]
    chosen: CandidateScore
    runner_up: CandidateScore | None
    reasons: tuple[ReasonCode, ...]
    message: str
    borrowed: bool = False
    kind: Literal["place"] = "place"


@dataclass(frozen=True, slots=True)
class AddReplicas:
    """A running job that holds fewer replicas than it asks grows in its run's cluster: ``replicas`` are the
    new ones (numbered after the ``held`` ones), ``asked`` what the job asks in all."""

    job_id: JobId
    tenant: TenantId
    cluster: ClusterId
    replicas: tuple[ReplicaPlacement, ...]
    held: int
    asked: int
    chosen: CandidateScore
    message: str
    borrowed: bool = False
    kind: Literal["add_replicas"] = "add_replicas"


@dataclass(frozen=True, slots=True)
class ClusterWhyNot:
    cluster: ClusterId
    reason: ReasonCode
    detail: str


@dataclass(frozen=True, slots=True)
class Constraint:
    """What holds a waiting job back, with the numbers. ``requested`` and ``available`` are in the unit of
    ``resource``: ``cpu`` milli-CPU, ``memory`` MiB, ``gpu`` milli-GPU and ``npu`` NPUs, per replica on one
    node (or, for a quota, the tenant's amount and what its quota has left). Without a resource (a
    reservation, a cordoned cluster, a gang too large) both are 0 and the detail says why."""

    reason: ReasonCode
    resource: str | None = None
    gpu_model: str | None = None
    cluster: ClusterId | None = None
    requested: int = 0
    available: int = 0


@dataclass(frozen=True, slots=True)
class Change:
    """The smallest change to the request that would let the job start now: a field of the job spec, its
    current value and the suggested one (``message`` says where it would fit)."""

    field: str
    current: str
    suggested: str
    message: str


@dataclass(frozen=True, slots=True)
class Queue:
    """A job left waiting, and why. ``federation_position``: its place in the cycle's order of every
    waiting job (1 is the next the scheduler tries); ``tenant_queue_position``: its place among the waiting
    jobs of its own tenant's queue, in the same order."""

    job_id: JobId
    tenant: TenantId
    reasons: tuple[ReasonCode, ...]
    binding: ReasonCode
    message: str
    per_cluster: tuple[ClusterWhyNot, ...]
    smallest_change: str
    federation_position: int
    tenant_queue_position: int
    estimated_start_ms: int | None
    constraint: Constraint | None = None
    change: Change | None = None
    kind: Literal["queue"] = "queue"


@dataclass(frozen=True, slots=True)
class Preempt:
    victim: JobId
    victim_tenant: TenantId
    preemptor: JobId
    cluster: ClusterId
    rule: ReasonCode
    message: str
    grace_period_s: int = 30
    """The victim's class's grace period (``PreemptionRules``)."""
    kind: Literal["preempt"] = "preempt"


@dataclass(frozen=True, slots=True)
class Reserve:
    job_id: JobId
    cluster: ClusterId
    nodes: tuple[str, ...]
    expected_start_ms: int
    message: str
    kind: Literal["reserve"] = "reserve"


@dataclass(frozen=True, slots=True)
class Retry:
    """A job whose run failed goes back to the queue: it may be placed again from ``not_before_ms``."""

    job_id: JobId
    tenant: TenantId
    run: int
    cluster: ClusterId
    node: str | None
    failure: ReasonCode
    infrastructure: bool
    attempt: int
    allowed: int
    not_before_ms: int
    message: str
    kind: Literal["retry"] = "retry"


@dataclass(frozen=True, slots=True)
class GiveUp:
    """A job whose run failed ends failed: no retry of that kind is left (``used`` of ``allowed``)."""

    job_id: JobId
    tenant: TenantId
    run: int
    cluster: ClusterId
    node: str | None
    failure: ReasonCode
    infrastructure: bool
    used: int
    allowed: int
    message: str
    kind: Literal["give_up"] = "give_up"


Decision = Place | AddReplicas | Queue | Preempt | Reserve | Retry | GiveUp


def _plain(value: object) -> object:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class CycleResult:
    now_ms: int
    policy_version: str
    decisions: tuple[Decision, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "now_ms": self.now_ms,
            "policy_version": self.policy_version,
            "decisions": [_plain(asdict(d)) for d in self.decisions],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def of_kind(self, kind: str) -> list[Decision]:
        return [d for d in self.decisions if d.kind == kind]


__all__ = [
    "AddReplicas",
    "CandidateScore",
    "Change",
    "ClusterWhyNot",
    "Constraint",
    "CycleResult",
    "Decision",
    "GiveUp",
    "Place",
    "Preempt",
    "Queue",
    "Reserve",
    "Retry",
]
