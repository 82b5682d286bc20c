"""Why a job waits, in a small fixed vocabulary users filter on: each waiting reason code's category.

Called by the scheduler's outputs (a ``JobQueued`` carries the category of its binding reason), by the
``JobQueued`` v1 upcaster (a record of before the categories gets the one its binding gives), by the job
view (the read model's ``pending_reason`` column), and by the API and CLI (the ``ListJobs`` filter, the
``fedsched jobs`` column, ``fedsched explain``). Pure.

The categories follow Kueue's reasons for a workload without a quota reservation (KEP-10852: quota,
topology placement, waiting for preempted workloads, misconfigured) and add what a federation of
budgets and clusters needs: ``budget`` (GPU-hours), and ``unavailable`` (the capacity that would take
the job is cordoned, unhealthy, draining or unreachable: an operator's matter, not a wait for other
jobs to end). Every reason code a ``JobQueued`` can carry maps to exactly one category; a test keeps it
so. Values are stable lower-case strings: add categories, never rename or reuse one.
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

from events.catalog.reasons import ReasonCode


class PendingReason(StrEnum):
    QUOTA = "quota"
    BUDGET = "budget"
    CAPACITY = "capacity"
    UNAVAILABLE = "unavailable"
    TOPOLOGY = "topology"
    PREEMPTION_PENDING = "preemption_pending"
    MISCONFIGURED = "misconfigured"


_R, _P = ReasonCode, PendingReason
PENDING_REASONS = MappingProxyType(
    {
        _R.QUOTA_EXCEEDED: _P.QUOTA,
        _R.COHORT_EXHAUSTED: _P.QUOTA,
        _R.HOT_MODEL_CAP: _P.QUOTA,
        _R.BUDGET_EXCEEDED: _P.BUDGET,
        _R.NO_FEASIBLE_NODE: _P.CAPACITY,
        _R.INSUFFICIENT_GPU: _P.CAPACITY,
        _R.INSUFFICIENT_GPU_SHARE: _P.CAPACITY,
        _R.INSUFFICIENT_CPU: _P.CAPACITY,
        _R.INSUFFICIENT_MEMORY: _P.CAPACITY,
        _R.INSUFFICIENT_NPU: _P.CAPACITY,
        _R.RESERVED_FOR_GANG: _P.CAPACITY,
        _R.HEAD_OF_LINE_BLOCKED: _P.CAPACITY,
        _R.RESERVED: _P.CAPACITY,
        _R.NODE_UNSCHEDULABLE: _P.UNAVAILABLE,
        _R.GPU_UNHEALTHY: _P.UNAVAILABLE,
        _R.CLUSTER_UNREACHABLE: _P.UNAVAILABLE,
        _R.CLUSTER_DRAINING: _P.UNAVAILABLE,
        _R.GANG_TOO_LARGE: _P.TOPOLOGY,
        _R.INTERCONNECT_UNAVAILABLE: _P.TOPOLOGY,
        _R.DATASET_NOT_LOCAL: _P.TOPOLOGY,
        _R.WAITING_FOR_PREEMPTION: _P.PREEMPTION_PENDING,
        _R.GPU_MODEL_UNAVAILABLE: _P.MISCONFIGURED,
        _R.GPU_MEMORY_TOO_SMALL: _P.MISCONFIGURED,
        _R.TAINT_NOT_TOLERATED: _P.MISCONFIGURED,
        _R.INTERCONNECT_DOMAIN_TOO_SMALL: _P.MISCONFIGURED,
    }
)
"""Each waiting reason code -> its category."""

DESCRIPTIONS = MappingProxyType(
    {
        _P.QUOTA: "its tenant's or queue's quota (or cap on a GPU or NPU model in high demand) is used up",
        _P.BUDGET: "its tenant's GPU-hour budget has too little left this window",
        _P.CAPACITY: "the capacity it needs is taken by running jobs, or held for jobs ahead of it",
        _P.UNAVAILABLE: "the capacity that would take it is cordoned, unhealthy, draining or unreachable",
        _P.TOPOLOGY: "no cluster can hold it together as it asks (one cluster, its interconnect, its data)",
        _P.PREEMPTION_PENDING: "jobs are being stopped to make room for it",
        _P.MISCONFIGURED: (
            "no node could take it as asked (GPU or NPU model, device memory, taints, an NVLink domain or "
            "RDMA fabric big enough): change the request"
        ),
    }
)


def pending_reason_of(code: ReasonCode | str | None) -> PendingReason | None:
    """The category of a waiting reason (a code or its string); ``None`` for anything else."""
    member = ReasonCode._value2member_map_.get(code) if isinstance(code, str) else None
    return PENDING_REASONS.get(member) if isinstance(member, ReasonCode) else None


__all__ = ["DESCRIPTIONS", "PENDING_REASONS", "PendingReason", "pending_reason_of"]
