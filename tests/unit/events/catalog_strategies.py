"""Hypothesis strategies built from the catalogue's own models and their declared constraints.

Called by the property tests. ``hypothesis.strategies.from_type`` does not honour constrained
``Annotated`` types well, so ``events_of(cls)`` walks ``model_fields`` and builds each value from the
field's type and metadata: integer bounds, string length and pattern, collection size, ``Unique``,
``JsonLimits``, enums, optionals and nested models. Sizes are capped (``SIZE_CAP``, ``TEXT_CAP``) to
keep runs fast, but never below a declared minimum, and plain strings sometimes take their full length.

Cross-field rules (model validators) are invisible to the walk; ``FIXUPS`` restores them with one small
function per model class, and a test fails if a model with a validator has none. ``limits_of`` exposes
the same reading of the metadata to the test that every string, list and mapping has a limit.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Annotated, Union, get_args, get_origin

import annotated_types as at
from hypothesis import strategies as st
from pydantic import BaseModel, JsonValue, StringConstraints
from pydantic.fields import FieldInfo

from events.catalog.decisions import (
    CandidateScore,
    JobPlaced,
    JobQueued,
    JobReplicasAdded,
    JobRetryScheduled,
    JobRunClosed,
    ReplicaPlacement,
)
from events.catalog.documents import MIN_USAGE_HALF_LIFE_MS, RETRY_DEFAULTS, BudgetSpec, PolicySpec
from events.catalog.governance import (
    BudgetWindowOpened,
    QuotaLine,
    QuotaRequestApproved,
    QuotaRequestSubmitted,
    _Decided,
)
from events.catalog.inventory import ClusterNodesListed, GpuHealthReported, GpuHealthSample
from events.catalog.jobs import Interconnect, JobKind, JobSubmitted, RunEnd
from events.catalog.legacy import JobPlacedV1, JobSubmittedV1, ResourcesV1
from events.catalog.reasons import ReasonCode
from events.catalog.types import MAX_SAFE_INT, Health, JsonLimits, ResourceKind, Resources, Unique
from events.wire.envelope import Envelope

SIZE_CAP = 3
TEXT_CAP = 24
#: 9999-12-31T23:59:59.999Z, the last instant RFC 3339 (and Python's datetime) can write.
MAX_RFC3339_MS = 253_402_300_799_999

Values = dict[str, object]


@dataclass
class Limits:
    """What the metadata of one type says about its values."""

    ge: int | None = None
    le: int | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    unique: Unique | None = None
    json: JsonLimits | None = None


def limits_of(metadata: Iterable[object]) -> Limits:
    out = Limits()
    for item in metadata:
        if isinstance(item, FieldInfo):
            _merge(out, limits_of(item.metadata))
        elif isinstance(item, StringConstraints):
            out.pattern = item.pattern if isinstance(item.pattern, str) else out.pattern
            out.min_length = item.min_length if item.min_length is not None else out.min_length
            out.max_length = item.max_length if item.max_length is not None else out.max_length
        elif isinstance(item, at.Ge):
            out.ge = int(item.ge)  # type: ignore[call-overload]
        elif isinstance(item, at.Gt):
            out.ge = int(item.gt) + 1  # type: ignore[call-overload]
        elif isinstance(item, at.Le):
            out.le = int(item.le)  # type: ignore[call-overload]
        elif isinstance(item, at.Lt):
            out.le = int(item.lt) - 1  # type: ignore[call-overload]
        elif isinstance(item, at.MinLen):
            out.min_length = item.min_length
        elif isinstance(item, at.MaxLen):
            out.max_length = item.max_length
        elif isinstance(item, Unique):
            out.unique = item
        elif isinstance(item, JsonLimits):
            out.json = item
    return out


def _merge(into: Limits, other: Limits) -> None:
    for name, value in vars(other).items():
        if value is not None:
            setattr(into, name, value)


def unwrap(tp: object, metadata: tuple[object, ...] = ()) -> tuple[object, tuple[object, ...]]:
    """Strip ``Annotated`` and ``NewType`` layers, gathering metadata (inner first, outer last)."""
    while True:
        if get_origin(tp) is Annotated:
            inner, *extra = get_args(tp)
            tp, metadata = inner, (*extra, *metadata)
        elif isinstance(tp, typing.NewType):
            tp = tp.__supertype__
        else:
            return tp, metadata


def strategy_for(tp: object, metadata: tuple[object, ...] = ()) -> st.SearchStrategy[object]:
    tp, metadata = unwrap(tp, metadata)
    limits = limits_of(metadata)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        inner = st.one_of(*(strategy_for(a, metadata) for a in options))
        return st.none() | inner if len(options) < len(get_args(tp)) else inner
    if origin is typing.Literal:
        return st.sampled_from(get_args(tp))
    if isinstance(tp, type) and issubclass(tp, Enum):
        return st.sampled_from(list(tp))
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(limits.ge, limits.le)
    if tp is str:
        return _strings(limits)
    if origin is tuple:
        return _tuples(get_args(tp)[0], limits)
    if origin is dict:
        key_type, value_type = get_args(tp)
        values = _json_values() if value_type is JsonValue else strategy_for(value_type)
        return st.dictionaries(strategy_for(key_type), values, min_size=_low(limits), max_size=_cap(limits))
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return models_of(tp)
    raise TypeError(f"no strategy for {tp!r}: teach catalog_strategies about it")


def _low(limits: Limits) -> int:
    return limits.min_length or 0


def _cap(limits: Limits) -> int:
    top = SIZE_CAP if limits.max_length is None else min(limits.max_length, SIZE_CAP)
    return max(top, _low(limits))


def _strings(limits: Limits) -> st.SearchStrategy[object]:
    top, low = limits.max_length, _low(limits)
    if limits.pattern is not None:
        return st.from_regex(limits.pattern, fullmatch=True).filter(
            lambda s: low <= len(s) and (top is None or len(s) <= top)
        )
    short = st.text(min_size=low, max_size=max(low, min(top or TEXT_CAP, TEXT_CAP)))
    return short if top is None else short | full_length(top)


def full_length(size: int) -> st.SearchStrategy[str]:
    """Strings of exactly ``size`` characters, cheap to draw: a short drawn string, repeated."""
    return st.text(min_size=1, max_size=8).map(lambda s: (s * size)[:size])


def _tuples(item_type: object, limits: Limits) -> st.SearchStrategy[object]:
    items = strategy_for(item_type)
    unique = limits.unique
    low, high = _low(limits), _cap(limits)
    if unique is None:
        return st.lists(items, min_size=low, max_size=high).map(tuple)
    drawn = st.lists(items, min_size=low, max_size=high, unique_by=unique.key_of)
    if unique.ordered:
        return drawn.map(lambda xs: tuple(sorted(xs, key=lambda x: [_rank(k) for k in unique.key_of(x)])))
    return drawn.map(tuple)


def _rank(value: object) -> tuple[int, int, str]:
    # The order Unique(ordered=True) checks: integers by value, strings by code point.
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def _json_values() -> st.SearchStrategy[object]:
    leaves = (
        st.none()
        | st.booleans()
        | st.integers(-MAX_SAFE_INT, MAX_SAFE_INT)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=12)
    )
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=8,
    )


# -- cross-field rules the walk cannot see -------------------------------------------------------


def _resources(v: Values) -> Values:
    if v["gpus"] and v["gpu_milli"]:
        v["gpu_milli"] = 0
    if not v["npus"] and "npu_models" in v:  # ResourcesV1 has no NPU models
        v["npu_models"], v["min_npu_memory_mib"] = (), 0
    return v


def _job_submitted(v: Values) -> Values:
    inference = v["inference"]
    if v["kind"] is not JobKind.INFERENCE:
        v["inference"] = None
    elif inference is not None and inference.min_replicas > v["replicas"]:  # type: ignore[attr-defined]
        v["inference"] = inference.model_copy(update={"min_replicas": v["replicas"]})  # type: ignore[attr-defined]
    expected, maximum = v["expected_runtime_s"], v["max_runtime_s"]
    if expected is not None and maximum is not None and expected > maximum:  # type: ignore[operator]
        v["expected_runtime_s"], v["max_runtime_s"] = maximum, expected
    if v.get("interconnect_required") and v["interconnect"] is Interconnect.NONE:
        v["interconnect_required"] = False
    return v


def _replica(v: Values) -> Values:
    if not v["gpu_indices"]:
        v["gpu_milli_each"] = 0
    elif not v["gpu_milli_each"]:
        v["gpu_milli_each"] = 1000
    return v


def _candidate(v: Values) -> Values:
    if v["components"]:
        v["total"] = sum(c.points for c in v["components"])  # type: ignore[attr-defined]
    return v


def _placed(v: Values) -> Values:
    v["chosen"] = v["chosen"].model_copy(update={"cluster": v["cluster"]})  # type: ignore[attr-defined]
    return v


def _replicas_added(v: Values) -> Values:
    v = _placed(v)
    replicas = v["replicas"]
    v["running_replicas"] = max(v["running_replicas"], replicas[-1].replica + 1)  # type: ignore[index,attr-defined,call-overload]
    return v


def _run_closed(v: Values) -> Values:
    """The run closes as its last part ended; a reason exactly when that part failed."""
    parts = list(v["parts"])  # type: ignore[call-overload]
    last = parts[-1]
    reason = last.reason if last.outcome is RunEnd.FAILED else None
    if last.outcome is RunEnd.FAILED and reason is None:
        reason = v["reason"] or ReasonCode.NODE_FAILURE
    parts[-1] = last.model_copy(update={"reason": reason})
    v["parts"] = tuple(parts)
    v["cluster"], v["outcome"], v["reason"] = last.cluster, last.outcome, reason
    return v


def _quota_line(v: Values) -> Values:
    if v["resource"] not in (ResourceKind.GPU, ResourceKind.NPU):
        v["gpu_model"] = None
    if v["limit"] is not None and v["limit"] < v["guaranteed"]:  # type: ignore[operator]
        v["limit"], v["guaranteed"] = v["guaranteed"], v["limit"]
    return v


def _ordered_pair(v: Values, first: str, second: str) -> Values:
    a, b = v[first], v[second]
    if a is not None and b is not None:
        low, high = sorted((a, b))  # type: ignore[type-var]
        if low == high:
            low, high = (low - 1, high) if low > 0 else (low, high + 1)  # type: ignore[operator]
        v[first], v[second] = low, high
    return v


def _decided(v: Values) -> Values:
    if v["decided_by"] is not None and v["rule"] is not None:
        v["rule"] = None
    elif v["decided_by"] is None and v["rule"] is None:
        v["rule"] = "auto-approve"
    return v


def _approved(v: Values) -> Values:
    return _ordered_pair(_decided(v), "effective_from_ms", "expires_ms")


def _budget(v: Values) -> Values:
    if v["tenant"] is not None:
        v["cohort"] = None
    elif v["cohort"] is None:
        v["cohort"] = "cohort-a"
    return v


def _policy(v: Values) -> Values:
    half_life = v["usage_half_life_ms"]
    if isinstance(half_life, int) and 0 < half_life < MIN_USAGE_HALF_LIFE_MS:
        v["usage_half_life_ms"] = 0
    retry = v.get("retry_classes")
    if isinstance(retry, dict):  # a backoff above its cap (the class's default filling a rule left out) is refused
        v["retry_classes"] = {
            p: r
            if (m := r.over(RETRY_DEFAULTS[p])).backoff_s <= m.max_backoff_s
            else r.model_copy(update={"backoff_s": 0})
            for p, r in retry.items()
        }
    return v


def _queued(v: Values) -> Values:
    fed, own = v["federation_position"], v["tenant_queue_position"]
    if fed is not None and own is not None and own > fed:  # type: ignore[operator]
        v["federation_position"], v["tenant_queue_position"] = own, fed
    return v


def _retry(v: Values) -> Values:
    if v["attempt"] > v["allowed"]:  # type: ignore[operator]
        v["allowed"] = v["attempt"]
    return v


def _health(v: Values) -> Values:
    if not v["gpus"] and not v["npus"]:  # a report samples at least one device
        v["gpus"] = (GpuHealthSample(index=0, health=Health.OK, xid_errors=0),)
    return v


def _roster(v: Values) -> Values:
    """A part within the count, and the nodes sorted, each once."""
    parts = max(v["parts"], v["part"])
    return {**v, "parts": parts, "nodes": tuple(sorted(set(v["nodes"])))}


FIXUPS: dict[type[BaseModel], Callable[[Values], Values]] = {
    ClusterNodesListed: _roster,
    GpuHealthReported: _health,
    JobRetryScheduled: _retry,
    BudgetSpec: _budget,
    BudgetWindowOpened: lambda v: _ordered_pair(v, "start_ms", "end_ms"),
    PolicySpec: _policy,
    Resources: _resources,
    ResourcesV1: _resources,
    JobSubmitted: _job_submitted,
    JobSubmittedV1: _job_submitted,
    ReplicaPlacement: _replica,
    CandidateScore: _candidate,
    JobPlaced: _placed,
    JobPlacedV1: _placed,
    JobReplicasAdded: _replicas_added,
    JobRunClosed: _run_closed,
    JobQueued: _queued,
    QuotaLine: _quota_line,
    QuotaRequestSubmitted: lambda v: _ordered_pair(v, "period_start_ms", "period_end_ms"),
    _Decided: _decided,
    QuotaRequestApproved: _approved,
}


def fixup_for(cls: type[BaseModel]) -> Callable[[Values], Values] | None:
    """The fixup of the nearest class in the MRO that has one."""
    for klass in cls.__mro__:
        if klass in FIXUPS:
            return FIXUPS[klass]
    return None


@cache
def models_of(cls: type[BaseModel]) -> st.SearchStrategy[object]:
    fields = {name: strategy_for(f.annotation, tuple(f.metadata)) for name, f in cls.model_fields.items()}
    fix = fixup_for(cls) or (lambda v: v)
    return st.fixed_dictionaries(fields).map(lambda v: cls(**fix(dict(v))))


def events_of(cls: type[BaseModel]) -> st.SearchStrategy[object]:
    return models_of(cls)


_ENVELOPE_ID = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,255}\Z"
_attribute = st.text(min_size=1, max_size=40) | full_length(256)


def envelopes(events: st.SearchStrategy[object]) -> st.SearchStrategy[Envelope]:
    return st.builds(
        Envelope,
        id=st.from_regex(_ENVELOPE_ID, fullmatch=True),
        time_ms=st.integers(0, MAX_RFC3339_MS),
        data=events,
        source=_attribute,
        subject=st.none() | _attribute,
        tenant=st.none() | _attribute,
        correlation_id=st.none() | _attribute,
        causation_id=st.none() | _attribute,
    )
