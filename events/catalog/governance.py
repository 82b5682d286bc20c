"""Policies, tenants, cohorts, quotas, budgets and quota requests (topic ``fedsched.governance``, one
partition).

Called by the governance service and the API (which publish them), by the quota-usage projection and by
the scheduler, which decides under the policy and quotas in force at its input offsets. Policy events
are keyed by policy name, all others by tenant; the topic has one partition, so every reader sees one
order of governance changes.

Quota amounts are in the unit of their ``resource`` (see ``ResourceKind``): milli-CPU, MiB, milli-GPU,
NPUs. ``QuotaSet`` replaces the whole quota of a tenant's queue; a line that is left out has no quota.

Configuration documents (``events.catalog.documents``) applied through the API are published as these
events, one per change, each with a ``change`` (``DocumentChange``: which document, its generation, its
author from the caller's token, the fields it changed, and whether it was deleted): a ``Policy`` as
``PolicyConfigured``, a ``Tenant`` as ``TenantRegistered``, a ``Cohort`` as ``CohortConfigured``, a
``Quota`` as ``QuotaSet`` and a ``Budget`` as ``BudgetSet``. A ``QuotaSet`` without a change is
governance's (a grant's start or end) or the API's ``SetQuota``.

Retired fields stay reserved (never reused with another meaning): none yet.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from events.catalog.base import Event
from events.catalog.documents import BudgetSpec, BudgetWindow, DocumentChange
from events.catalog.images import ImagePolicy
from events.catalog.jobs import PriorityClass
from events.catalog.reasons import ReasonCode
from events.catalog.topics import GOVERNANCE
from events.catalog.types import (
    ClusterIdField,
    EpochMillis,
    Frozen,
    GpuModel,
    Id,
    JobIdField,
    Labels,
    Name,
    NodeIdField,
    NonNegInt,
    Percent,
    Permille,
    PolicyDocument,
    PolicyVersion,
    PosInt,
    Principal,
    QueueId,
    QueueIdField,
    QuotaLine,
    QuotaRequestIdField,
    ResourceKind,
    SignedInt,
    TenantIdField,
    Text,
    Unique,
)


class PolicyConfigured(Event):
    """An operator put a scheduling policy version in force (its weights and settings)."""

    event_type: ClassVar[str] = "io.fedsched.PolicyConfigured"
    schema_version: ClassVar[int] = 2
    key_field: ClassVar[str | None] = "policy"
    topic: ClassVar[str] = GOVERNANCE.name

    policy: Id
    """The policy's name; one name has a sequence of versions."""
    policy_version: PolicyVersion
    description: Text = ""
    document: PolicyDocument
    """The weights and settings, as the scheduler's policy configuration reads them."""
    configured_by: Principal
    change: DocumentChange | None = None
    """The ``Policy`` document this puts in force (``None``: published by something else)."""


class TenantRegistered(Event):
    """A tenant (a team) was registered or its settings changed."""

    event_type: ClassVar[str] = "io.fedsched.TenantRegistered"
    schema_version: ClassVar[int] = 3
    key_field: ClassVar[str | None] = "tenant"
    topic: ClassVar[str] = GOVERNANCE.name

    tenant: TenantIdField
    display_name: Name
    cohort: Id | None = None
    """Tenants of one cohort lend each other their unused guaranteed quota."""
    weight: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    """Relative fair-share weight: a tenant of weight 2 gets twice the share of a tenant of weight 1."""
    labels: Labels = Field(default_factory=dict)
    hot_model_cap_milli: NonNegInt | None = None
    """The most milli-GPU of hot GPU models the tenant may hold; ``None``: the policy's cap."""
    default_priority_class: PriorityClass | None = None
    """The priority class of the tenant's jobs that name none; ``None``: standard."""
    images: ImagePolicy | None = None
    """Where the tenant's images may come from and its pull secrets; ``None``: no limit of its own."""
    change: DocumentChange | None = None
    """The ``Tenant`` document this registers (``None``: published by something else). Deleted: the
    tenant's settings go back to the defaults (weight 1, no cohort, no cap of its own)."""


class CohortConfigured(Event):
    """A cohort (tenants that lend each other their unused guaranteed quota) was declared, changed or
    deleted; a ``Tenant`` names its cohort."""

    event_type: ClassVar[str] = "io.fedsched.CohortConfigured"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "cohort"
    topic: ClassVar[str] = GOVERNANCE.name

    cohort: Id
    display_name: Name
    description: Text = ""
    change: DocumentChange


