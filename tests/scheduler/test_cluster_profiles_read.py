"""The scheduler reads each cluster's roll-up profile and prices from the log, and they steer placement.

The fleet projection publishes a cluster's roll-up (``ResourceProfileUpdated`` with no node); the
scheduler's state keeps the latest version and gives its congestion, stability (the roll-up's health),
fit for training and inference to ``Cluster``; the prices per GPU model come from ``ClusterRegistered``.
"""

from __future__ import annotations

import pytest

from events.catalog.base import Event
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuDevice, GpuRate, NodeObserved
from events.catalog.jobs import JobKind, JobSubmitted, PriorityClass
from events.catalog.profiles import Quantities, ResourceProfileUpdated
from events.catalog.types import Resources
from events.wire.envelope import Envelope
from services.scheduler.core.policy import Place, PolicyConfig, schedule
from services.scheduler.core.state import SchedulerState

pytestmark = pytest.mark.timeout(30)


def registered(cluster: str, *rates: tuple[str, int]) -> ClusterRegistered:
    return ClusterRegistered(
        cluster=cluster, kind=ClusterKind.SIMULATED, site=cluster, region="eu", currency="EUR",
        gpu_rates=tuple(GpuRate(model=m, micro_per_gpu_hour=r) for m, r in rates),
    )  # fmt: skip


def node(cluster: str) -> NodeObserved:
    return NodeObserved(
        cluster=cluster, node="n", generation=1, cpu_milli=64_000, memory_mib=512_000,
        gpus=tuple(GpuDevice(index=i, model="A100", memory_mib=81_920) for i in range(8)),
    )  # fmt: skip


def rollup(cluster: str, version: int, **facts: object) -> ResourceProfileUpdated:
    said: dict[str, object] = {
        "health_milli": 1000, "failures_per_kgpu_hour_milli": 0, "congestion_milli": 0,
        "fit_training": True, "fit_inference": True, **facts,
    }  # fmt: skip
    return ResourceProfileUpdated(
        cluster=cluster, node=None, version=version, capacity=Quantities(gpu_milli=8000), allocated=Quantities(),
        free=Quantities(gpu_milli=8000), last_seen_ms=1_000, **said,  # type: ignore[arg-type]
    )  # fmt: skip


def submitted(job_id: str, kind: JobKind = JobKind.BATCH, gpus: int = 8, **spec: object) -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id, name=job_id, tenant="t", kind=kind,
        resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=gpus),
        **spec,  # type: ignore[arg-type]
    )  # fmt: skip


def folded(facts: list[Event]) -> SchedulerState:
    state = SchedulerState()
    for i, data in enumerate(facts):
        state.fold(Envelope(id=f"e-{i}", time_ms=1_000 + i, data=data))
    return state


def two_clusters(*more: Event, priced: bool = False) -> list[Event]:
    """sim-1 and sim-2 alike, but (``priced``) sim-2 is cheaper for A100 and dearer on average."""
    rates_1, rates_2 = ((("A100", 2_500_000),), (("A100", 1_200_000), ("H100", 9_000_000))) if priced else ((), ())
    return [registered("sim-1", *rates_1), registered("sim-2", *rates_2), node("sim-1"), node("sim-2"), *more]


def test_the_latest_rollup_gives_each_cluster_its_profile_and_its_rates():
    state = folded(two_clusters(
        rollup("sim-1", 2, health_milli=610, failures_per_kgpu_hour_milli=2400, congestion_milli=300,
               fit_training=False, recent_failures=3),
        rollup("sim-1", 1, health_milli=1000, congestion_milli=900),  # an older version read late: no effect
        priced=True,
    ))  # fmt: skip
    sim_1, sim_2 = state.snapshot(2_000).clusters
    said = (sim_1.stability_milli, sim_1.congestion_milli, sim_1.fit_training, sim_1.fit_inference)
    assert said == (610, 300, False, True)
    assert sim_1.failures_per_kgpu_hour_milli == 2400 and sim_1.recent_failures == 3
    assert sim_1.gpu_rates == (("A100", 2500),)
    # No roll-up yet: nothing known against it.
    assert (sim_2.stability_milli, sim_2.congestion_milli, sim_2.fit_training) == (1000, 0, True)
    assert sim_2.gpu_rates == (("A100", 1200), ("H100", 9000)) and sim_2.cost_milli_per_gpu_hour == 0


@pytest.mark.parametrize(
    ("case", "profile", "job", "said"),
    [
        ("recent failures lose a training job", {"health_milli": 610, "recent_failures": 2},
         submitted("j", JobKind.TRAINING), "sim-2 over sim-1: stability 1000 vs 610 (2 GPU failures in the last day)"),
        ("a congested cluster loses", {"congestion_milli": 950}, submitted("j"), "congestion 0 vs 950"),
        ("no node fit for training loses a training job", {"fit_training": False},
         submitted("j", JobKind.TRAINING), "no node of sim-1 suits training"),
    ],
)  # fmt: skip
def test_a_rollup_read_from_the_log_moves_a_job(case, profile, job, said):
    state = folded(two_clusters(rollup("sim-1", 1, **profile), job))
    (p,) = [d for d in schedule(state.snapshot(2_000), PolicyConfig()).decisions if isinstance(d, Place)]
    assert p.cluster == "sim-2" and said in p.message, (case, p.message)


def test_the_cheaper_rate_of_the_model_wins_best_effort_work_though_the_cluster_is_dearer_on_average():
    job = submitted("j", gpus=1, priority_class=PriorityClass.BEST_EFFORT)
    state = folded(two_clusters(job, priced=True))
    (p,) = [d for d in schedule(state.snapshot(2_000), PolicyConfig()).decisions if isinstance(d, Place)]
    assert p.cluster == "sim-2" and "cost 1.20 vs 2.50 per GPU-hour" in p.message, p.message
