"""Builders for projection unit tests: events at times, folded through the topology in memory."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from events.catalog.base import Event
from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
from events.catalog.inventory import GpuDevice, NodeObserved
from events.catalog.jobs import JobSubmitted
from events.catalog.types import Resources
from events.wire.envelope import Envelope
from projections.stages.core import Output, Position
from projections.stages.topology import MemoryStore, Processed, Topology

_ids = itertools.count()


def a_node(
    cluster: str = "c1", node: str = "n1", gpus: int = 8, model: str = "A100", generation: int = 1
) -> NodeObserved:
    return NodeObserved(
        cluster=cluster,
        node=node,
        generation=generation,
        cpu_milli=96_000,
        memory_mib=1_048_576,
        gpus=tuple(GpuDevice(index=i, model=model, memory_mib=81_920) for i in range(gpus)),
    )


def a_job(
    job_id: str = "j1", tenant: str = "team-a", gpus: int = 1, gpu_milli: int = 0, queue: str = "default"
) -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id,
        name=job_id,
        tenant=tenant,
        queue=queue,
        resources=Resources(cpu_milli=4000, memory_mib=8192, gpus=gpus, gpu_milli=gpu_milli),
    )


def placed(
    job_id: str = "j1",
    node: str = "n1",
    gpus: tuple[int, ...] = (0,),
    cluster: str = "c1",
    run: int = 1,
    milli: int = 1000,
) -> JobPlaced:
    return JobPlaced(
        job_id=job_id,
        cycle_id="cycle-1",
        cluster=cluster,
        run=run,
        replicas=(ReplicaPlacement(replica=0, node=node, gpu_indices=gpus, gpu_milli_each=milli),),
        chosen=CandidateScore(cluster=cluster, node=node, total=0),
        explanation="test",
    )


@dataclass
class Fold:
    """Feeds events through the topology with positions per topic partition, like a host would."""

    topology: Topology = field(default_factory=Topology)
    store: MemoryStore = field(default_factory=MemoryStore)
    offsets: dict[str, int] = field(default_factory=dict)
    outputs: list[Output] = field(default_factory=list)

    def feed(
        self, event: Event, at_s: int = 0, *, event_id: str | None = None, replay: Position | None = None
    ) -> Position:
        topic = event.topic
        offset = self.offsets.get(topic, 0)
        position = replay or Position(topic, 0, offset)
        if replay is None:
            self.offsets[topic] = offset + 1
        envelope = Envelope(id=event_id or f"e{next(_ids)}", time_ms=1_000_000 + at_s * 1000, data=event)
        processed = Processed()
        self.topology.process(self.store, envelope, position, processed)
        self.outputs += processed.outputs
        return position

    def get(self, stage: str, key: str) -> Any:
        return self.store.get(stage, key)


def a_gpu_and_npu_run(gpu_rate: int = 2_000_000, npu_rate: int = 1_500_000) -> Fold:
    """Team a's j1 held 1 A100 and 4 Ascend910B NPUs of c1/n1 for half an hour (1,000 s .. 2,800 s after
    the epoch, in hour 0), and finished; c1 prices an A100-hour at ``gpu_rate`` and an NPU-hour of its
    model at ``npu_rate`` (millionths of a euro)."""
    from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuRate, NpuDevice
    from events.catalog.jobs import JobStarted, JobSucceeded

    rates = (
        GpuRate(model="A100", micro_per_gpu_hour=gpu_rate),
        GpuRate(model="Ascend910B", micro_per_gpu_hour=npu_rate),
    )
    fold = Fold()
    fold.feed(
        ClusterRegistered(
            cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR", gpu_rates=rates
        )
    )
    npus = tuple(NpuDevice(index=i, model="Ascend910B", memory_mib=65536) for i in range(8))
    fold.feed(a_node(gpus=2).model_copy(update={"npus": npus}))
    submitted = a_job(gpus=1)
    fold.feed(submitted.model_copy(update={"resources": submitted.resources.model_copy(update={"npus": 4})}))
    event = placed()
    replica = event.replicas[0].model_copy(update={"npu_indices": (0, 1, 2, 3)})
    fold.feed(event.model_copy(update={"replicas": (replica,)}))
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=1)
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=1800)
    return fold
