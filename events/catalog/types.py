"""Value types shared by the catalogue: typed identifiers, bounded strings and lists, resources.

Called by every catalogue module and by the tests' strategy builder, which reads the same constraints.
Every string, list and mapping carries a limit so a hostile or broken producer cannot make a consumer
allocate without bound; every quantity is an integer (milli-units, MiB, counts, degrees), never a float,
so sums are exact and replay is deterministic. Integers stay within 2**53 - 1 so that consumers whose JSON
numbers are doubles (JavaScript CloudEvents SDKs) read them exactly.

Two markers carry rules pydantic has no keyword for: ``Unique`` (items, or an attribute of items, never
repeat; optionally in increasing order) and ``JsonLimits`` (an opaque JSON document with a size and depth
limit). Mappings are re-ordered by key on validation, so equal events always encode to equal bytes.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, NewType, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    JsonValue,
    StringConstraints,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

MAX_SAFE_INT = 2**53 - 1
#: Replicas of one job. A placement of this many stays well under Kafka's default 1 MiB record limit.
MAX_REPLICAS = 4096
T = TypeVar("T")
V = TypeVar("V")

# Identifiers: lowercase DNS-label-like, so they are safe as Kafka keys, Kubernetes names and SQL values.
_ID_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$"
_ID = StringConstraints(pattern=_ID_PATTERN, min_length=1, max_length=128)
Id = Annotated[str, _ID]

JobId = NewType("JobId", str)
ClusterId = NewType("ClusterId", str)
NodeId = NewType("NodeId", str)
TenantId = NewType("TenantId", str)
QueueId = NewType("QueueId", str)
CycleId = NewType("CycleId", str)
QuotaRequestId = NewType("QuotaRequestId", str)

JobIdField = Annotated[JobId, _ID]
ClusterIdField = Annotated[ClusterId, _ID]
NodeIdField = Annotated[NodeId, _ID]
TenantIdField = Annotated[TenantId, _ID]
QueueIdField = Annotated[QueueId, _ID]
CycleIdField = Annotated[CycleId, _ID]
QuotaRequestIdField = Annotated[QuotaRequestId, _ID]
#: A policy version as the scheduler names it (for example ``policy-v7``).
PolicyVersion = Annotated[str, _ID]

Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
ShortText = Annotated[str, StringConstraints(max_length=256)]
Text = Annotated[str, StringConstraints(max_length=4096)]
#: A person or service account (``alice@example.com``, ``system:serviceaccount:ml:pipeline``).
Principal = Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]+$", min_length=1, max_length=256)]
#: A client's idempotency key (UUIDs, ULIDs, ``pipeline/run-7/step-2``).
RequestId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")]
#: A dotted path to a field of a request (``resources.gpus``).
FieldPath = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\[\]-]{1,256}$")]
GpuModel = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")]
CurrencyCode = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]
TopicName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,249}$")]
Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
LabelKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$")]
LabelValue = Annotated[str, StringConstraints(max_length=256)]

NonNegInt = Annotated[int, Field(ge=0, le=MAX_SAFE_INT)]
PosInt = Annotated[int, Field(ge=1, le=MAX_SAFE_INT)]
SignedInt = Annotated[int, Field(ge=-MAX_SAFE_INT, le=MAX_SAFE_INT)]
#: Milli-GPU: 1000 is one whole GPU.
MilliGpu = Annotated[int, Field(ge=0, le=1000)]
#: A ratio in thousandths: 0 is none, 1000 is all.
Permille = Annotated[int, Field(ge=0, le=1000)]
Percent = Annotated[int, Field(ge=0, le=100)]
TemperatureC = Annotated[int, Field(ge=-60, le=200)]
#: Index of a device (GPU or NPU) inside its node, as the driver numbers it.
DeviceIndex = Annotated[int, Field(ge=0, le=255)]
#: Logical or wall time as integer milliseconds since the Unix epoch (events carry time as data, the
#: pure core never reads a clock).
EpochMillis = Annotated[int, Field(ge=0, le=MAX_SAFE_INT)]
DurationSeconds = Annotated[int, Field(ge=0, le=10 * 365 * 24 * 3600)]
ExitCode = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]


@dataclass(frozen=True, slots=True)
class Unique:
    """Items of a tuple never repeat; with ``keys``, the tuple of those attributes never repeats.

    ``ordered`` also asks for strictly increasing order: the one canonical form of a list whose order
    carries no meaning, so equal facts encode to equal bytes (keys must then be integers or strings).
    """

    keys: tuple[str, ...] = ()
    ordered: bool = False

    def key_of(self, item: object) -> tuple[object, ...]:
        if not self.keys:
            return (item,)
        return tuple(getattr(item, name) for name in self.keys)

    def check(self, items: tuple[T, ...]) -> tuple[T, ...]:
        # Fast paths for what every decode and every event the scheduler builds goes through: they
        # accept exactly what the full check accepts and leave anything else (every failure included)
        # to it, so it alone names the problem.
        if len(items) < 2:
            return items
        keys = self.keys
        if self.ordered:
            # Strictly increasing keys of one int or str type per position are sorted and unique,
            # and then comparing them directly orders them as the full check's comparison does.
            if len(keys) == 1:
                name = keys[0]
                values: list[object] = [getattr(item, name) for item in items]
            elif keys:
                values = [tuple(getattr(item, name) for name in keys) for item in items]
            else:
                values = list(items)
            if _increasing(values, len(keys)):
                return items
        else:
            if not keys:
                values = list(items)
            elif len(keys) == 1:
                name = keys[0]
                values = [getattr(item, name) for item in items]
            else:
                values = [tuple(getattr(item, name) for name in keys) for item in items]
            try:
                if len(set(values)) == len(values):
                    return items
            except TypeError:
                pass  # an unhashable key: the full check says so
        return self._check_fully(items)

    def _check_fully(self, items: tuple[T, ...]) -> tuple[T, ...]:
        keys = [self.key_of(item) for item in items]
        if len(set(keys)) != len(keys):
            what = "items" if not self.keys else "values of " + "+".join(self.keys)
            raise ValueError(f"{what} must be unique")
        if self.ordered:
            comparable = [tuple(_scalar(part) for part in key) for key in keys]
            if comparable != sorted(comparable):
                what = "items" if not self.keys else "+".join(self.keys)
                raise ValueError(f"{what} must be in increasing order")
        return items

    def __get_pydantic_core_schema__(
        self, source: type[object], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        if not self.keys:
            out["uniqueItems"] = True
        else:
            out["x-fedsched-unique-by"] = list(self.keys)
        if self.ordered:
            out["x-fedsched-increasing"] = True
        return out


def _increasing(values: list[object], parts: int) -> bool:
    """Whether ``values`` (scalars, or tuples of ``parts`` items) are strictly increasing, each position
    holding one type, int or str (never bool), throughout."""
    if parts <= 1:
        kind = type(values[0])
        if not (kind is int or kind is str) or not all(type(v) is kind for v in values):
            return False
    else:
        for column in zip(*values, strict=True):
            kind = type(column[0])
            if not (kind is int or kind is str) or not all(type(v) is kind for v in column):
                return False
    return all(a < b for a, b in itertools.pairwise(values))  # type: ignore[operator]


def _scalar(value: object) -> tuple[int, int, str]:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"ordered keys must be integers or strings, not {type(value).__name__}")
    return (0, value, "") if isinstance(value, int) else (1, 0, value)


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """An opaque JSON object of at most ``max_bytes`` (compact UTF-8) nested at most ``max_depth`` deep.

    Numbers must be finite and integers within 2**53 - 1, so every JSON reader sees the same values.
    """

    max_bytes: int
    max_depth: int

    def check(self, value: dict[str, JsonValue]) -> dict[str, JsonValue]:
        if not value and self.max_depth > 0 and self.max_bytes >= 2:
            return value  # ``{}``, on nearly every record: within any such limit
        _check_json(value, self.max_depth, "")
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
        if size > self.max_bytes:
            raise ValueError(f"document is {size} bytes, more than the limit of {self.max_bytes}")
        return value

    def __get_pydantic_core_schema__(
        self, source: type[object], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))


def _check_json(value: JsonValue, depth: int, path: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INT:
            raise ValueError(f"{path or 'value'}: integer beyond 2**53 - 1")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path or 'value'}: number must be finite")
    elif depth <= 0:
        raise ValueError(f"{path or 'value'}: nested too deep")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, depth - 1, f"{path}[{index}]")
    else:
        for key, item in value.items():
            _check_json(item, depth - 1, f"{path}.{key}" if path else key)


def _sorted_keys(mapping: dict[str, V]) -> dict[str, V]:
    if len(mapping) < 2:
        return mapping  # already in order (most records carry no labels)
    return dict(sorted(mapping.items()))


#: Re-orders a mapping by key: equal events encode to equal bytes whatever order a producer used.
SortedKeys = AfterValidator(_sorted_keys)

Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=64), SortedKeys]
#: An opaque workload template for a connector (at most 64 KiB).
Template = Annotated[dict[Annotated[str, Field(max_length=128)], JsonValue], JsonLimits(65_536, 16)]
#: A policy document: weights and settings the scheduler reads (at most 256 KiB).
PolicyDocument = Annotated[dict[Annotated[str, Field(max_length=128)], JsonValue], JsonLimits(262_144, 16)]
Ids = Annotated[tuple[Id, ...], Field(max_length=1024), Unique()]
DeviceIndices = Annotated[tuple[DeviceIndex, ...], Field(max_length=64), Unique(ordered=True)]
GpuModels = Annotated[tuple[GpuModel, ...], Field(max_length=32), Unique()]


class Frozen(BaseModel):
    """Base of nested value objects inside events: frozen, strict, closed."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, use_attribute_docstrings=True)


