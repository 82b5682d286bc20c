"""The pure scheduling core: no I/O, no clock, no randomness beyond seeded PRNGs, integers throughout.

Entry points: ``schedule(snapshot, config) -> CycleResult`` for a whole cycle, and ``Placer`` (over a
``FleetState``) for the simulator's and benchmark's hot loop; both use the same scoring code.
"""

from services.scheduler.core.policy.cycle import CycleMemo, schedule
from services.scheduler.core.policy.decisions import (
    AddReplicas,
    CandidateScore,
    ClusterWhyNot,
    CycleResult,
    Decision,
    Place,
    Preempt,
    Queue,
    Reserve,
)
from services.scheduler.core.policy.fleet import Demand, FleetState
from services.scheduler.core.policy.fragmentation import FragModel, typical_shapes
from services.scheduler.core.policy.model import (
    Cluster,
    ClusterWeights,
    FleetSnapshot,
    Gpu,
    Health,
    Job,
    Node,
    NodePolicy,
    Npu,
    PolicyConfig,
    Quota,
    ReplicaPlacement,
    RunningDelta,
    RunningJob,
    Shape,
    Tenant,
    UsageHistory,
    UsageRecord,
)
from services.scheduler.core.policy.placer import Choice, Placer
from services.scheduler.core.policy.reasons import ReasonCode

__all__ = [
    "AddReplicas",
    "CandidateScore",
    "Choice",
    "Cluster",
    "ClusterWeights",
    "ClusterWhyNot",
    "CycleMemo",
    "CycleResult",
    "Decision",
    "Demand",
    "FleetSnapshot",
    "FleetState",
    "FragModel",
    "Gpu",
    "Health",
    "Job",
    "Node",
    "NodePolicy",
    "Npu",
    "Place",
    "Placer",
    "PolicyConfig",
    "Preempt",
    "Queue",
    "Quota",
    "ReasonCode",
    "ReplicaPlacement",
    "Reserve",
    "RunningDelta",
    "RunningJob",
    "Shape",
    "Tenant",
    "UsageHistory",
    "UsageRecord",
    "schedule",
    "typical_shapes",
]
