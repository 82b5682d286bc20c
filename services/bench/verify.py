"""``fedsched bench verify``: how fast ``audit verify`` re-executes a log, and where the time goes.

Called by ``services.cli.bench_cmd``. Needs no service: the log is written in memory by the scheduler
core itself, the way the scheduler host writes it (inputs arrive, a cycle decides on what was folded,
its decisions and cycle record are appended and folded), with the shape of ``fedsched bench e2e``:
one cluster of 8-GPU nodes, jobs of a tenth of a GPU submitted ``--per-cycle`` at a time, optionally
ending ``--runtime-cycles`` cycles after they were placed. Then verify runs over it in one process and
with its default workers, and one instrumented pass splits a cycle's time into its phases. Prints
figures; it never asserts them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

from events.catalog.decisions import JobPlaced, SchedulingCycleCompleted
from events.catalog.governance import TenantRegistered
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuDevice, NodeObserved
from events.catalog.jobs import JobSubmitted, JobSucceeded
from events.catalog.types import ClusterId, JobId, NodeId, Resources, TenantId
from events.log.contract import TopicPartition
from events.log.memory import MemoryLog
from events.wire.codec import decode
from events.wire.envelope import Envelope

T0 = 1_800_000_000_000


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("verify", help="audit verify over a log the scheduler core writes in memory")
    p.add_argument("--nodes", type=int, default=300, help="8-GPU nodes (default 300)")
    p.add_argument("--jobs", type=int, default=5000, help="submissions (default 5000)")
    p.add_argument("--per-cycle", type=int, default=10, help="submissions between two cycles (default 10)")
    p.add_argument("--runtime-cycles", type=int, default=0, help="jobs end this many cycles after placement")
    p.add_argument("--repeat", type=int, default=2, help="timed runs of each variant (default 2; best shown)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)


def scheduled_log(nodes: int, jobs: int, per_cycle: int, runtime_cycles: int) -> tuple[MemoryLog, int]:
    from services.scheduler.core.decide import INPUT_TOPICS, decide
    from services.scheduler.core.outputs import SOURCE
    from services.scheduler.core.policy import CycleMemo
    from services.scheduler.core.state import SchedulerState

    log = MemoryLog()
    serial = iter(range(10**12))

    def publish(event: Any, at: int) -> None:
        log.append(
            Envelope(id=f"e{next(serial)}", time_ms=at, data=event, source="urn:bench", subject=event.partition_key())
        )

    cluster = ClusterId("bench")
    for team in range(4):  # registered, as a deployment's tenants are: their fair share reads their usage
        publish(TenantRegistered(tenant=TenantId(f"team-{team}"), display_name=f"Team {team}"), T0)
    publish(ClusterRegistered(cluster=cluster, kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"), T0)
    for i in range(nodes):
        gpus = tuple(GpuDevice(index=g, model="A100", memory_mib=81_920) for g in range(8))
        node = NodeObserved(
            cluster=cluster, node=NodeId(f"n{i:05d}"), generation=1, cpu_milli=128_000, memory_mib=1_048_576, gpus=gpus
        )
        publish(node, T0)
    state, memo = SchedulerState(), CycleMemo()
    positions = {TopicPartition(t, p): 0 for t in INPUT_TOPICS for p in range(len(log.parts[t]))}

    def follow() -> bool:
        outside = False
        for tp in sorted(positions):
            for record in log.parts[tp.topic][tp.partition][positions[tp] :]:
                envelope = decode(record.headers, record.value)
                state.fold(envelope)
                outside = outside or envelope.source != SOURCE
                positions[tp] = record.offset + 1
        return outside

    now, submitted, cycles = T0, 0, 0
    placed: dict[int, list[str]] = defaultdict(list)  # cycle -> jobs placed then
    while submitted < jobs or state.pending_count():
        now += 50
        for _ in range(min(per_cycle, jobs - submitted)):
            resources = Resources(cpu_milli=500, memory_mib=1024, gpu_milli=100)
            job = JobSubmitted(
                job_id=JobId(f"job-{submitted:07d}"),
                name=f"bench-{submitted}",
                tenant=TenantId(f"team-{submitted % 4}"),
                resources=resources,
                expected_runtime_s=600,
            )
            publish(job, now)
            submitted += 1
        if runtime_cycles:
            for job_id in placed.pop(cycles - runtime_cycles, []):
                publish(JobSucceeded(job_id=JobId(job_id), cluster=cluster), now)
        if not follow() and submitted >= jobs:
            break
        decided = decide(state, now, memo)
        if not decided.events:
            continue
        offsets = [(tp.topic, tp.partition, o) for tp, o in positions.items()]
        for envelope in [*decided.events, decided.record(offsets)]:
            log.append(envelope)
            if isinstance(envelope.data, JobPlaced):
                placed[cycles].append(envelope.data.job_id)
        follow()
        cycles += 1
    return log, cycles


def phases(log: MemoryLog) -> tuple[dict[str, float], list[float]]:
    """One pass of verify's work with a clock around each phase (seconds), and each cycle's snapshot and
    schedule time (what must not grow with the history)."""
    from services.audit.verify import fold_inputs, load
    from services.scheduler.core.decide import INPUT_TOPICS, decide
    from services.scheduler.core.outputs import digest
    from services.scheduler.core.policy import CycleMemo
    from services.scheduler.core.state import SchedulerState

    spent: dict[str, float] = defaultdict(float)
    deciding: list[float] = []
    clock = time.perf_counter
    at = clock()
    records = asyncio.run(load(log, INPUT_TOPICS))  # type: ignore[arg-type]
    cycles = sorted(
        (e.data for items in records.values() for _, e in items if isinstance(e.data, SchedulingCycleCompleted)),
        key=lambda c: c.sequence,
    )
    spent["read+decode"] += clock() - at
    state, memo = SchedulerState(), CycleMemo()
    cursors: dict[TopicPartition, int] = defaultdict(int)
    last = clock()
    this_cycle: dict[str, float] = {}

    def step_done(name: str) -> None:
        nonlocal last
        now = clock()
        this_cycle[name] = now - last
        spent[name] += now - last
        last = now

    for cycle in cycles:
        last = clock()
        fold_inputs(state, records, cursors, cycle)
        step_done("fold")
        decided = decide(state, cycle.logical_time_ms, memo, sequence=cycle.sequence, step_done=step_done)
        deciding.append(this_cycle["snapshot"] + this_cycle["schedule"])
        digest(decided.events)
        step_done("digest")
    return dict(spent), deciding


def state_memory(log: MemoryLog, service: str, *, keep_settled: bool) -> int:
    """Bytes the scheduler's or governance's state holds once the whole log is folded (what such a
    long-running service carries), measured with ``tracemalloc``; the decoded records are not counted."""
    import gc
    import tracemalloc

    from services.governance.core.state import GovState
    from services.governance.host import INPUT_TOPICS as GOVERNANCE_INPUTS
    from services.scheduler.core.decide import INPUT_TOPICS as SCHEDULER_INPUTS
    from services.scheduler.core.state import SchedulerState

    topics = SCHEDULER_INPUTS if service == "scheduler" else GOVERNANCE_INPUTS
    envelopes = [
        decode(record.headers, record.value)
        for topic in topics
        if topic in log.parts
        for part in log.parts[topic]
        for record in part
    ]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        state: SchedulerState | GovState
        if service == "scheduler":
            state = SchedulerState(keep_settled=keep_settled)
            for envelope in envelopes:
                state.fold(envelope)
            state.refresh()
        else:
            state = GovState(keep_settled=keep_settled)
            for envelope in envelopes:
                state.fold(envelope)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def run(args: argparse.Namespace) -> int:
    from events.plumbing.collector import tune_for_service
    from services.audit.verify import verify
    from services.scheduler.core.decide import INPUT_TOPICS

    tune_for_service()  # as ``fedsched audit verify`` does
    started = time.perf_counter()
    log, cycles = scheduled_log(args.nodes, args.jobs, args.per_cycle, args.runtime_cycles)
    events = log.count(INPUT_TOPICS)
    figures: dict[str, Any] = {
        "log": {"nodes": args.nodes, "jobs": args.jobs, "cycles": cycles, "events": events},
        "build_s": round(time.perf_counter() - started, 2),
    }
    for name, workers in (("one_process", 1), ("default_workers", None)):
        best = None
        for _ in range(max(1, args.repeat)):
            began = time.perf_counter()
            report = asyncio.run(verify(log, workers=workers))  # type: ignore[arg-type]
            seconds = time.perf_counter() - began
            best = seconds if best is None else min(best, seconds)
        assert best is not None
        figures[name] = {
            "seconds": round(best, 3),
            "events_per_s": round(events / best),
            "identical_pct": report.identical_pct,
        }
    spent, deciding = phases(log)
    quarter = max(1, len(deciding) // 4)
    figures["decide_ms_by_quarter"] = (
        [round(statistics.median(deciding[i : i + quarter]) * 1000, 3) for i in range(0, quarter * 4, quarter)]
        if len(deciding) >= 4
        else []
    )
    figures["state_bytes_per_job"] = {
        service: {
            "settled_dropped": round(state_memory(log, service, keep_settled=False) / max(1, args.jobs)),
            "every_job_kept": round(state_memory(log, service, keep_settled=True) / max(1, args.jobs)),
        }
        for service in ("scheduler", "governance")
    }
    total = sum(spent.values())
    figures["phases_ms_per_cycle"] = {k: round(v * 1000 / max(1, cycles), 3) for k, v in spent.items()}
    figures["phases_pct"] = {k: round(100 * v / total, 1) for k, v in spent.items()}
    if args.json:
        print(json.dumps(figures))
        return 0
    out = sys.stdout
    out.write(f"log: {args.nodes} nodes, {args.jobs} jobs, {cycles} cycles, {events} events\n")
    for name in ("one_process", "default_workers"):
        f = figures[name]
        out.write(
            f"verify ({name.replace('_', ' ')}): {f['seconds']:.2f} s, {f['events_per_s']:,} events/s, "
            f"{f['identical_pct']:.2f}% identical\n"
        )
    if figures["decide_ms_by_quarter"]:
        out.write(
            "a cycle's snapshot + schedule (median), by quarter of the log: "
            + " / ".join(f"{ms:.2f}" for ms in figures["decide_ms_by_quarter"])
            + " ms (should not grow with the history)\n"
        )
    for service, memory in figures["state_bytes_per_job"].items():
        out.write(
            f"{service} state at the end: {memory['settled_dropped']:,} bytes a job, against "
            f"{memory['every_job_kept']:,} keeping every job's facts "
            f"(x{memory['every_job_kept'] / max(1, memory['settled_dropped']):.1f})\n"
        )
    out.write("one pass, per cycle: ")
    out.write(
        ", ".join(f"{k} {figures['phases_ms_per_cycle'][k]:.3f} ms ({figures['phases_pct'][k]:.0f}%)" for k in spent)
        + "\n"
    )
    return 0
