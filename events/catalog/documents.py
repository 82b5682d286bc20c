"""Configuration documents: what operators write to configure fedsched, as kubectl manifests are written.

Called by the API (which validates documents server-side and publishes one event per change), by the CLI
(``fedsched apply|diff|get|delete``, which reads YAML files and prints documents), by
``events.catalog.configuration`` (documents to and from their events) and by the scheduler, governance
and the projections through the events that carry them. Pure: no I/O, clock or environment.

A document is ``api_version: fedsched.io/v1``, a ``kind``, ``metadata: {name, labels}`` and a ``spec``
whose fields depend on the kind:

- ``Tenant``: a team: its fair-share weight, cohort, cap on hot GPU models, default priority class and
  image policy (allowed registries, pull secrets); its name is the tenant id.
- ``Cohort``: tenants that lend each other their unused guaranteed quota; its name is what a Tenant's
  ``cohort`` names.
- ``Quota``: the quota of one tenant's queue (the lines of ``QuotaSet``); one document per queue.
- ``Budget``: GPU-hours a tenant or a cohort may use per calendar window (``day``, ``week``, ``month``
  in a timezone), ``hard`` (a job that would exceed it waits) or ``soft`` (findings at 80% and 100%).
- ``Policy``: the scheduling policy (node policy, federation weights, fair-share half-life, preemption
  and backfill settings); one is in force at a time.

Every error names the document (its position in the request, kind and name), the field and the reason
(``DocumentError``). ``changes`` is the difference between two versions of a document, field by field:
what an event records besides its author.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, JsonValue, StringConstraints, ValidationError, model_validator

from events.catalog.images import ImagePolicy
from events.catalog.jobs import PriorityClass
from events.catalog.profiles import HOT_PRESSURE_MILLI
from events.catalog.types import (
    MAX_SAFE_INT,
    DurationSeconds,
    Frozen,
    GpuModel,
    Id,
    Labels,
    Name,
    NonNegInt,
    Percent,
    Permille,
    PosInt,
    Principal,
    QueueId,
    QueueIdField,
    QuotaLine,
    TenantIdField,
    Text,
    Unique,
)

API_VERSION = "fedsched.io/v1"
MAX_DOCUMENTS = 256
"""Documents one request may apply."""
MAX_CHANGE_TEXT = 4096
"""A value in a recorded change is cut to this many characters (with the cut said)."""
MAX_CHANGES = 512
"""Fields one recorded change names at most."""


class Kind(StrEnum):
    TENANT = "Tenant"
    COHORT = "Cohort"
    QUOTA = "Quota"
    BUDGET = "Budget"
    POLICY = "Policy"


class Metadata(Frozen):
    name: Id
    labels: Labels = Field(default_factory=dict)


# -- specs ------------------------------------------------------------------------------------------


class TenantSpec(Frozen):
    display_name: Name | None = None
    """Shown in reports; the document's name when left out."""
    cohort: Id | None = None
    """The Cohort whose members lend each other their unused guaranteed quota."""
    weight: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    """Relative fair-share weight: a tenant of weight 2 gets twice the share of a tenant of weight 1."""
    hot_model_cap_milli: NonNegInt | None = None
    """The most milli-GPU of hot GPU models (allocated beyond the policy's ``hot_pressure_milli``) the
    tenant may hold, and as many milli-NPU (1000 an NPU) of hot NPU models, counted apart; ``None``: the
    policy's ``hot_model_cap_milli``."""
    default_priority_class: PriorityClass | None = None
    """The priority class of the tenant's jobs that name none; ``None``: standard."""
    images: ImagePolicy | None = None
    """Where the tenant's images may come from and the secrets its pods pull them with (``None``: no
    limit of the tenant's own; see ``events.catalog.images``)."""


class CohortSpec(Frozen):
    display_name: Name | None = None
    description: Text = ""


class QuotaSpec(Frozen):
    tenant: TenantIdField
    queue: QueueIdField = QueueId("default")
    lines: Annotated[tuple[QuotaLine, ...], Field(max_length=64), Unique(("resource", "gpu_model"))]
    """Amounts in the unit of the resource: cpu milli-CPU, memory MiB, gpu milli-GPU, npu NPUs."""


class BudgetWindow(StrEnum):
    DAY = "day"
    WEEK = "week"
    """Monday to Monday."""
    MONTH = "month"


