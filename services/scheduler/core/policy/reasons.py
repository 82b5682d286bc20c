"""The reason codes of scheduling decisions, and the order in which capacity shortfalls are reported.

Called by the policy core. The codes are the event catalogue's own (``events.catalog.reasons``): one
vocabulary for decisions, events, the API, the CLI and logs, with stable string values.
"""

from __future__ import annotations

from events.catalog.reasons import ReasonCode

# Reasons that describe a capacity shortfall on a cluster, from the most to the least fundamental: when a
# cluster fails a job for several of them, the first one in this order is reported as its binding one.
CAPACITY_REASON_ORDER: tuple[ReasonCode, ...] = (
    ReasonCode.GPU_MODEL_UNAVAILABLE,
    ReasonCode.GPU_MEMORY_TOO_SMALL,
    ReasonCode.NODE_UNSCHEDULABLE,
    ReasonCode.GANG_TOO_LARGE,
    ReasonCode.INTERCONNECT_DOMAIN_TOO_SMALL,
    ReasonCode.INTERCONNECT_UNAVAILABLE,
    ReasonCode.INSUFFICIENT_GPU,
    ReasonCode.INSUFFICIENT_GPU_SHARE,
    ReasonCode.INSUFFICIENT_CPU,
    ReasonCode.INSUFFICIENT_MEMORY,
    ReasonCode.RESERVED_FOR_GANG,
    ReasonCode.NO_FEASIBLE_NODE,
)

__all__ = ["CAPACITY_REASON_ORDER", "ReasonCode"]
