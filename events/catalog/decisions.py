"""The scheduler's decisions and its cycle records (topic ``fedsched.decisions``, one partition).

Called by the scheduler host, which publishes them in the same Kafka transaction as its consumer
offsets; by connectors, which carry out placements, preemptions and reclaims; by the API, which answers
"why is my job waiting / why did it go there" from them; and by ``fedsched audit verify``, which
re-runs each recorded cycle and compares. Decisions are keyed by job id, cycle records by cycle id.

Every decision names the cycle that made it; the cycle's record (``SchedulingCycleCompleted``) carries
the input offsets, the logical time and the policy version, which is all a replay needs. Scores are
integers (milli-points), so a replay on any machine adds them up identically.

Retired fields stay reserved (never reused with another meaning): ``JobQueued.queue_position`` (v1: the
job's place in the whole federation's order, now ``federation_position``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from events.catalog.base import Event
from events.catalog.jobs import RunEnd
from events.catalog.pending_reasons import PendingReason
from events.catalog.reasons import ReasonCode
from events.catalog.topics import DECISIONS
from events.catalog.types import (
    MAX_REPLICAS,
    ClusterIdField,
    CycleIdField,
    DeviceIndices,
    DurationSeconds,
    EpochMillis,
    FieldPath,
    Frozen,
    GpuModel,
    Id,
    JobIdField,
    MilliGpu,
    NodeIdField,
    NonNegInt,
    PolicyVersion,
    PosInt,
    ResourceKind,
    Sha256Hex,
    ShortText,
    SignedInt,
    TenantIdField,
    Text,
    TopicName,
    Unique,
)

#: One weighted term of a score, in milli-points; small enough that 32 of them add up exactly.
ScorePoints = Annotated[int, Field(ge=-(2**47), le=2**47)]
Reasons = Annotated[tuple[ReasonCode, ...], Field(min_length=1, max_length=16), Unique()]


class DecisionEvent(Event):
    """Base of the scheduler's decisions about one job: keyed by job id on the decisions topic."""

    key_field: ClassVar[str | None] = "job_id"
    topic: ClassVar[str] = DECISIONS.name

    job_id: JobIdField
    cycle_id: CycleIdField
    """The scheduling cycle that made the decision."""


class ClusterWhyNot(Frozen):
    """Why one cluster cannot take the job now."""

    cluster: ClusterIdField
    reasons: Annotated[tuple[ReasonCode, ...], Field(min_length=1, max_length=8), Unique()]
    detail: ShortText = ""


class BindingConstraint(Frozen):
    """The constraint that holds the job back: lifting it would let the job start soonest.

    ``requested`` and ``available`` are in the unit of ``resource`` (see ``ResourceKind``).
    """

    reason: ReasonCode
    resource: ResourceKind | None = None
    gpu_model: GpuModel | None = None
    cluster: ClusterIdField | None = None
    """``None`` when the constraint is federation-wide (a quota, for example)."""
    requested: NonNegInt = 0
    available: NonNegInt = 0


class SuggestedChange(Frozen):
    """The smallest change to the request that would let the job start sooner."""

    field: FieldPath
    current: ShortText
    suggested: ShortText
    message: ShortText = ""


