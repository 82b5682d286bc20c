"""The wire vocabulary of reason codes: every reason an event, the API, the CLI or a log line gives.

Called by catalogue modules (fields typed ``ReasonCode``), by the scheduler (its policy core decides
with these codes), by the API and CLI (``DESCRIPTIONS`` gives each code a plain sentence) and by
consumers that dead-letter a record (the four event-layer codes match ``events.catalog.errors``). Values are
stable strings in PascalCase: add codes, never rename or reuse one.
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType


class ReasonCode(StrEnum):
    # Placement outcomes.
    PLACED = "Placed"
    BACKFILLED = "Backfilled"
    RESERVED = "Reserved"
    # Why a job waits (JobQueued, per-cluster why-not entries, binding constraints).
    QUOTA_EXCEEDED = "QuotaExceeded"
    BUDGET_EXCEEDED = "BudgetExceeded"
    COHORT_EXHAUSTED = "CohortExhausted"
    NO_FEASIBLE_NODE = "NoFeasibleNode"
    GPU_MODEL_UNAVAILABLE = "GpuModelUnavailable"
    GPU_MEMORY_TOO_SMALL = "GpuMemoryTooSmall"
    INSUFFICIENT_GPU = "InsufficientGpu"
    INSUFFICIENT_GPU_SHARE = "InsufficientGpuShare"
    INSUFFICIENT_CPU = "InsufficientCpu"
    INSUFFICIENT_MEMORY = "InsufficientMemory"
    INSUFFICIENT_NPU = "InsufficientNpu"
    GANG_TOO_LARGE = "GangTooLarge"
    HOT_MODEL_CAP = "HotModelCap"
    RESERVED_FOR_GANG = "ReservedForGang"
    NODE_UNSCHEDULABLE = "NodeUnschedulable"
    GPU_UNHEALTHY = "GpuUnhealthy"
    INTERCONNECT_UNAVAILABLE = "InterconnectUnavailable"
    INTERCONNECT_DOMAIN_TOO_SMALL = "InterconnectDomainTooSmall"
    DATASET_NOT_LOCAL = "DatasetNotLocal"
    TAINT_NOT_TOLERATED = "TaintNotTolerated"
    CLUSTER_UNREACHABLE = "ClusterUnreachable"
    CLUSTER_DRAINING = "ClusterDraining"
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"
    HEAD_OF_LINE_BLOCKED = "HeadOfLineBlocked"
    # Preemption and reclaim rules (why a running job is asked to stop).
    PREEMPTED = "Preempted"
    RECLAIM_BORROWED = "ReclaimBorrowedQuota"
    PRIORITY_PREEMPTION = "PriorityPreemption"
    # Why a preemption was not done.
    NO_PREEMPTIBLE_VICTIMS = "NoPreemptibleVictims"
    INTERRUPTION_BUDGET_SPENT = "InterruptionBudgetSpent"
    INFERENCE_PROTECTED = "InferenceProtected"
    # Retries: the scheduler's verdict on a run that failed (JobRetryScheduled, JobRetriesExhausted).
    RETRY_SCHEDULED = "RetryScheduled"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    # Intake: why a request was refused (JobRejected, QuotaRequestRejected).
    INVALID_REQUEST = "InvalidRequest"
    DUPLICATE_REQUEST = "DuplicateRequest"
    UNKNOWN_TENANT = "UnknownTenant"
    UNKNOWN_QUEUE = "UnknownQueue"
    UNAUTHORIZED = "Unauthorized"
    NEVER_SATISFIABLE = "NeverSatisfiable"
    QUOTA_REQUEST_DENIED = "QuotaRequestDenied"
    # How a run ended or why a node or cluster changed (JobFailed, NodeRemoved, ClusterStatusChanged).
    NON_ZERO_EXIT = "NonZeroExit"
    OUT_OF_MEMORY = "OutOfMemory"
    GPU_FAILURE = "GpuFailure"
    NPU_FAILURE = "NpuFailure"
    NODE_FAILURE = "NodeFailure"
    NODE_LOST = "NodeLost"
    NODE_DELETED = "NodeDeleted"
    RUNTIME_EXCEEDED = "RuntimeExceeded"
    LAUNCH_FAILED = "LaunchFailed"
    CONNECTOR_HEARTBEAT_LOST = "ConnectorHeartbeatLost"
    CLUSTER_API_UNAVAILABLE = "ClusterApiUnavailable"
    OPERATOR_REQUEST = "OperatorRequest"
    RECOVERED = "Recovered"
    UNKNOWN = "Unknown"
    # Governance: why a rule stopped, released or flagged a job (JobReclaimRequested, GovernanceFinding).
    IDLE_GPU = "IdleGpu"
    IDLE_NPU = "IdleNpu"
    ALLOCATION_LEASE_EXPIRED = "AllocationLeaseExpired"
    CRASH_LOOP = "CrashLoop"
    STUCK_PENDING = "StuckPending"
    SUSPECT_NODE = "SuspectNode"
    STRAGGLING_GANG = "StragglingGang"
    # The event layer (a dead-lettered record's reason; see ``events.catalog.errors``).
    INVALID_EVENT = "InvalidEvent"
    UNKNOWN_EVENT_TYPE = "UnknownEventType"
    UNSUPPORTED_SCHEMA_VERSION = "UnsupportedSchemaVersion"
    MALFORMED_RECORD = "MalformedRecord"


_R = ReasonCode
DESCRIPTIONS = MappingProxyType(
    {
        _R.PLACED: "placed on a cluster",
        _R.BACKFILLED: "placed early into capacity reserved for a larger job, without delaying it",
        _R.RESERVED: "capacity is being held for this job until enough of it frees up",
        _R.QUOTA_EXCEEDED: "the tenant's or queue's quota limit would be exceeded",
        _R.BUDGET_EXCEEDED: "the GPU-hours the job is expected to use exceed what its budget has left this window",
        _R.COHORT_EXHAUSTED: "no unused quota left to borrow in the tenant's cohort",
        _R.NO_FEASIBLE_NODE: "no node satisfies every constraint of a replica",
        _R.GPU_MODEL_UNAVAILABLE: "none of the allowed GPU or NPU models exists here",
        _R.GPU_MEMORY_TOO_SMALL: "the GPUs here have less memory than the job's minimum",
        _R.INSUFFICIENT_GPU: "not enough free whole GPUs",
        _R.INSUFFICIENT_GPU_SHARE: "no GPU has the requested share free",
        _R.INSUFFICIENT_CPU: "not enough free CPU",
        _R.INSUFFICIENT_MEMORY: "not enough free memory",
        _R.INSUFFICIENT_NPU: "not enough free NPUs",
        _R.GANG_TOO_LARGE: "the gang needs more capacity than the cluster has in total",
        _R.HOT_MODEL_CAP: "the tenant reached its cap on a GPU or NPU model in high demand",
        _R.RESERVED_FOR_GANG: "the free capacity is held for a waiting gang job",
        _R.NODE_UNSCHEDULABLE: "the suitable nodes are cordoned or not schedulable",
        _R.GPU_UNHEALTHY: "the suitable GPUs or NPUs are degraded or failed",
        _R.INTERCONNECT_UNAVAILABLE: "no NVLink domain or RDMA fabric has room for all of the job's replicas now",
        _R.INTERCONNECT_DOMAIN_TOO_SMALL: (
            "no NVLink domain or RDMA fabric could hold all of the job's replicas even when empty"
        ),
        _R.DATASET_NOT_LOCAL: "a required dataset is not reachable locally",
        _R.TAINT_NOT_TOLERATED: "the suitable nodes carry taints the job does not tolerate",
        _R.CLUSTER_UNREACHABLE: "the cluster's connector cannot be reached",
        _R.CLUSTER_DRAINING: "the cluster is draining and takes no new work",
        _R.WAITING_FOR_PREEMPTION: "lower-priority jobs are being preempted to make room",
        _R.HEAD_OF_LINE_BLOCKED: "a job ahead in the queue must start first",
        _R.PREEMPTED: "stopped to make room for another job",
        _R.RECLAIM_BORROWED: "stopped because it used quota borrowed from a tenant that now needs it",
        _R.PRIORITY_PREEMPTION: "stopped for a job of a higher priority class",
        _R.NO_PREEMPTIBLE_VICTIMS: "no running job may be preempted for it",
        _R.INTERRUPTION_BUDGET_SPENT: "the candidate victims were interrupted too often already",
        _R.INFERENCE_PROTECTED: "production inference is never preempted for it",
        _R.RETRY_SCHEDULED: "its run failed and it goes back to the queue to run again, after a backoff",
        _R.RETRIES_EXHAUSTED: "its run failed and it has no retries left: it ends failed",
        _R.INVALID_REQUEST: "the request is not valid",
        _R.DUPLICATE_REQUEST: "a request with the same client request id was already accepted",
        _R.UNKNOWN_TENANT: "the tenant is not registered",
        _R.UNKNOWN_QUEUE: "the queue does not exist for the tenant",
        _R.UNAUTHORIZED: "the requester may not do this",
        _R.NEVER_SATISFIABLE: "no cluster could ever run the request as stated",
        _R.QUOTA_REQUEST_DENIED: "the quota request was declined",
        _R.NON_ZERO_EXIT: "the workload exited with a non-zero code",
        _R.OUT_OF_MEMORY: "the workload ran out of memory",
        _R.GPU_FAILURE: "a GPU failed (XID or uncorrectable ECC error)",
        _R.NPU_FAILURE: "an NPU failed (a device error its driver reported as fatal)",
        _R.NODE_FAILURE: "the node failed while the job ran",
        _R.NODE_LOST: "the node stopped reporting",
        _R.NODE_DELETED: "the node was removed from the cluster",
        _R.RUNTIME_EXCEEDED: "the job ran past its maximum runtime",
        _R.LAUNCH_FAILED: "the cluster could not start the workload",
        _R.CONNECTOR_HEARTBEAT_LOST: "the connector stopped sending heartbeats",
        _R.CLUSTER_API_UNAVAILABLE: "the cluster's own API does not answer",
        _R.OPERATOR_REQUEST: "an operator asked for it",
        _R.RECOVERED: "back to normal",
        _R.UNKNOWN: "the cause is not known",
        _R.IDLE_GPU: "its GPUs stayed idle longer than the governance policy allows",
        _R.IDLE_NPU: "its NPUs stayed idle longer than the governance policy allows",
        _R.ALLOCATION_LEASE_EXPIRED: "its allocation was released: the run never started or the cluster lost it",
        _R.CRASH_LOOP: "it failed repeatedly within a short window",
        _R.STUCK_PENDING: "it has waited longer than the governance threshold",
        _R.SUSPECT_NODE: "jobs keep failing soon after starting on the same node",
        _R.STRAGGLING_GANG: "one replica of a gang runs much slower than the others",
        _R.INVALID_EVENT: "a record failed validation against its schema",
        _R.UNKNOWN_EVENT_TYPE: "a record's type is not in the catalogue",
        _R.UNSUPPORTED_SCHEMA_VERSION: "a record's schema version is newer than this reader knows",
        _R.MALFORMED_RECORD: "a record is not a CloudEvent (bad JSON or missing header)",
    }
)

__all__ = ["DESCRIPTIONS", "ReasonCode"]