class BudgetMode(StrEnum):
    HARD = "hard"
    """A job is not started while the GPU-hours it is expected to use exceed what is left."""
    SOFT = "soft"
    """Jobs start; governance raises findings at 80% and 100%."""


_ZONE = r"^(UTC|[A-Za-z][A-Za-z0-9_+-]{0,30}(/[A-Za-z0-9_+-]{1,30}){0,2})$"
Timezone = Annotated[str, StringConstraints(pattern=_ZONE)]
"""An IANA time zone name (``UTC``, ``Europe/Paris``); whether it exists is checked where the zone
database is (the API)."""


class BudgetSpec(Frozen):
    tenant: TenantIdField | None = None
    cohort: Id | None = None
    """Exactly one of ``tenant`` and ``cohort``: a cohort's budget is shared by its members."""
    window: BudgetWindow
    timezone: Timezone = "UTC"
    gpu_hours: Annotated[int, Field(ge=1, le=1_000_000_000)]
    """Whole GPU-hours per window (a GPU held for an hour is one, a half GPU for two hours is one)."""
    mode: BudgetMode = BudgetMode.HARD

    @model_validator(mode="after")
    def _one_owner(self) -> BudgetSpec:
        if (self.tenant is None) == (self.cohort is None):
            raise ValueError("name exactly one of tenant and cohort")
        return self


class NodePolicyName(StrEnum):
    """How a node is chosen for a replica (the scheduler's ``NodePolicy``)."""

    FRAGMENTATION = "fgd"
    FGD_PAPER = "fgd-paper"
    BEST_FIT = "bestfit"
    PACKING = "packing"
    CLUSTERING = "clustering"
    SPREAD = "spread"
    RANDOM = "random"
    DOT_PRODUCT = "dotprod"


class FederationWeights(Frozen):
    """Weights of the federation's cluster score; each term is normalised to 0..1000 before weighting."""

    fit: NonNegInt = 6
    locality: NonNegInt = 3
    congestion: NonNegInt = 1
    hot_spot: NonNegInt = 2
    health: NonNegInt = 2
    cost: NonNegInt = 1


class TypicalShape(Frozen):
    cpu_milli: NonNegInt
    gpu_milli: Annotated[int, Field(ge=0, le=1000)]
    gpus: Annotated[int, Field(ge=0, le=64)]
    models: Annotated[tuple[GpuModel, ...], Field(max_length=32)] = ()
    weight: PosInt = 1


MIN_USAGE_HALF_LIFE_MS = 60_000
MAX_GRACE_PERIOD_S = 7 * 24 * 3600


class PreemptionClassSpec(Frozen):
    """How the jobs of one priority class may be preempted (the class of the job asked to stop)."""

    interruption_budget: Annotated[int, Field(ge=0, le=1000)] = 3
    """How many runs of one job may be preempted or reclaimed (0: never preempted)."""
    grace_period_s: Annotated[int, Field(ge=0, le=MAX_GRACE_PERIOD_S)] = 30
    """How long a job asked to stop is given to checkpoint and stop."""
    min_runtime_s: DurationSeconds = 0
    """How long a run must have run since its start before it may be preempted."""


def _every_class() -> dict[PriorityClass, PreemptionClassSpec]:
    return {p: PreemptionClassSpec() for p in PriorityClass}


MAX_RETRIES = 100
MAX_BACKOFF_S = 24 * 3600


class RetryClassSpec(Frozen):
    """How the jobs of one priority class are retried after the infrastructure failed their run (a node
    failed, was lost or removed, a GPU failed, an eviction). Retry n waits ``backoff_s * 2**(n-1)``
    seconds after the failure, at most ``max_backoff_s``."""

    max_retries: Annotated[int, Field(ge=0, le=MAX_RETRIES)] | None = None
    """Retries of one job (0: none, the job ends failed at the first such failure)."""
    backoff_s: Annotated[int, Field(ge=0, le=MAX_BACKOFF_S)] | None = None
    max_backoff_s: Annotated[int, Field(ge=0, le=MAX_BACKOFF_S)] | None = None
    """A rule left out (``None``) is the class's default (``RETRY_DEFAULTS``)."""

    def over(self, default: RetryClassSpec) -> RetryClassSpec:
        """These rules, the ones left out taken from ``default``."""
        given = {name: value for name, value in self.model_dump().items() if value is not None}
        return default.model_copy(update=given)