class JobQueued(DecisionEvent):
    """The job waits: the reasons, each cluster's why-not, what binds, and what change would help; its
    place in its own queue and in the federation's order, when it may start, and the category of its
    wait (v2: both places and the category; v1 had one ``queue_position``, the federation's)."""

    event_type: ClassVar[str] = "io.fedsched.JobQueued"
    schema_version: ClassVar[int] = 2
    retired_fields: ClassVar[tuple[str, ...]] = ("queue_position",)

    reasons: Reasons
    message: Text
    """The same in plain words, for the person who submitted the job."""
    why_not: Annotated[tuple[ClusterWhyNot, ...], Field(max_length=256), Unique(("cluster",), ordered=True)] = ()
    """Why each cluster that was considered cannot take it now, sorted by cluster."""
    binding: BindingConstraint | None = None
    smallest_change: SuggestedChange | None = None
    federation_position: PosInt | None = None
    """Its place in the whole federation's order of waiting jobs this cycle (priority class, fair share,
    age): 1 is the next job the scheduler tries."""
    tenant_queue_position: PosInt | None = None
    """Its place among the waiting jobs of its own tenant's queue (its tenant and queue, as
    ``team-a/default``), in the same order: 1 is that queue's next. ``None`` in a v1 record."""
    estimated_start_ms: EpochMillis | None = None
    """Logical time at which the scheduler expects the job to start, if it can tell."""
    pending_reason: PendingReason | None = None
    """The category of its binding reason (``events.catalog.pending_reasons``): what users filter waits
    by. ``None`` only for a reason without one."""

    @model_validator(mode="after")
    def _queue_within_federation(self) -> JobQueued:
        fed, own = self.federation_position, self.tenant_queue_position
        if fed is not None and own is not None and own > fed:
            raise ValueError("tenant_queue_position cannot be behind federation_position")
        return self


class ReplicaPlacement(Frozen):
    """Where one replica runs: a node, and the devices it takes there."""

    replica: Annotated[int, Field(ge=0, lt=MAX_REPLICAS)]
    node: NodeIdField
    gpu_indices: DeviceIndices = ()
    gpu_milli_each: MilliGpu = 0
    """Milli-GPU taken from each listed GPU: 1000 for whole GPUs, less for a share of one."""
    npu_indices: DeviceIndices = ()

    @model_validator(mode="after")
    def _share_matches_gpus(self) -> ReplicaPlacement:
        if bool(self.gpu_indices) != bool(self.gpu_milli_each):
            raise ValueError("gpu_milli_each must be given exactly when gpu_indices is not empty")
        return self


class ScoreComponent(Frozen):
    """One weighted term of a candidate's score (``fit``, ``locality``, ``cost``, ...)."""

    name: Id
    points: ScorePoints


class CandidateScore(Frozen):
    """A candidate (a cluster, or a node in it) and its score; ``total`` is the sum of the components."""

    cluster: ClusterIdField
    node: NodeIdField | None = None
    total: SignedInt
    components: Annotated[tuple[ScoreComponent, ...], Field(max_length=32), Unique(("name",))] = ()

    @model_validator(mode="after")
    def _total_is_sum(self) -> CandidateScore:
        if self.components and self.total != sum(c.points for c in self.components):
            raise ValueError("total must be the sum of the components' points")
        return self


class JobPlaced(DecisionEvent):
    """The scheduler placed the job: the cluster, each replica's node and devices, and why there."""

    event_type: ClassVar[str] = "io.fedsched.JobPlaced"
    schema_version: ClassVar[int] = 2

    cluster: ClusterIdField
    run: PosInt = 1
    """The attempt this placement starts (1, then one more after each preemption or reclaim)."""
    reason: ReasonCode = ReasonCode.PLACED
    """``Placed``, or ``Backfilled`` when it went into capacity reserved for a larger job."""
    replicas: Annotated[
        tuple[ReplicaPlacement, ...],
        Field(min_length=1, max_length=MAX_REPLICAS),
        Unique(("replica",), ordered=True),
    ]
    """One entry per replica, sorted by replica number (0 .. replicas - 1)."""
    chosen: CandidateScore
    """The winning candidate and its score breakdown."""
    runner_up: Annotated[tuple[CandidateScore, ...], Field(max_length=8)] = ()
    """The best candidates not chosen, best first."""
    explanation: Text
    """Why there, in plain words."""
    victims: Annotated[tuple[JobIdField, ...], Field(max_length=256)] = ()
    """The running jobs the scheduler asked to stop to make room for this run (its preemptions since its
    previous run), in the order they were asked."""

    @model_validator(mode="after")
    def _chosen_is_cluster(self) -> JobPlaced:
        if self.chosen.cluster != self.cluster:
            raise ValueError("chosen.cluster must be the cluster the job is placed on")
        return self


