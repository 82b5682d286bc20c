"""The event catalogue: every event type fedsched reads or writes, as frozen pydantic models.

Called by everything that produces or consumes events. Importing this package registers every type
(``REGISTRY``) and every upcaster; the public names are re-exported here and pinned by a test. Pure:
imports no I/O library.

Modules by area: ``inventory`` (clusters, nodes, devices), ``jobs`` (requests and the job lifecycle),
``lifecycle`` (the lifecycle's vocabulary: job statuses, which are final, which events end a run or the
job, how a run ended), ``decisions`` (the scheduler's decisions and cycle records), ``governance``
(policies, tenants, quotas), ``profiles`` (projection outputs), ``legacy`` (superseded versions and their
upcasters); shared pieces in ``types``, ``reasons``, ``pending_reasons`` (each waiting reason's category),
``base`` (the base class and the registry), ``upcasters``, ``errors`` (why a record is not a valid
event), ``topics`` (the topic catalogue) and ``schema`` (JSON Schema).
"""

from events.catalog import decisions, documents, governance, inventory, jobs, legacy, lifecycle, profiles, schema
from events.catalog.base import REGISTRY, Event
from events.catalog.decisions import (
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReclaimRequested,
    JobReplicasAdded,
    JobRetriesExhausted,
    JobRetryScheduled,
    JobRunClosed,
    SchedulingCycleCompleted,
)
from events.catalog.governance import (
    BudgetSet,
    BudgetWindowOpened,
    CohortConfigured,
    GovernanceClockTicked,
    GovernanceFinding,
    JobIdleWarning,
    PolicyConfigured,
    QuotaRequestApproved,
    QuotaRequestRejected,
    QuotaRequestSubmitted,
    QuotaSet,
    TenantRegistered,
)
from events.catalog.inventory import (
    ClusterNodesListed,
    ClusterRegistered,
    ClusterStatusChanged,
    GpuHealthReported,
    NodeObserved,
    NodeRemoved,
    NodeUsageReported,
)
from events.catalog.jobs import (
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobPreempted,
    JobReclaimed,
    JobRejected,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
)
from events.catalog.pending_reasons import PendingReason
from events.catalog.profiles import QuotaUsageUpdated, ResourceProfileUpdated
from events.catalog.reasons import ReasonCode

__all__ = [
    "REGISTRY",
    "BudgetSet",
    "BudgetWindowOpened",
    "ClusterNodesListed",
    "ClusterRegistered",
    "ClusterStatusChanged",
    "CohortConfigured",
    "Event",
    "GovernanceClockTicked",
    "GovernanceFinding",
    "GpuHealthReported",
    "JobCancelRequested",
    "JobCancelled",
    "JobFailed",
    "JobIdleWarning",
    "JobPlaced",
    "JobPreempted",
    "JobPreemptionRequested",
    "JobQueued",
    "JobReclaimRequested",
    "JobReclaimed",
    "JobRejected",
    "JobReplicasAdded",
    "JobRetriesExhausted",
    "JobRetryScheduled",
    "JobRunClosed",
    "JobStarted",
    "JobSubmitted",
    "JobSucceeded",
    "NodeObserved",
    "NodeRemoved",
    "NodeUsageReported",
    "PendingReason",
    "PolicyConfigured",
    "QuotaRequestApproved",
    "QuotaRequestRejected",
    "QuotaRequestSubmitted",
    "QuotaSet",
    "QuotaUsageUpdated",
    "ReasonCode",
    "ResourceProfileUpdated",
    "SchedulingCycleCompleted",
    "TenantRegistered",
    "decisions",
    "documents",
    "governance",
    "inventory",
    "jobs",
    "legacy",
    "lifecycle",
    "profiles",
    "schema",
]