class BudgetSet(Event):
    """A GPU-hour budget of a tenant or a cohort was set, changed or deleted (the ``Budget`` document)."""

    event_type: ClassVar[str] = "io.fedsched.BudgetSet"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "budget"
    topic: ClassVar[str] = GOVERNANCE.name

    budget: Id
    spec: BudgetSpec
    change: DocumentChange


class BudgetWindowOpened(Event):
    """A budget's calendar window began (its day, week or month in its time zone): its GPU-hours are
    counted afresh from ``start_ms``. Published by governance as the log's time enters a window, and for a
    budget's first window once it is set; the scheduler enforces a hard budget within the window in
    force."""

    event_type: ClassVar[str] = "io.fedsched.BudgetWindowOpened"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "budget"
    topic: ClassVar[str] = GOVERNANCE.name

    budget: Id
    window: BudgetWindow
    label: Annotated[str, Field(min_length=1, max_length=16)]
    """``2026-12`` (a month), ``2026-W49`` (a week), ``2026-12-04`` (a day)."""
    start_ms: EpochMillis
    end_ms: EpochMillis
    opened_by: Principal

    @model_validator(mode="after")
    def _ordered(self) -> BudgetWindowOpened:
        if self.end_ms <= self.start_ms:
            raise ValueError("end_ms must be after start_ms")
        return self


class QuotaSet(Event):
    """The quota of a tenant's queue was set; it replaces the queue's previous quota entirely."""

    event_type: ClassVar[str] = "io.fedsched.QuotaSet"
    schema_version: ClassVar[int] = 2
    key_field: ClassVar[str | None] = "tenant"
    topic: ClassVar[str] = GOVERNANCE.name

    tenant: TenantIdField
    queue: QueueIdField = QueueId("default")
    """``default`` is the tenant's default queue."""
    lines: Annotated[tuple[QuotaLine, ...], Field(max_length=64), Unique(("resource", "gpu_model"))]
    set_by: Principal
    request_id: QuotaRequestIdField | None = None
    """The approved quota request this comes from, if any."""
    change: DocumentChange | None = None
    """The ``Quota`` document this sets (``None``: a grant's start or end, or ``SetQuota``). Deleted: the
    queue has no quota of its own (``lines`` is empty)."""


class QuotaRequestSubmitted(Event):
    """A tenant asked for more quota of one resource for a period."""

    event_type: ClassVar[str] = "io.fedsched.QuotaRequestSubmitted"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "tenant"
    topic: ClassVar[str] = GOVERNANCE.name

    request_id: QuotaRequestIdField
    tenant: TenantIdField
    queue: QueueIdField = QueueId("default")
    resource: ResourceKind
    gpu_model: GpuModel | None = None
    amount: PosInt
    """In the unit of ``resource``."""
    period_start_ms: EpochMillis
    period_end_ms: EpochMillis
    justification: Annotated[str, Field(min_length=1, max_length=4096)]
    requester: Principal

    @model_validator(mode="after")
    def _period(self) -> QuotaRequestSubmitted:
        if self.period_end_ms <= self.period_start_ms:
            raise ValueError("period_end_ms must be after period_start_ms")
        return self


class _Decided(Event):
    """Base of the answers to a quota request: by a person, or by an auto-approval rule."""

    key_field: ClassVar[str | None] = "tenant"
    topic: ClassVar[str] = GOVERNANCE.name

    request_id: QuotaRequestIdField
    tenant: TenantIdField
    decided_by: Principal | None = None
    """The person who decided, or ``None`` when ``rule`` decided."""
    rule: Id | None = None
    """The automatic rule that decided, or ``None`` when a person did."""
    comment: Text = ""

    @model_validator(mode="after")
    def _one_decider(self) -> _Decided:
        if (self.decided_by is None) == (self.rule is None):
            raise ValueError("exactly one of decided_by and rule must be given")
        return self


class QuotaRequestApproved(_Decided):
    """A quota request was approved, perhaps for less than was asked."""

    event_type: ClassVar[str] = "io.fedsched.QuotaRequestApproved"
    schema_version: ClassVar[int] = 1

    approved_amount: PosInt
    """In the unit of the request's resource; at most what was asked."""
    effective_from_ms: EpochMillis
    expires_ms: EpochMillis | None = None
    """``None``: does not expire."""

    @model_validator(mode="after")
    def _window(self) -> QuotaRequestApproved:
        if self.expires_ms is not None and self.expires_ms <= self.effective_from_ms:
            raise ValueError("expires_ms must be after effective_from_ms")
        return self