class JobReplicasAdded(DecisionEvent):
    """The scheduler added replicas to a run that holds fewer than its job asks (an elastic job: not a
    gang): the cluster, each new replica's node and devices, and why there.

    A run opens with one ``JobPlaced`` and may then grow by any number of these (never shrink: a replica
    that ends ends with its run, or with its part of a spread run). Why a new type and not a second,
    versioned ``JobPlaced``: a ``JobPlaced`` opens a run (the job becomes placed, the run number moves on,
    the jobs stopped for it are named), and every reader keys on that; growing a run opened earlier is
    another fact, which leaves the job's status as it was.

    Replica numbers continue the run's across all its clusters: a run of 3 replicas (0, 1, 2) grows with
    3, 4, ... v2: the event may name a cluster other than the run's ``JobPlaced`` (an inference service
    spread over clusters, ``inference.spread_clusters``): it then opens the run's part in that cluster
    (the cluster's connector starts the replicas from the job's request) or grows it. A v1 event always
    named the run's own cluster, so it reads unchanged; a reader that knows only v1 refuses a v2 rather
    than dropping a replica it cannot place.
    """

    event_type: ClassVar[str] = "io.fedsched.JobReplicasAdded"
    schema_version: ClassVar[int] = 2

    cluster: ClusterIdField
    run: PosInt
    """The run that grows (its ``JobPlaced``'s ``run``)."""
    replicas: Annotated[
        tuple[ReplicaPlacement, ...],
        Field(min_length=1, max_length=MAX_REPLICAS),
        Unique(("replica",), ordered=True),
    ]
    """The new replicas, sorted by replica number, continuing the run's numbers."""
    running_replicas: PosInt
    """How many replicas the run holds with these (every cluster of the run)."""
    chosen: CandidateScore
    """The cluster's score for the new replicas."""
    explanation: Text
    """What was added and what still waits, in plain words."""

    @model_validator(mode="after")
    def _consistent(self) -> JobReplicasAdded:
        if self.chosen.cluster != self.cluster:
            raise ValueError("chosen.cluster must be the cluster the replicas are added in")
        if self.running_replicas < len(self.replicas):
            raise ValueError("running_replicas must count the run's replicas, these included")
        return self


class RunPartEnd(Frozen):
    """How one cluster's part of a spread run ended (its cluster's run-end event)."""

    cluster: ClusterIdField
    outcome: RunEnd
    reason: ReasonCode | None = None
    """A failed part's ``JobFailed.reason``."""


class JobRunClosed(DecisionEvent):
    """The scheduler closes a run whose replicas lived in several clusters (a job with
    ``inference.spread_clusters`` above 1), once the end of every part it opened has reached it.

    The run's parts end one by one, each with its cluster's run-end event (``JobFailed``, ``JobPreempted``,
    ...), which ends only that part: the service lives on in its other clusters and is topped up. The run
    itself ends here, as its last part ended (``outcome``, ``reason``, ``cluster``, ``node``): every reader
    ends such a run on this event and on nothing else, so no interleaving of the jobs and decisions topics
    can end it early (the scheduler never adds to a run it closed, and never closes one with a part it
    opened still unended). A failure that may be retried is then judged as any run's
    (``JobRetryScheduled`` / ``JobRetriesExhausted`` follow); a preempted or reclaimed last part sends the
    job back to the queue; a cancelled one ends it.
    """

    event_type: ClassVar[str] = "io.fedsched.JobRunClosed"
    schema_version: ClassVar[int] = 1

    run: PosInt
    cluster: ClusterIdField
    """The cluster whose part ended last."""
    outcome: RunEnd
    """How the run ended: as its last part did."""
    reason: ReasonCode | None = None
    """The last part's failure reason, when it failed."""
    node: NodeIdField | None = None
    """Where the last part failed, when its cluster said."""
    parts: Annotated[tuple[RunPartEnd, ...], Field(min_length=1, max_length=64), Unique(("cluster",))]
    """Every part the run had, in the order their ends were folded."""
    message: Text
    """The run's story in plain words (``3 replicas in sim-1 and 2 in sim-2; sim-1's part failed ...``)."""

    @model_validator(mode="after")
    def _last_part(self) -> JobRunClosed:
        last = self.parts[-1]
        if last.cluster != self.cluster or last.outcome is not self.outcome or last.reason != self.reason:
            raise ValueError("cluster, outcome and reason must be those of the last part (parts[-1])")
        if (self.reason is not None) != (self.outcome is RunEnd.FAILED):
            raise ValueError("reason is given exactly when the outcome is failed")
        return self