RETRY_DEFAULTS: Mapping[PriorityClass, RetryClassSpec] = {
    PriorityClass.PRODUCTION_INFERENCE: RetryClassSpec(max_retries=10, backoff_s=5, max_backoff_s=300),
    PriorityClass.CRITICAL_TRAINING: RetryClassSpec(max_retries=3, backoff_s=30, max_backoff_s=600),
    PriorityClass.STANDARD: RetryClassSpec(max_retries=2, backoff_s=60, max_backoff_s=900),
    PriorityClass.BEST_EFFORT: RetryClassSpec(max_retries=1, backoff_s=120, max_backoff_s=1800),
}
"""Each class's retry rules unless the policy names them (the scheduler's ``DEFAULT_RETRY_RULES``)."""


def _every_retry_class() -> dict[PriorityClass, RetryClassSpec]:
    return dict(RETRY_DEFAULTS)


AgingCeiling = Literal[PriorityClass.CRITICAL_TRAINING, PriorityClass.STANDARD, PriorityClass.BEST_EFFORT]


class PolicySpec(Frozen):
    """The scheduling policy; every setting the scheduler's ``PolicyConfig`` has, with its default."""

    node_policy: NodePolicyName = NodePolicyName.FRAGMENTATION
    seed: NonNegInt = 0
    """For the random node policy and tie-breaking only."""
    typical_shapes: Annotated[tuple[TypicalShape, ...], Field(max_length=256)] = ()
    """Replica shapes fragmentation is measured against; empty: those of the running and pending jobs."""
    typical_coverage_pct: Percent = 95
    cluster_weights: FederationWeights = FederationWeights()
    """The federation weights: how clusters are ranked for a job."""
    degraded_gpu_penalty: NonNegInt = 1_000_000
    frag_window_milli: NonNegInt = 60
    frag_share_window_milli: NonNegInt = 0
    cross_domain_penalty: NonNegInt = 500_000
    """For a job that prefers (not requires) its interconnect: what placing a replica outside the first
    replica's NVLink domain or RDMA fabric (the kind it asks for) costs; a node on none shares none."""
    usage_half_life_ms: NonNegInt = 7 * 24 * 3600 * 1000
    """Fair share's half-life: past usage counts half after this long (0: never decays)."""
    aging_step_ms: PosInt = 3600 * 1000
    aging_unit_milli: Permille = 100
    class_aging_step_ms: NonNegInt = 4 * 3600 * 1000
    """Across classes: each full step of waiting orders a job as the next priority class up (0: never),
    up to ``class_aging_ceiling``; the order only: its preemption rules stay its own class's."""
    class_aging_ceiling: AgingCeiling = PriorityClass.STANDARD
    """The most important class a job is ordered as by waiting: ``standard`` (best effort catches up with
    standard work), ``critical_training`` (standard work catches up with critical training too) or
    ``best_effort`` (no aging across classes). Never production inference."""
    hot_pressure_milli: Permille = HOT_PRESSURE_MILLI
    """A GPU or NPU model this share of whose working capacity is allocated is hot (``profiles.is_hot``)."""
    hot_model_cap_milli: NonNegInt | None = None
    """The most milli-GPU of hot GPU models a tenant may hold, and as many milli-NPU of hot NPU models
    (counted apart), unless its own ``Tenant`` says otherwise; ``None``: no cap."""
    preemption: bool = True
    max_victims: NonNegInt = 16
    preemption_classes: dict[PriorityClass, PreemptionClassSpec] = Field(default_factory=_every_class)
    """Per priority class of the victim; a class left out keeps the defaults."""
    max_preemptions_per_cycle: PosInt | None = None
    """Jobs asked to stop in one scheduling cycle at most (``None``: no limit)."""
    max_preemptions_per_tenant_hour: PosInt | None = None
    """Jobs of one tenant asked to stop within an hour at most (``None``: no limit)."""
    backfill: bool = True
    reservation_min_gpus: NonNegInt = 8
    default_runtime_s: NonNegInt = 3600
    max_decisions: PosInt = 10_000
    estimate_limit: NonNegInt = 64
    retry_classes: dict[PriorityClass, RetryClassSpec] = Field(default_factory=_every_retry_class)
    """Per priority class of the job whose run the infrastructure failed; a class left out keeps its
    defaults (``RETRY_DEFAULTS``)."""

    @model_validator(mode="after")
    def _every_class_named(self) -> PolicySpec:
        if self.preemption_classes.keys() != set(PriorityClass):  # spelt out, so get shows what is in force
            named = {**_every_class(), **self.preemption_classes}
            object.__setattr__(self, "preemption_classes", {p: named[p] for p in PriorityClass})
        retry = {p: self.retry_classes.get(p, RetryClassSpec()).over(RETRY_DEFAULTS[p]) for p in PriorityClass}
        for p, rules in retry.items():
            if (rules.backoff_s or 0) > (rules.max_backoff_s or 0):
                raise ValueError(f"retry_classes.{p.value}: backoff_s is more than max_backoff_s")
        if retry != self.retry_classes:  # spelt out, so get shows what is in force
            object.__setattr__(self, "retry_classes", retry)
        return self

    @model_validator(mode="after")
    def _half_life(self) -> PolicySpec:
        if 0 < self.usage_half_life_ms < MIN_USAGE_HALF_LIFE_MS:
            # Fair share keeps one sum per 32 half-lives: a half-life of milliseconds would make every
            # cycle read them all.
            raise ValueError(f"usage_half_life_ms must be 0 or at least {MIN_USAGE_HALF_LIFE_MS} ms")
        return self


