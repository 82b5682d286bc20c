"""Workload shapes: how often each typical job shape is asked for, the input of fragmentation-aware
placement (a node's fragmentation is measured against the shapes users actually submit).

Called by the projection hosts; keyed by shape (``cpu_milli:memory_mib:gpu_milli:model``). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

from events.wire.envelope import Envelope
from projections.stages.core import Applied, Emitted, Input, Silent, evolve, record
from projections.stages.deltas import ShapeSeen

STAGE = "shapes"
_CPU_STEP = 1000
_MEMORY_STEP = 1024


@record
class ShapeCount:
    shape: str
    cpu_milli: int
    memory_mib: int
    gpu_milli: int
    gpu_model: str
    count: int = 0
    replicas: int = 0
    applied: Applied = field(default_factory=Applied)


def shape_of(seen: ShapeSeen) -> tuple[str, int, int, int, str]:
    """Round CPU up to whole cores and memory up to GiB so near-identical shapes share a bucket."""
    cpu = -(-seen.cpu_milli // _CPU_STEP) * _CPU_STEP
    memory = -(-seen.memory_mib // _MEMORY_STEP) * _MEMORY_STEP
    model = "|".join(sorted(seen.gpu_models)) or "any"
    return f"{cpu}:{memory}:{seen.gpu_milli}:{model}", cpu, memory, seen.gpu_milli, model


class ShapeStage(Silent[ShapeCount]):
    name = STAGE
    event_types: tuple[type, ...] = ()  # fed by other stages only

    def keys(self, envelope: Envelope) -> Sequence[str]:
        return ()  # fed by the job stage, which sees each job's first submission once

    def reduce(self, entity: ShapeCount | None, item: Input) -> tuple[ShapeCount | None, list[Emitted]]:
        seen = item.item
        if not isinstance(seen, ShapeSeen):
            return entity, []
        key, cpu, memory, gpu, model = shape_of(seen)
        shape = entity or ShapeCount(key, cpu, memory, gpu, model)
        if shape.applied.seen(item):  # a host that gives deltas positions redelivered this one
            return entity, []
        shape = evolve(shape, count=shape.count + 1, replicas=shape.replicas + seen.replicas)
        return evolve(shape, applied=shape.applied.after(item)), []
