"""How fast a simulated cluster publishes: registering a node list, and running a burst of jobs.

Called by ``fedsched connector sim-bench``. Starts one ``SimCluster`` on the given log with a fresh id,
times its registration (``ClusterRegistered`` plus one ``NodeObserved`` per node), then publishes a burst
of submissions and first-fit placements of one-GPU jobs (what a scheduler would) and times the sim until
every job has ended. Prints one JSON object with the figures.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from connectors.sim.config import SimConfig
from connectors.sim.host import SimCluster
from connectors.sim.nodes import default_nodes_path, load_nodes
from connectors.sim.spec import ClusterSpec
from events.catalog.base import Event
from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
from events.catalog.jobs import JobSubmitted
from events.catalog.lifecycle import RUN_END_EVENTS
from events.catalog.types import ClusterId, CycleId, JobId, Resources, TenantId
from events.log import EventLog
from events.log.publisher import Publisher

_RUN_ENDS = tuple(cls.event_type.removeprefix("io.fedsched.") for cls in RUN_END_EVENTS)
"""The names the sim counts its events by (``SimStats.by_type``) of the events that end a run."""


@dataclass(frozen=True, slots=True)
class BenchResult:
    nodes: int
    restore_s: float
    registration_events: int
    registration_s: float
    jobs: int
    load_events: int
    load_s: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "nodes": self.nodes,
            "restore_s": round(self.restore_s, 3),
            "registration_events": self.registration_events,
            "registration_s": round(self.registration_s, 3),
            "registration_events_per_s": round(self.registration_events / self.registration_s),
            "jobs": self.jobs,
            "load_events": self.load_events,
            "load_s": round(self.load_s, 3),
            "load_events_per_s": round(self.load_events / self.load_s),
            "jobs_per_s": round(self.jobs / self.load_s),
        }


async def run_bench(
    event_log: EventLog, nodes: Path | None = None, *, jobs: int = 2000, speed: float = 1000.0
) -> BenchResult:
    listing = load_nodes(nodes or default_nodes_path())
    spec = ClusterSpec.build(f"bench-{uuid.uuid4().hex[:8]}", listing.nodes)
    config = SimConfig(speed=speed, start_delay_s=1, usage_interval_s=300)
    cluster = SimCluster(event_log, spec, config)
    began = time.perf_counter()
    cluster.clock.start(await cluster.prepare())
    prepared = time.perf_counter()
    await cluster.run()
    registered = time.perf_counter()
    registration = cluster.stats.published
    try:
        load_s = await _load(event_log, cluster, spec, jobs)
        load_events = cluster.stats.published - registration
    finally:
        await cluster.stop()
    return BenchResult(
        len(spec.nodes), prepared - began, registration, registered - prepared, jobs, load_events, load_s
    )


async def _load(event_log: EventLog, cluster: SimCluster, spec: ClusterSpec, jobs: int) -> float:
    slots = [(n.name, g) for n in spec.nodes for g in range(n.gpus)]
    if jobs > len(slots):
        raise ValueError(f"{jobs} one-GPU jobs do not fit the {len(slots)} GPUs of the node list")
    inputs: list[Event] = []
    for index, (node, gpu) in enumerate(slots[:jobs]):
        job = JobId(f"{spec.cluster}-job-{index}")
        inputs.append(
            JobSubmitted(
                job_id=job,
                name=job,
                tenant=TenantId("bench"),
                resources=Resources(gpus=1, cpu_milli=100),
                expected_runtime_s=60 + index % 240,
            )
        )
        inputs.append(
            JobPlaced(
                job_id=job,
                cycle_id=CycleId("bench"),
                cluster=ClusterId(spec.cluster),
                explanation="bench",
                replicas=(ReplicaPlacement(replica=0, node=node, gpu_indices=(gpu,), gpu_milli_each=1000),),
                chosen=CandidateScore(cluster=ClusterId(spec.cluster), total=0),
            )
        )
    publisher = Publisher(event_log, "urn:fedsched:bench")
    await publisher.start()
    try:
        began = time.perf_counter()
        for start in range(0, len(inputs), 1000):
            await publisher.publish(inputs[start : start + 1000])
        while sum(cluster.stats.by_type[t] for t in _RUN_ENDS) < jobs:
            if cluster.error is not None:
                raise cluster.error
            await asyncio.sleep(0.01)
        return time.perf_counter() - began
    finally:
        await publisher.close()


__all__ = ["BenchResult", "run_bench"]