SPECS: Mapping[Kind, type[Frozen]] = {
    Kind.TENANT: TenantSpec,
    Kind.COHORT: CohortSpec,
    Kind.QUOTA: QuotaSpec,
    Kind.BUDGET: BudgetSpec,
    Kind.POLICY: PolicySpec,
}


class Document(BaseModel):
    """One document, its spec validated for its kind."""

    model_config: ClassVar[Any] = Frozen.model_config

    api_version: Literal["fedsched.io/v1"]
    kind: Kind
    metadata: Metadata
    spec: TenantSpec | CohortSpec | QuotaSpec | BudgetSpec | PolicySpec

    @property
    def name(self) -> str:
        return self.metadata.name

    def spec_json(self) -> dict[str, JsonValue]:
        """The spec with every default filled in, as JSON values: what is compared and recorded."""
        dumped: dict[str, JsonValue] = self.spec.model_dump(mode="json")
        return dumped

    def body(self) -> dict[str, JsonValue]:
        """The whole document as JSON values (what ``get`` prints)."""
        return {
            "api_version": self.api_version,
            "kind": self.kind.value,
            "metadata": self.metadata.model_dump(mode="json"),
            "spec": self.spec_json(),
        }


class DocumentError(ValueError):
    """A document refused: where it is among those sent, what it is, the field and the reason."""

    def __init__(self, index: int, kind: str, name: str, field: str, reason: str) -> None:
        self.index, self.kind, self.name, self.field, self.reason = index, kind, name, field, reason
        what = f"{kind or 'document'} {name!r}" if name else (kind or "document")
        super().__init__(f"document {index + 1} ({what}): {field}: {reason}")


def parse(body: Any, index: int = 0) -> Document:
    """A document from its JSON values (a YAML document read as JSON), or ``DocumentError``."""
    if not isinstance(body, dict):
        raise DocumentError(index, "", "", "(document)", "must be a mapping with api_version, kind, metadata, spec")
    kind_text = body.get("kind")
    metadata = body.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    kind_name, doc_name = (str(kind_text)[:64] if kind_text is not None else ""), (str(name)[:128] if name else "")
    unknown = sorted(set(body) - {"api_version", "kind", "metadata", "spec"})
    if unknown:
        raise DocumentError(index, kind_name, doc_name, unknown[0], "unknown field (api_version, kind, metadata, spec)")
    if body.get("api_version") != API_VERSION:
        raise DocumentError(index, kind_name, doc_name, "api_version", f"must be {API_VERSION}")
    if not isinstance(kind_text, str) or kind_text not in Kind._value2member_map_:
        raise DocumentError(index, kind_name, doc_name, "kind", f"must be one of {', '.join(k.value for k in Kind)}")
    kind = Kind(kind_text)
    try:
        meta = Metadata.model_validate_json(json.dumps(metadata))
        spec = SPECS[kind].model_validate_json(json.dumps(body.get("spec", {})))
    except ValidationError as error:
        where = "metadata" if not _valid(Metadata, metadata) else "spec"
        first = error.errors()[0]
        path = ".".join([where, *(str(p) for p in first["loc"])])
        raise DocumentError(index, kind_name, doc_name, path, first["msg"]) from None
    except (TypeError, ValueError) as error:  # not JSON values at all
        raise DocumentError(index, kind_name, doc_name, "(document)", str(error)[:200]) from None
    return Document(api_version=API_VERSION, kind=kind, metadata=meta, spec=spec)