class JobPreemptionRequested(DecisionEvent):
    """The scheduler asks a cluster to stop a running job (``job_id``, the victim) to make room."""

    event_type: ClassVar[str] = "io.fedsched.JobPreemptionRequested"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField
    run: PosInt = 1
    """The victim's attempt being stopped."""
    preemptor: JobIdField | None = None
    """The job that needs the room, when there is one."""
    rule: Id
    """The policy rule that allowed it (a rule name from the policy document)."""
    reason: ReasonCode = ReasonCode.PRIORITY_PREEMPTION
    grace_period_s: DurationSeconds = 30
    """How long the workload may take to checkpoint and stop."""
    message: Text = ""


class ReclaimFigures(Frozen):
    """The quota arithmetic behind a reclaim, in milli-GPU of one GPU model (``None``: all GPUs)."""

    gpu_model: GpuModel | None = None
    borrower_guaranteed_milli: NonNegInt
    borrower_used_milli: NonNegInt
    lender: TenantIdField
    lender_guaranteed_milli: NonNegInt
    lender_used_milli: NonNegInt
    lender_pending_milli: NonNegInt
    """What the lender's waiting jobs ask for."""
    reclaimed_milli: NonNegInt
    """What stopping this job gives back."""


class JobReclaimRequested(DecisionEvent):
    """The scheduler asks a cluster to stop a job that runs on borrowed quota its lender needs back."""

    event_type: ClassVar[str] = "io.fedsched.JobReclaimRequested"
    schema_version: ClassVar[int] = 1

    cluster: ClusterIdField
    run: PosInt = 1
    tenant: TenantIdField
    """The tenant of the job, who borrowed."""
    rule: Id
    reason: ReasonCode = ReasonCode.RECLAIM_BORROWED
    figures: ReclaimFigures
    grace_period_s: DurationSeconds = 30
    message: Text = ""


class FailureKind(StrEnum):
    """Whose failure ended a run: the infrastructure's (retried under the policy's budget of the job's
    class) or the workload's own (retried only as often as the job asked)."""

    INFRASTRUCTURE = "infrastructure"
    APPLICATION = "application"


class RetryVerdict(DecisionEvent):
    """Base of the scheduler's verdict on a run that failed for a cause that may be retried: the run, where
    and why it failed, and the retries its budget allows and has used."""

    run: PosInt
    """The run that failed."""
    cluster: ClusterIdField
    node: NodeIdField | None = None
    """Where it failed, when the cluster said."""
    failure: ReasonCode
    """The failure's reason (``JobFailed.reason``)."""
    kind: FailureKind
    allowed: NonNegInt
    """Retries the budget allows for this kind of failure: the policy's for the job's priority class
    (infrastructure), the job's own ``retry.on_application_failure`` (application)."""
    message: Text
    """The verdict in plain words (``retry 2 of 3 after node n-17 was lost``)."""


