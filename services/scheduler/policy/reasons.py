"""One vocabulary of reason codes for every scheduling decision.

Called by the policy core (decisions carry these codes), and meant to be reused unchanged by the event
catalogue, the API, the CLI and logs. The string values are stable: add codes, never rename them.
"""

from __future__ import annotations

from enum import StrEnum


class ReasonCode(StrEnum):
    # Placement outcomes.
    PLACED = "Placed"
    BACKFILLED = "Backfilled"
    RESERVED = "Reserved"
    # Why a job waits.
    QUOTA_EXCEEDED = "QuotaExceeded"
    COHORT_EXHAUSTED = "CohortExhausted"
    NO_FEASIBLE_NODE = "NoFeasibleNode"
    GPU_MODEL_UNAVAILABLE = "GpuModelUnavailable"
    GPU_MEMORY_TOO_SMALL = "GpuMemoryTooSmall"
    INSUFFICIENT_GPU = "InsufficientGpu"
    INSUFFICIENT_GPU_SHARE = "InsufficientGpuShare"
    INSUFFICIENT_CPU = "InsufficientCpu"
    INSUFFICIENT_MEMORY = "InsufficientMemory"
    GANG_TOO_LARGE = "GangTooLarge"
    HOT_MODEL_CAP = "HotModelCap"
    RESERVED_FOR_GANG = "ReservedForGang"
    NODE_UNSCHEDULABLE = "NodeUnschedulable"
    GPU_UNHEALTHY = "GpuUnhealthy"
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"
    HEAD_OF_LINE_BLOCKED = "HeadOfLineBlocked"
    # Preemption rules (why a running job is asked to stop).
    PREEMPTED = "Preempted"
    RECLAIM_BORROWED = "ReclaimBorrowedQuota"
    PRIORITY_PREEMPTION = "PriorityPreemption"
    # Why a preemption was not done.
    NO_PREEMPTIBLE_VICTIMS = "NoPreemptibleVictims"
    INTERRUPTION_BUDGET_SPENT = "InterruptionBudgetSpent"
    INFERENCE_PROTECTED = "InferenceProtected"


# Reasons that describe a capacity shortfall on a cluster, from the most to the least fundamental: when a
# cluster fails a job for several of them, the first one in this order is reported as its binding one.
CAPACITY_REASON_ORDER: tuple[ReasonCode, ...] = (
    ReasonCode.GPU_MODEL_UNAVAILABLE,
    ReasonCode.GPU_MEMORY_TOO_SMALL,
    ReasonCode.NODE_UNSCHEDULABLE,
    ReasonCode.GANG_TOO_LARGE,
    ReasonCode.INSUFFICIENT_GPU,
    ReasonCode.INSUFFICIENT_GPU_SHARE,
    ReasonCode.INSUFFICIENT_CPU,
    ReasonCode.INSUFFICIENT_MEMORY,
    ReasonCode.RESERVED_FOR_GANG,
    ReasonCode.NO_FEASIBLE_NODE,
)

__all__ = ["CAPACITY_REASON_ORDER", "ReasonCode"]
