"""A fixed scenario's decision events and their digest, kept per decision engine name.

Called by ``test_decision_engine`` and, to record the digest of a newly named engine, from the
repository root::

    python -m tests.scheduler.decision_golden        # write tests/golden/decisions/<engine>.sha256

The scenario makes one cycle decide every kind of thing the service publishes: a placement across two
clusters, a preemption, a wait for the preemption, a wait on quota, a wait for a GPU model no cluster
has, one for more GPUs than any node holds and one for a node reserved by a taint, an inference
service started with fewer replicas than it asks, and a batch array (not a gang) started earlier with
two of its four replicas, which grows to four (``JobReplicasAdded``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
from events.catalog.governance import QuotaLine, QuotaSet
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    GpuDevice,
    GpuRate,
    NodeObserved,
    NpuDevice,
    Taint,
)
from events.catalog.jobs import InferenceSpec, JobKind, JobStarted, JobSubmitted, PriorityClass
from events.catalog.types import ResourceKind, Resources, TaintEffect
from events.wire.envelope import Envelope
from services.scheduler.core.decide import decide
from services.scheduler.core.outputs import DECISION_ENGINE, digest
from services.scheduler.core.state import SchedulerState

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "decisions"
T0 = 1_767_225_600_000


def golden_path(engine: str = DECISION_ENGINE) -> Path:
    return GOLDEN / f"{engine}.sha256"


def scenario() -> tuple[list[Envelope], Envelope]:
    """The cycle's decision events and its cycle record."""
    state = SchedulerState()
    facts: list[object] = []
    for cluster, model, price in (("east", "A100", 3_000_000), ("west", "T4", 600_000)):
        facts.append(
            ClusterRegistered(
                cluster=cluster,
                kind=ClusterKind.SIMULATED,
                site=cluster,
                region="eu",
                currency="EUR",
                gpu_rates=(GpuRate(model=model, micro_per_gpu_hour=price),),
            )
        )
        for n in range(2):
            gpus = tuple(GpuDevice(index=i, model=model, memory_mib=40_960) for i in range(8))
            facts.append(
                NodeObserved(
                    cluster=cluster,
                    node=f"{cluster}-{n}",
                    generation=1,
                    cpu_milli=64_000,
                    memory_mib=512_000,
                    gpus=gpus,
                )
            )
    # A cluster whose one node is reserved by a taint: a job that does not tolerate it waits.
    facts.append(
        ClusterRegistered(
            cluster="north", kind=ClusterKind.SIMULATED, site="north", region="eu", currency="EUR",
            gpu_rates=(GpuRate(model="L40", micro_per_gpu_hour=1_500_000),),
        )
    )  # fmt: skip
    facts.append(
        NodeObserved(
            cluster="north", node="north-0", generation=1, cpu_milli=64_000, memory_mib=512_000,
            gpus=tuple(GpuDevice(index=i, model="L40", memory_mib=49_152) for i in range(4)),
            taints=(Taint(key="reserved", value="research", effect=TaintEffect.NO_SCHEDULE),),
        )
    )  # fmt: skip
    # An NPU node beside the T4s: an NPU job takes half of it, a larger one waits for NPUs.
    facts.append(
        NodeObserved(
            cluster="west", node="west-npu-0", generation=1, cpu_milli=64_000, memory_mib=512_000,
            npus=tuple(NpuDevice(index=i, model="Ascend910B", memory_mib=65_536) for i in range(8)),
        )
    )  # fmt: skip
    line = QuotaLine(resource=ResourceKind.GPU, guaranteed=0, limit=1000)
    facts.append(QuotaSet(tenant="capped", lines=(line,), set_by="golden"))

    def submitted(job: str, gpus: int, **more: object) -> JobSubmitted:
        resources = Resources(cpu_milli=4000, memory_mib=16_384, gpus=gpus, **more.pop("resources", {}))  # type: ignore[arg-type]
        return JobSubmitted(job_id=job, name=job, tenant=more.pop("tenant", "team-a"), resources=resources, **more)  # type: ignore[arg-type]

    # Both A100 nodes full of best-effort work; the T4 cluster idle.
    for n in range(2):
        job = f"batch-{n}"
        a100 = {"gpu_models": ("A100",)}
        facts.append(
            submitted(
                job, 8, priority_class=PriorityClass.BEST_EFFORT, kind=JobKind.BATCH, resources=a100,
                expected_runtime_s=3600,
            )
        )  # fmt: skip
        replica = ReplicaPlacement(replica=0, node=f"east-{n}", gpu_indices=tuple(range(8)), gpu_milli_each=1000)
        facts.append(
            JobPlaced(
                job_id=job,
                cycle_id="cycle-earlier",
                cluster="east",
                replicas=(replica,),
                chosen=CandidateScore(cluster="east", total=0),
                explanation="earlier",
            )
        )
        facts.append(JobStarted(job_id=job, cluster="east"))
    # A batch array that is not a gang, started earlier with two of its four replicas: it grows in west.
    facts.append(submitted("array", 1, replicas=4, kind=JobKind.BATCH, expected_runtime_s=3600))
    facts.append(
        JobPlaced(
            job_id="array", cycle_id="cycle-earlier", cluster="west",
            replicas=tuple(
                ReplicaPlacement(replica=i, node="west-0", gpu_indices=(i,), gpu_milli_each=1000) for i in range(2)
            ),
            chosen=CandidateScore(cluster="west", total=0), explanation="earlier",
        )
    )  # fmt: skip
    facts.append(JobStarted(job_id="array", cluster="west"))
    facts += [
        submitted("fits", 2),
        submitted("urgent", 8, priority_class=PriorityClass.CRITICAL_TRAINING, kind=JobKind.TRAINING,
                  resources={"gpu_models": ("A100",)}),
        submitted("over-quota", 2, tenant="capped"),
        submitted("wrong-model", 1, resources={"gpu_models": ("H100",)}),
        submitted("too-big", 16),
        submitted("untolerated", 2, resources={"gpu_models": ("L40",)}),
        submitted("service", 1, replicas=24, kind=JobKind.INFERENCE, inference=InferenceSpec(min_replicas=4)),
        submitted("gang", 8, replicas=2, gang=True, kind=JobKind.TRAINING, resources={"gpu_models": ("A100",)}),
        submitted("npu-train", 0, resources={"npus": 4, "npu_models": ("Ascend910B",)}),
        submitted("npu-more", 0, resources={"npus": 8}),
        submitted("spread", 1, replicas=6, kind=JobKind.INFERENCE,
                  inference=InferenceSpec(min_replicas=2, spread_clusters=3)),
    ]  # fmt: skip
    for i, data in enumerate(facts):
        state.fold(Envelope(id=f"golden-{i}", time_ms=T0 + i, data=data))  # type: ignore[arg-type]
    now = T0 + 60_000
    decided = decide(state, now, sequence=0)
    return decided.events, decided.record([])


def main(argv: list[str]) -> int:
    events, _ = scenario()
    path = golden_path()
    if path.exists():
        print(f"{path} exists: an engine's digest is never rewritten; name a new engine instead", file=sys.stderr)
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(digest(events) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