class QuotaRequestRejected(_Decided):
    """A quota request was declined."""

    event_type: ClassVar[str] = "io.fedsched.QuotaRequestRejected"
    schema_version: ClassVar[int] = 1

    reason: ReasonCode = ReasonCode.QUOTA_REQUEST_DENIED


class FindingKind(StrEnum):
    """What a governance rule found or did."""

    CRASH_LOOP = "crash_loop"
    STUCK_PENDING = "stuck_pending"
    SUSPECT_NODE = "suspect_node"
    STRAGGLING_GANG = "straggling_gang"
    IDLE_RECLAIM = "idle_reclaim"
    RUNTIME_EXCEEDED = "runtime_exceeded"
    LEASE_EXPIRED = "lease_expired"
    BUDGET_WARNING = "budget_warning"
    """A budget's window has used 80% of its GPU-hours."""
    BUDGET_SPENT = "budget_spent"
    """A budget's window has used all of its GPU-hours."""


class Figure(Frozen):
    """One number behind a finding, as an integer in the unit its name ends with (``_ms``, ``_pct``...)."""

    name: Id
    value: SignedInt


class GovernanceFinding(Event):
    """A governance rule found an abnormal job or node, or acted on one: the rule and the figures behind it.

    Findings about a tenant's job are keyed by tenant; findings about a node carry no tenant.
    ``profile_penalty_milli`` is what the scheduler may take off a suspect node's profile score.
    """

    event_type: ClassVar[str] = "io.fedsched.GovernanceFinding"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "tenant"
    topic: ClassVar[str] = GOVERNANCE.name

    finding_id: Id
    """Derived from the facts that triggered it, so a replay finds the same finding under the same id."""
    kind: FindingKind
    rule: Id
    reason: ReasonCode
    tenant: TenantIdField | None = None
    job_id: JobIdField | None = None
    cluster: ClusterIdField | None = None
    node: NodeIdField | None = None
    figures: Annotated[tuple[Figure, ...], Field(max_length=16), Unique(("name",))] = ()
    profile_penalty_milli: Permille = 0
    observed_ms: EpochMillis
    """Log time at which the rule's condition was met."""
    message: Text


class JobIdleWarning(Event):
    """A job's GPUs stayed idle past the rule's threshold: it will be reclaimed at ``reclaim_at_ms`` unless
    it becomes busy again."""

    event_type: ClassVar[str] = "io.fedsched.JobIdleWarning"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "tenant"
    topic: ClassVar[str] = GOVERNANCE.name

    job_id: JobIdField
    tenant: TenantIdField
    cluster: ClusterIdField
    run: PosInt = 1
    rule: Id
    idle_since_ms: EpochMillis
    threshold_pct: Percent
    """Utilisation under this counts as idle."""
    mean_utilisation_pct: Percent
    """Mean GPU utilisation of the job over the idle stretch."""
    idle_ms: NonNegInt
    reclaim_at_ms: EpochMillis
    message: Text = ""


class GovernanceClockTicked(Event):
    """Time passed with nothing else logged while a rule waits for a moment (a quota grant's start or
    end, a runtime limit, an allocation lease, an idle stretch): governance notes the moment, so the rule
    acts on time on a quiet log. Carries only its time; every reader of time takes it from the log."""

    event_type: ClassVar[str] = "io.fedsched.GovernanceClockTicked"
    schema_version: ClassVar[int] = 1
    key_field: ClassVar[str | None] = "ticked_by"
    topic: ClassVar[str] = GOVERNANCE.name

    ticked_by: Id = "governance"
    """The governance deployment that noted it."""


__all__ = [
    "BudgetSet",
    "BudgetWindowOpened",
    "CohortConfigured",
    "Figure",
    "FindingKind",
    "GovernanceClockTicked",
    "GovernanceFinding",
    "JobIdleWarning",
    "PolicyConfigured",
    "QuotaLine",
    "QuotaRequestApproved",
    "QuotaRequestRejected",
    "QuotaRequestSubmitted",
    "QuotaSet",
    "TenantRegistered",
]
