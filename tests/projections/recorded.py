"""A recorded event stream built from a slice of the openb trace, with the answers computed beside it.

Nodes from ``tests/fixtures/traces/proj_nodes.csv`` go to two clusters; pods from ``proj_pods.csv``
become jobs of three tenants, placed first-fit by this module (independently of fedsched's scheduler),
started one second later and finished at their trace deletion time if that falls before the end of
the recording. One GPU fails. ``Expected`` holds what the read models must show, computed here from
the same decisions with plain arithmetic.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from events.catalog.decisions import CandidateScore, JobPlaced, JobQueued, ReplicaPlacement
from events.catalog.governance import QuotaLine, QuotaSet
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    GpuDevice,
    GpuHealthReported,
    GpuHealthSample,
    GpuRate,
    NodeObserved,
)
from events.catalog.jobs import JobFailed, JobStarted, JobSubmitted, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.catalog.types import Health, ResourceKind, Resources
from events.wire.envelope import Envelope

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
END_S = 8_000_000  # the recording stops here; jobs ending later are still running
RATES = {"P100": 1_200_000, "V100M16": 2_000_000, "V100M32": 2_400_000, "T4": 600_000, "G2": 3_000_000, "G3": 3_000_000}
FAILED_NODE = ("c-b", "openb-node-0003")


@dataclass
class Expected:
    statuses: dict[str, str] = field(default_factory=dict)
    node_allocated: dict[tuple[str, str], int] = field(default_factory=dict)
    gpu_milli_ms_by_tenant: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    cost_micro_by_tenant: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    running_by_queue: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    nodes: int = 0
    clusters: int = 2


def _node_rows() -> list[dict[str, str]]:
    with open(FIXTURES / "proj_nodes.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _pod_rows() -> list[dict[str, str]]:
    with open(FIXTURES / "proj_pods.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def build() -> tuple[list[Envelope], Expected]:
    expected = Expected()
    timed: list[tuple[int, int, Envelope]] = []
    seq = 0

    def emit(time_s: float, data: object, tenant: str | None = None) -> None:
        nonlocal seq
        seq += 1
        time_ms = BASE_MS + int(time_s * 1000)
        timed.append((time_ms, seq, Envelope(id=f"rec-{seq}", time_ms=time_ms, data=data, tenant=tenant)))  # type: ignore[arg-type]

    for cluster in ("c-a", "c-b"):
        emit(
            -10,
            ClusterRegistered(
                cluster=cluster,
                kind=ClusterKind.SIMULATED,
                site=f"site-{cluster}",
                region="eu",
                currency="EUR",
                gpu_rates=tuple(GpuRate(model=m, micro_per_gpu_hour=r) for m, r in sorted(RATES.items())),
            ),
        )
    for tenant in ("t0", "t1", "t2"):
        emit(
            -9,
            QuotaSet(
                tenant=tenant,
                lines=(QuotaLine(resource=ResourceKind.GPU, guaranteed=8000, limit=64000),),
                set_by="admin",
            ),
        )
    # free milli per (cluster, node, gpu index)
    free: dict[tuple[str, str], list[int]] = {}
    models: dict[tuple[str, str], str] = {}
    for i, row in enumerate(_node_rows()):
        cluster = "c-a" if i % 2 == 0 else "c-b"
        node = row["sn"]
        gpus = int(row["gpu"])
        free[(cluster, node)] = [1000] * gpus
        models[(cluster, node)] = row["model"]
        emit(
            -5,
            NodeObserved(
                cluster=cluster,
                node=node,
                generation=1,
                cpu_milli=int(row["cpu_milli"]),
                memory_mib=int(row["memory_mib"]),
                gpus=tuple(GpuDevice(index=g, model=row["model"], memory_mib=16384) for g in range(gpus)),
            ),
        )
        expected.nodes += 1

    # One GPU of one node fails early: it holds no job and is no longer usable.
    failed_key = FAILED_NODE
    free[failed_key][0] = -1
    emit(
        1,
        GpuHealthReported(
            cluster=failed_key[0],
            node=failed_key[1],
            gpus=(GpuHealthSample(index=0, health=Health.FAILED, xid_errors=3, last_xid=79),),
        ),
    )

    running: list[tuple[int, str, tuple[str, str], list[tuple[int, int]], str, int]] = []
    for i, pod in enumerate(_pod_rows()):
        job = f"job-{i:04d}"
        tenant = f"t{i % 3}"
        created = int(pod["creation_time"])
        deleted = int(pod["deletion_time"])
        num_gpu = int(pod["num_gpu"])
        share = int(pod["gpu_milli"])
        if num_gpu == 0:
            continue
        whole = num_gpu if share >= 1000 or num_gpu > 1 else 0
        milli = 0 if whole else share
        resources = Resources(
            cpu_milli=int(pod["cpu_milli"]), memory_mib=int(pod["memory_mib"]), gpus=whole, gpu_milli=milli
        )
        emit(created, JobSubmitted(job_id=job, name=pod["name"], tenant=tenant, resources=resources), tenant)
        # finish whatever ended before this arrival, in time order, releasing its GPUs
        _finish_until(created, running, free, emit, expected, models)
        placement = _first_fit(free, whole, milli)
        if placement is None:
            emit(
                created + 1,
                JobQueued(
                    job_id=job, cycle_id=f"cycle-{i}", reasons=(ReasonCode.NO_FEASIBLE_NODE,), message="no node fits"
                ),
            )
            expected.statuses[job] = "queued"
            continue
        key, slots = placement
        for index, taken in slots:
            free[key][index] -= taken
        gpu_indices = tuple(index for index, _ in slots)
        each = slots[0][1]
        emit(
            created + 1,
            JobPlaced(
                job_id=job,
                cycle_id=f"cycle-{i}",
                cluster=key[0],
                replicas=(ReplicaPlacement(replica=0, node=key[1], gpu_indices=gpu_indices, gpu_milli_each=each),),
                chosen=CandidateScore(cluster=key[0], node=key[1], total=0),
                explanation="first fit",
            ),
        )
        emit(created + 2, JobStarted(job_id=job, cluster=key[0]))
        running.append((deleted, job, key, slots, tenant, (created + 1)))
        expected.statuses[job] = "running"
    _finish_until(END_S, running, free, emit, expected, models)
    for _, _job, key, slots, tenant, _ in running:
        expected.node_allocated[key] = expected.node_allocated.get(key, 0) + sum(t for _, t in slots)
        expected.running_by_queue[f"{tenant}/default"] += 1
    timed.sort(key=lambda item: (item[0], item[1]))
    return [envelope for _, _, envelope in timed], expected


def _first_fit(free: dict[tuple[str, str], list[int]], whole: int, milli: int):  # type: ignore[no-untyped-def]
    for key in sorted(free):
        gpus = free[key]
        if whole:
            idle = [i for i, f in enumerate(gpus) if f == 1000]
            if len(idle) >= whole:
                return key, [(i, 1000) for i in idle[:whole]]
        else:
            for i, f in enumerate(gpus):
                if f >= milli:
                    return key, [(i, milli)]
    return None


def _finish_until(now, running, free, emit, expected, models):  # type: ignore[no-untyped-def]
    running.sort(key=lambda item: (item[0], item[1]))
    while running and running[0][0] <= now:
        deleted, job, key, slots, tenant, placed = running.pop(0)
        for index, taken in slots:
            free[key][index] += taken
        failed = int(job.split("-")[1]) % 17 == 0
        emit(
            deleted,
            (
                JobFailed(job_id=job, cluster=key[0], reason=ReasonCode.NON_ZERO_EXIT, exit_code=1)
                if failed
                else JobSucceeded(job_id=job, cluster=key[0])
            ),
        )
        expected.statuses[job] = "failed" if failed else "succeeded"
        milli = sum(t for _, t in slots)
        duration_ms = (deleted - placed) * 1000
        expected.gpu_milli_ms_by_tenant[tenant] += milli * duration_ms
        # cost per hour bucket, as a price list would bill it (rounded down per bucket)
        start = (placed * 1000) + BASE_MS
        end = (deleted * 1000) + BASE_MS
        rate = RATES[models[key]]
        while start < end:
            hour_end = min(end, start - start % 3_600_000 + 3_600_000)
            expected.cost_micro_by_tenant[tenant] += rate * milli * (hour_end - start) // (1000 * 3_600_000)
            start = hour_end
