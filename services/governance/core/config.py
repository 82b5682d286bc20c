"""The governance settings: approval thresholds, reclamation and abnormal-job rules, with their names.

Called by the governance host (which reads them from a YAML or JSON document, or takes the defaults) and
by the pure rules, which take a ``GovConfig`` as input. Pure: no I/O here; ``from_document`` takes an
already-parsed mapping. Every rule has a name, and every event a rule emits carries that name.

Durations are integer milliseconds, utilisation integer percent, amounts in the unit of the resource
(milli-GPU for ``gpu``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypeVar

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AutoApproveRule:
    """Approve a quota request by rule when it is at most ``max_amount`` for at most ``max_period_ms``.

    ``tenant`` and ``gpu_model`` of ``"*"`` match any; the most specific matching rule decides.
    """

    name: str
    resource: str = "gpu"
    tenant: str = "*"
    gpu_model: str = "*"
    max_amount: int = 0
    max_period_ms: int = 7 * 24 * HOUR_MS

    def specificity(self) -> int:
        return (self.tenant != "*") * 2 + (self.gpu_model != "*")


@dataclass(frozen=True, slots=True)
class IdleRule:
    """Reclaim a job of ``kind`` whose GPUs or NPUs stay under ``threshold_pct`` for ``idle_after_ms``: warn
    first, then ask for the reclaim ``grace_ms`` later unless they became busy again."""

    name: str = "idle-notebook"
    kind: str = "notebook"
    threshold_pct: int = 5
    idle_after_ms: int = 30 * MINUTE_MS
    grace_ms: int = 15 * MINUTE_MS


@dataclass(frozen=True, slots=True)
class RuntimeRule:
    """Stop a job of ``kind`` that runs longer than ``max_runtime_ms`` (the job's own ``max_runtime_s``
    wins when it gives one)."""

    name: str
    kind: str
    max_runtime_ms: int


@dataclass(frozen=True, slots=True)
class LeaseRule:
    """Release the allocation of a run placed but not started within ``start_lease_ms``, or running on a
    node or cluster that was lost ``lost_lease_ms`` ago."""

    name: str = "allocation-lease"
    start_lease_ms: int = 15 * MINUTE_MS
    lost_lease_ms: int = 10 * MINUTE_MS


@dataclass(frozen=True, slots=True)
class AbnormalRules:
    """Thresholds of the abnormal-job detectors (rule names are fixed: the field names, dashed)."""

    crash_loop_failures: int = 3
    crash_loop_window_ms: int = 30 * MINUTE_MS
    stuck_pending_ms: int = 2 * HOUR_MS
    suspect_node_failures: int = 3
    """Distinct jobs that failed on the node soon after starting there."""
    suspect_node_window_ms: int = HOUR_MS
    suspect_node_fast_fail_ms: int = 5 * MINUTE_MS
    """A failure this soon after the start counts as start-and-fail."""
    suspect_node_penalty_milli: int = 300
    straggler_ratio_pct: int = 50
    """A gang replica under this share of the gang's busiest replica's utilisation straggles."""
    straggler_min_busy_pct: int = 30
    """Only gangs whose busiest replica is at least this busy are judged."""


@dataclass(frozen=True, slots=True)
class GovConfig:
    auto_approve: tuple[AutoApproveRule, ...] = (AutoApproveRule("small-gpu-request", max_amount=2000),)
    idle: tuple[IdleRule, ...] = (IdleRule(),)
    runtime: tuple[RuntimeRule, ...] = ()
    lease: LeaseRule = field(default_factory=LeaseRule)
    abnormal: AbnormalRules = field(default_factory=AbnormalRules)
    principal: str = "governance"
    """Who governance acts as in the events it emits (cancel requests)."""


def from_document(doc: Mapping[str, object]) -> GovConfig:
    """A ``GovConfig`` from a parsed document; keys as the dataclass fields, lists of mappings for rules."""
    config = GovConfig()
    if "auto_approve" in doc:
        config = replace(config, auto_approve=tuple(_build(AutoApproveRule, r) for r in _list(doc["auto_approve"])))
    if "idle" in doc:
        config = replace(config, idle=tuple(_build(IdleRule, r) for r in _list(doc["idle"])))
    if "runtime" in doc:
        config = replace(config, runtime=tuple(_build(RuntimeRule, r) for r in _list(doc["runtime"])))
    if "lease" in doc:
        config = replace(config, lease=_build(LeaseRule, doc["lease"]))
    if "abnormal" in doc:
        config = replace(config, abnormal=_build(AbnormalRules, doc["abnormal"]))
    if "principal" in doc:
        config = replace(config, principal=str(doc["principal"]))
    return config


def _list(value: object) -> list[object]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list of rules, got {type(value).__name__}")
    return value


def _build(cls: type[T], value: object) -> T:
    if not isinstance(value, Mapping):
        raise ValueError(f"{cls.__name__}: expected a mapping")
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown settings {unknown}")
    settings: dict[str, Any] = {str(k): v for k, v in value.items()}
    kinds = {f.name: f.type for f in fields(cls)}  # type: ignore[arg-type]
    for name, setting in settings.items():
        _check(cls.__name__, name, kinds[name], setting)
    return cls(**settings)


def _check(owner: str, name: str, kind: object, value: object) -> None:
    """A rule's setting of the kind its field declares (every one is a string or a whole number), a
    number not negative and a percentage at most 100: a quoted or fractional amount would otherwise
    be compared with amounts and times as it is."""
    where = f"{owner}.{name}"
    if kind == "str" and not isinstance(value, str):
        raise ValueError(f"{where}: must be a string, not {value!r}")
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: must be a whole number, not {value!r}")
        if value < 0 or (name.endswith("_pct") and value > 100):
            upper = " to 100" if name.endswith("_pct") else " up"
            raise ValueError(f"{where}: must be from 0{upper}, not {value}")