class JobRetryScheduled(RetryVerdict):
    """The scheduler sends a job whose run failed back to the queue: it may be placed again (as run
    ``run + 1``) from ``not_before_ms`` on, after a backoff that grows with each retry."""

    event_type: ClassVar[str] = "io.fedsched.JobRetryScheduled"
    schema_version: ClassVar[int] = 1

    reason: ReasonCode = ReasonCode.RETRY_SCHEDULED
    attempt: PosInt
    """This retry's number among the retries of its kind (1 for the first)."""
    not_before_ms: EpochMillis
    """Logical time from which it may be placed again (the verdict's cycle time plus the backoff)."""

    @model_validator(mode="after")
    def _within_budget(self) -> JobRetryScheduled:
        if self.attempt > self.allowed:
            raise ValueError("attempt is more than allowed")
        return self


class JobRetriesExhausted(RetryVerdict):
    """The scheduler ends a job whose run failed: no retry of that kind is left (or none is allowed). The
    job's status is final: failed."""

    event_type: ClassVar[str] = "io.fedsched.JobRetriesExhausted"
    schema_version: ClassVar[int] = 1

    reason: ReasonCode = ReasonCode.RETRIES_EXHAUSTED
    used: NonNegInt
    """Retries of this kind the job had already (``allowed`` of them, or more under an older policy)."""


class TopicOffset(Frozen):
    """A position in the log: the next offset to read (exclusive), as Kafka commits it."""

    topic: TopicName
    partition: Annotated[int, Field(ge=0, le=1_000_000)]
    offset: NonNegInt


class SchedulingCycleCompleted(Event):
    """The scheduler finished a cycle: the inputs it read, the time and policy it used, what it decided."""

    event_type: ClassVar[str] = "io.fedsched.SchedulingCycleCompleted"
    schema_version: ClassVar[int] = 2
    key_field: ClassVar[str | None] = "cycle_id"
    topic: ClassVar[str] = DECISIONS.name

    cycle_id: CycleIdField
    sequence: NonNegInt
    """Cycles of one scheduler are numbered 0, 1, 2, ... in the order they ran."""
    input_offsets: Annotated[
        tuple[TopicOffset, ...], Field(max_length=1024), Unique(("topic", "partition"), ordered=True)
    ]
    """Every input partition and the offset the cycle read up to, sorted by topic and partition."""
    logical_time_ms: EpochMillis
    policy_version: PolicyVersion
    decision_count: NonNegInt
    decisions_digest: Sha256Hex | None = None
    """SHA-256 (hex) over the cycle's decision events, each one's JSON body as the codec writes it
    followed by a newline, in the order they were published; lets a replay compare in one step."""
    engine: Id | None = None
    """The scheduler's decision code that made the cycle, named by a version that changes whenever the
    same inputs would give other decision events (choices, words or figures). A replay by other code can
    differ for that reason alone: ``audit verify`` says which differences lie in such cycles. ``None``:
    recorded before engines were named (v1)."""


EXPLANATIONS_AND_CYCLES = frozenset({JobQueued.event_type, SchedulingCycleCompleted.event_type})
"""Decision records that explain a wait or record a cycle: the most frequent on the decisions topic, and
nothing a cluster connector acts on (connectors skip them undecoded)."""

__all__ = [
    "EXPLANATIONS_AND_CYCLES",
    "BindingConstraint",
    "CandidateScore",
    "ClusterWhyNot",
    "DecisionEvent",
    "FailureKind",
    "JobPlaced",
    "JobPreemptionRequested",
    "JobQueued",
    "JobReclaimRequested",
    "JobReplicasAdded",
    "JobRetriesExhausted",
    "JobRetryScheduled",
    "JobRunClosed",
    "ReclaimFigures",
    "ReplicaPlacement",
    "RetryVerdict",
    "RunPartEnd",
    "SchedulingCycleCompleted",
    "ScoreComponent",
    "SuggestedChange",
    "TopicOffset",
]
