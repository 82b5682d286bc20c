"""Value types shared by the catalogue: typed identifiers, bounded strings and lists, resources.

Called by every catalogue module. Every string and list carries a limit so a hostile or broken producer
cannot make a consumer allocate without bound; every resource quantity is an integer in milli-units or
MiB, never a float, so sums are exact and replay is deterministic.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, NewType

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

# Identifiers: lowercase DNS-label-like, so they are safe as Kafka keys, Kubernetes names and SQL values.
_ID_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$"
Id = Annotated[str, StringConstraints(pattern=_ID_PATTERN, min_length=1, max_length=128)]

JobId = NewType("JobId", str)
ClusterId = NewType("ClusterId", str)
NodeId = NewType("NodeId", str)
TenantId = NewType("TenantId", str)

JobIdField = Annotated[JobId, StringConstraints(pattern=_ID_PATTERN, min_length=1, max_length=128)]
ClusterIdField = Annotated[ClusterId, StringConstraints(pattern=_ID_PATTERN, min_length=1, max_length=128)]
NodeIdField = Annotated[NodeId, StringConstraints(pattern=_ID_PATTERN, min_length=1, max_length=128)]
TenantIdField = Annotated[TenantId, StringConstraints(pattern=_ID_PATTERN, min_length=1, max_length=128)]

Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
ShortText = Annotated[str, StringConstraints(max_length=256)]
Text = Annotated[str, StringConstraints(max_length=4096)]
GpuModel = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")]
LabelKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,252}$")]
LabelValue = Annotated[str, StringConstraints(max_length=256)]
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=64)]

NonNegInt = Annotated[int, Field(ge=0, le=2**62)]
PosInt = Annotated[int, Field(ge=1, le=2**62)]
MilliGpu = Annotated[int, Field(ge=0, le=1000)]
# Logical or wall time as integer milliseconds since the Unix epoch (events carry time as data, the
# pure core never reads a clock).
EpochMillis = Annotated[int, Field(ge=0, le=2**53)]
DurationSeconds = Annotated[int, Field(ge=0, le=10 * 365 * 24 * 3600)]


class Frozen(BaseModel):
    """Base of nested value objects inside events: frozen, strict, closed."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class ResourceKind(StrEnum):
    CPU = "cpu"
    MEMORY = "memory"
    GPU = "gpu"
    NPU = "npu"


class Resources(Frozen):
    """What one replica asks for. ``gpus`` whole GPUs, or a ``gpu_milli`` share of one GPU (1..999)."""

    cpu_milli: NonNegInt = 0
    memory_mib: NonNegInt = 0
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_milli: Annotated[int, Field(ge=0, le=999)] = 0
    npus: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_models: Annotated[tuple[GpuModel, ...], Field(max_length=32)] = ()
    min_gpu_memory_mib: NonNegInt = 0

    @model_validator(mode="after")
    def _whole_or_share(self) -> Resources:
        if self.gpus and self.gpu_milli:
            raise ValueError("gpu_milli (a share of one GPU) and gpus (whole GPUs) are exclusive")
        return self

    def total_gpu_milli(self) -> int:
        """GPU demand of one replica in milli-GPU."""
        return self.gpus * 1000 + self.gpu_milli