class Health(StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    FAILED = "failed"


class ResourceKind(StrEnum):
    """A kind of resource. Its quantities are in: cpu milli-CPU, memory MiB, gpu milli-GPU, npu NPUs."""

    CPU = "cpu"
    MEMORY = "memory"
    GPU = "gpu"
    NPU = "npu"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Resources(Frozen):
    """What one replica asks for. ``gpus`` whole GPUs, or a ``gpu_milli`` share of one GPU (1..999)."""

    cpu_milli: NonNegInt = 0
    memory_mib: NonNegInt = 0
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_milli: Annotated[int, Field(ge=0, le=999)] = 0
    npus: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_models: GpuModels = ()
    """Acceptable GPU models; empty means any."""
    min_gpu_memory_mib: NonNegInt = 0
    npu_models: GpuModels = ()
    """Acceptable NPU models; empty means any (``JobSubmitted`` v2)."""
    min_npu_memory_mib: NonNegInt = 0
    """Device memory each NPU must have (``JobSubmitted`` v2)."""

    @model_validator(mode="after")
    def _whole_or_share(self) -> Resources:
        if self.gpus and self.gpu_milli:
            raise ValueError("gpu_milli (a share of one GPU) and gpus (whole GPUs) are exclusive")
        if (self.npu_models or self.min_npu_memory_mib) and not self.npus:
            raise ValueError("npu_models and min_npu_memory_mib are for a replica that asks npus")
        return self

    def total_gpu_milli(self) -> int:
        """GPU demand of one replica in milli-GPU."""
        return self.gpus * 1000 + self.gpu_milli


class QuotaLine(Frozen):
    """The quota of one resource, or of one GPU model of a resource; ``None`` limit means unbounded."""

    resource: ResourceKind
    gpu_model: GpuModel | None = None
    """Only for gpu and npu; ``None`` is the quota over every model."""
    guaranteed: NonNegInt
    limit: NonNegInt | None = None

    @model_validator(mode="after")
    def _consistent(self) -> QuotaLine:
        if self.gpu_model is not None and self.resource not in (ResourceKind.GPU, ResourceKind.NPU):
            raise ValueError("gpu_model is only for the gpu and npu resources")
        if self.limit is not None and self.limit < self.guaranteed:
            raise ValueError("limit is less than guaranteed")
        return self
