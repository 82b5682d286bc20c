"""``fedsched demo``: ``fedsched up``, a real trace replayed through the gRPC API, and the audit.

Called by the CLI. Pods of the openb trace, in their arrival order, become jobs of four teams
(priority class from the pod's QoS, runtime from its creation and deletion times, capped at
``max_runtime_s``) submitted over gRPC as a portal would, ``rate`` per second; the simulated clusters
run them ``speed`` times faster than real time. (The trace's own arrival times span months; a demo
cannot wait for them.) A live line shows progress; the end is a summary (placed, waiting with their
top reasons, preempted, GPU allocation per cluster, from the read models' reader) and the result of
``audit verify``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from connectors.sim.nodes import NPU_POOL_NODES
from projections.readmodel.reader import ReadModels
from services.audit.verify import verify
from services.runtime import up
from services.scheduler.sim.traces import TracePod, load_pods, pods_csv

_PRIORITY = {
    "LS": ("production_inference", "inference"),
    "Guaranteed": ("critical_training", "training"),
    "Burstable": ("standard", "batch"),
    "BE": ("best_effort", "batch"),
}


@dataclass
class DemoConfig:
    up: up.UpConfig
    pods: Path | None = None
    count: int = 500
    rate: float = 50.0
    speed: float = 60.0
    max_runtime_s: int = 3600
    settle_s: float = 90.0
    nodes: int = 60
    """A slice of the openb node list (dealt to the three clusters), small enough that jobs queue."""


async def run(config: DemoConfig, out: TextIO = sys.stdout) -> int:
    from services.api.client import Client, ClientConfig

    pods = sorted(load_pods(config.pods or pods_csv("default")), key=lambda p: (p.creation_s or 0, p.name))
    pods = [p for p in pods if p.num_gpu > 0][: config.count]
    sim_nodes = config.up.sim_nodes or _node_slice(config.up.data_dir, config.nodes)
    # A slice of the default node list is still the default fleet: it keeps the default NPU pool.
    npus = config.up.sim_npu_nodes
    if npus is None and config.up.sim_nodes is None:
        npus = NPU_POOL_NODES
    demo_up = replace(config.up, sim_speed=config.speed, sim_nodes=sim_nodes, sim_npu_nodes=npus, with_api=True)
    running = await up.start(demo_up)
    peak: dict[str, float] = {}
    client = Client(ClientConfig(server=config.up.api_listen, token=running.api_token))
    started = time.monotonic()
    try:
        for index, pod in enumerate(pods):
            delay = index / config.rate - (time.monotonic() - started)
            if delay > 0:
                await asyncio.sleep(delay)  # a steady arrival rate, as a busy portal would send
            await client.call(client.jobs.SubmitJob, _request(pod, index, config.max_runtime_s))
            if index % 10 == 0:
                await _progress(running, index + 1, len(pods), out, peak)
        deadline = time.monotonic() + config.settle_s
        last: dict[str, int] = {}
        stable_since = time.monotonic()
        while time.monotonic() < deadline:
            counts = await _progress(running, len(pods), len(pods), out, peak)
            if counts != last:
                last, stable_since = counts, time.monotonic()
            if counts.get("running", 0) + counts.get("placed", 0) + counts.get("submitted", 0) == 0:
                break
            if time.monotonic() - stable_since > 10 and counts.get("running", 0) == 0:
                break
            await asyncio.sleep(1)
        out.write("\n")
        await _summary(running, len(pods), time.monotonic() - started, out, peak)
        report = await verify(running.log)
    finally:
        await client.close()
        await up.stop(running)
    if report.cycles == 0:
        out.write(f"audit verify: no scheduling cycle recorded, nothing verified ({report.events_read} events)\n")
        return 1
    out.write(
        f"audit verify: {report.cycles} cycles, {report.decisions} decisions re-executed, "
        f"{report.identical_pct:.2f}% identical ({report.events_read} events, {report.seconds:.1f} s)"
        f"{'' if not report.problems else f'; the record itself has {len(report.problems)} problem(s)'}\n"
    )
    return 0 if report.ok else 1


def _request(pod: TracePod, index: int, max_runtime_s: int):  # type: ignore[no-untyped-def]
    from services.api.pb import jobs_pb2

    priority, kind = _PRIORITY.get(pod.qos, ("standard", "batch"))
    whole = pod.num_gpu if (pod.num_gpu > 1 or pod.gpu_milli >= 1000) else 0
    share = 0 if whole else pod.gpu_milli
    runtime = min(max_runtime_s, max(60, (pod.deletion_s or (pod.creation_s or 0) + 3600) - (pod.creation_s or 0)))
    spec = jobs_pb2.JobSpec(
        name=pod.name,
        tenant=f"team-{index % 4}",
        project="trace-replay",
        kind=kind,
        priority_class=priority,
        resources=jobs_pb2.Resources(
            cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib,
            gpus=whole,
            gpu_milli=share,
            gpu_models=list(pod.gpu_spec),
        ),
        expected_runtime_s=runtime,
    )
    return jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=f"demo-{pod.name}")


async def _progress(
    running: up.Running, submitted: int, total: int, out: TextIO, peak: dict[str, float]
) -> dict[str, int]:
    counts = await ReadModels(running.pool).status_counts()
    for cluster, share in (await _allocation(running)).items():
        peak[cluster] = max(peak.get(cluster, 0.0), share)
    line = " ".join(f"{status} {counts[status]}" for status in sorted(counts))
    out.write(f"\rsubmitted {submitted}/{total} | {line}\x1b[K")
    out.flush()
    return counts


async def _summary(running: up.Running, total: int, seconds: float, out: TextIO, peak: dict[str, float]) -> None:
    jobs = await ReadModels(running.pool).job_outcomes()
    placed = sum(1 for j in jobs if j.runs)
    waiting = [j for j in jobs if j.status in ("queued", "submitted")]
    reasons = Counter(reason for j in waiting for reason in (j.last_reason or "unknown").split(","))
    preempted = sum(j.preemptions for j in jobs)
    out.write(f"replayed {total} trace pods in {seconds:.0f} s\n")
    out.write(f"placed {placed}, waiting {len(waiting)}, preempted {preempted}\n")
    for reason, count in reasons.most_common(5):
        out.write(f"  waiting because {reason}: {count}\n")
    failed = Counter(f"{j.last_reason}: {j.last_message[:120]}" for j in jobs if j.status == "failed")
    for text, count in failed.most_common(5):
        out.write(f"  failed {count}x {text}\n")
    now = await _allocation(running)
    for cluster in sorted(now):
        out.write(f"  GPU allocation {cluster}: peak {peak.get(cluster, 0.0):.1f}%, at the end {now[cluster]:.1f}%\n")


async def _allocation(running: up.Running) -> dict[str, float]:
    return {
        row.cluster: 100.0 * row.allocated_milli / row.capacity_milli if row.capacity_milli else 0.0
        for row in await ReadModels(running.pool).allocation()
    }


def _node_slice(data_dir: Path, count: int) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    # The same node list as ``fedsched up``: the openb one, or the sample shipped with fedsched.
    lines = up.default_nodes().read_text(encoding="utf-8").splitlines()
    target = data_dir / "demo-nodes.csv"
    target.write_text("\n".join(lines[: count + 1]) + "\n", encoding="utf-8")
    return target