def _valid(model: type[Frozen], value: Any) -> bool:
    try:
        model.model_validate_json(json.dumps(value))
    except (ValidationError, TypeError, ValueError):
        return False
    return True


def parse_all(bodies: Sequence[Any]) -> list[Document]:
    """Every document, or the first ``DocumentError``; a kind and name given twice is refused."""
    if len(bodies) > MAX_DOCUMENTS:
        raise DocumentError(MAX_DOCUMENTS, "", "", "(documents)", f"more than {MAX_DOCUMENTS} in one request")
    documents: list[Document] = []
    seen: dict[tuple[Kind, str], int] = {}
    for index, body in enumerate(bodies):
        document = parse(body, index)
        key = (document.kind, document.name)
        if key in seen:
            also = f"given twice (also document {seen[key] + 1})"
            raise DocumentError(index, document.kind.value, document.name, "metadata.name", also)
        seen[key] = index
        documents.append(document)
    return documents


# -- changes ----------------------------------------------------------------------------------------


ChangePath = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\[\]/-]{1,256}$")]
"""A dotted path into a document (``spec.weight``, ``metadata.labels.fedsched.io/team``)."""


class FieldChange(Frozen):
    """One field that a change gave another value (JSON text; ``None``: absent)."""

    path: ChangePath
    before: Annotated[str, Field(max_length=MAX_CHANGE_TEXT + 32)] | None = None
    after: Annotated[str, Field(max_length=MAX_CHANGE_TEXT + 32)] | None = None


class DocumentChange(Frozen):
    """What an event that carries a document records besides its content: which document, its generation
    (1 when created, one more at each change), who changed it (from the caller's token) and how."""

    kind: Kind
    name: Id
    generation: Annotated[int, Field(ge=1, le=MAX_SAFE_INT)]
    author: Principal
    changes: Annotated[tuple[FieldChange, ...], Field(max_length=MAX_CHANGES)] = ()
    labels: Labels = Field(default_factory=dict)
    deleted: bool = False
    """The document was deleted: its kind's settings go back to what they are without it."""


def changes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> tuple[FieldChange, ...]:
    """What differs between two versions (``None``: there was none, or there is none now), in path
    order: mappings are compared key by key down to their values, anything else (a list) whole."""
    old, new = _leaves(before or {}), _leaves(after or {})
    paths = sorted(p for p in old.keys() | new.keys() if old.get(p, _ABSENT) != new.get(p, _ABSENT))
    return tuple(
        FieldChange(path=path[:256], before=_text(old.get(path, _ABSENT)), after=_text(new.get(path, _ABSENT)))
        for path in paths[:MAX_CHANGES]
    )


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in value.items():
        out.update(_leaves(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


_ABSENT: Any = object()


def _text(value: Any) -> str | None:
    if value is _ABSENT:
        return None
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    if len(text) > MAX_CHANGE_TEXT:
        return text[:MAX_CHANGE_TEXT] + f"... ({len(text)} characters)"
    return text


__all__ = [
    "API_VERSION",
    "MAX_DOCUMENTS",
    "RETRY_DEFAULTS",
    "SPECS",
    "BudgetMode",
    "BudgetSpec",
    "BudgetWindow",
    "CohortSpec",
    "Document",
    "DocumentChange",
    "DocumentError",
    "FederationWeights",
    "FieldChange",
    "Kind",
    "Metadata",
    "NodePolicyName",
    "PolicySpec",
    "PreemptionClassSpec",
    "QuotaSpec",
    "RetryClassSpec",
    "TenantSpec",
    "TypicalShape",
    "changes",
    "parse",
    "parse_all",
]
