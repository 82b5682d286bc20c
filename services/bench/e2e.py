"""``fedsched bench e2e``: submissions over gRPC into Kafka, and how long until their placement is visible.

Called by ``fedsched bench e2e``. Prints figures, asserts nothing. Needs a dedicated Kafka broker and
PostgreSQL (it writes the standard topics): ``make bench-e2e`` starts both.

The scheduler and the API run as their own processes (``fedsched scheduler``, ``fedsched api``), as in
production; this process publishes a fleet, submits jobs at a fixed rate through gRPC and tails the
decisions topic: latency = the moment a job's ``JobPlaced`` is read minus the moment its ``SubmitJob``
was sent. Then ``audit verify`` runs over the whole log and its rate is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from events.catalog.decisions import JobPlaced
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuDevice, NodeObserved
from events.catalog.topics import DECISIONS, TOPICS
from events.catalog.types import ClusterId, NodeId
from events.log import EventLog, TopicPartition, open_log
from events.log.publisher import Publisher
from events.plumbing.tasks import cancel_and_wait
from events.wire.codec import decode

if TYPE_CHECKING:
    from services.api.client import Client

ROOT = Path(__file__).resolve().parents[2]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("e2e", help="gRPC submit -> Kafka -> scheduler -> JobPlaced latency, and verify rate")
    parser.add_argument("--kafka", required=True, help="bootstrap host:port of a dedicated broker")
    parser.add_argument("--postgres", required=True, help="PostgreSQL DSN")
    parser.add_argument("--rate", type=float, default=200.0, help="submissions per second (default 200)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to submit and measure (default 20)")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=5.0,
        help="submit at the same rate this long first, unmeasured: the broker's JIT and the caches warm up (default 5)",
    )
    parser.add_argument("--nodes", type=int, default=300, help="8-GPU nodes in the fleet (default 300)")
    parser.add_argument("--listen", default="127.0.0.1:50599", help="where the benchmark's API listens")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    from events.plumbing.collector import tune_for_service
    from services.api.auth import AuthConfig, issue_token
    from services.api.client import CallError, Client, ClientConfig
    from services.api.pb import jobs_pb2

    tune_for_service()  # a collector pause here would count as placement latency

    log_url = f"kafka://{args.kafka}"
    event_log = open_log(log_url)
    await event_log.start()
    await event_log.create_topics(TOPICS)
    run_id = secrets.token_hex(3)
    publisher = Publisher(event_log, "urn:fedsched:bench")
    await publisher.start()
    await publisher.publish(
        [
            ClusterRegistered(
                cluster=ClusterId(f"bench-{run_id}"),
                kind=ClusterKind.SIMULATED,
                site="bench",
                region="local",
                currency="EUR",
            )
        ]
    )
    for start in range(0, args.nodes, 100):
        await publisher.publish(
            [
                NodeObserved(
                    cluster=ClusterId(f"bench-{run_id}"),
                    node=NodeId(f"n{i:05d}"),
                    generation=1,
                    cpu_milli=128_000,
                    memory_mib=1_048_576,
                    gpus=tuple(GpuDevice(index=g, model="A100", memory_mib=81_920) for g in range(8)),
                )
                for i in range(start, min(args.nodes, start + 100))
            ]
        )
    await publisher.close()

    secret = secrets.token_hex(32)
    auth = AuthConfig("fedsched-bench", "fedsched", hs256_secret=secret.encode())
    token = issue_token(auth, subject="bench", tenants=["*"], roles=["admin"])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDSCHED_JWT_SECRET": secret}
    logs = Path(tempfile.mkdtemp(prefix="fedsched-bench-e2e-"))
    scheduler_log = (logs / "scheduler.log").open("wb")
    api_log = (logs / "api.log").open("wb")
    scheduler = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "scheduler",
        "--log",
        log_url,
        "--idle-cycle-ms",
        "1000",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=scheduler_log,
    )
    api = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "api",
        "--log",
        log_url,
        "--dsn",
        args.postgres,
        "--listen",
        args.listen,
        "--issuer",
        "fedsched-bench",
        "--audience",
        "fedsched",
        "--no-intake",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=api_log,
    )
    client = Client(ClientConfig(server=args.listen, token=token, timeout_s=30))
    sent: dict[str, float] = {}
    placed: dict[str, float] = {}
    cycle_at: dict[str, float] = {}
    rpc_ms: list[float] = []
    failed: dict[str, int] = {}  # gRPC code -> calls that got it (an overloaded API answers some with errors)
    tail: asyncio.Task[None] | None = None
    try:
        await _wait_for_api(client)
        tail = asyncio.create_task(_tail_placements(event_log, placed, cycle_at, run_id))
        # Measure the steady state: the scheduler has caught up with the log and leads once a first
        # job is placed (its start-up, like the API's, is not part of the placement latency).
        warmup = jobs_pb2.SubmitJobRequest(
            spec=jobs_pb2.JobSpec(
                name="bench-warmup",
                tenant="team-0",
                resources=jobs_pb2.Resources(cpu_milli=500, memory_mib=1024, gpu_milli=100),
                expected_runtime_s=600,
            ),
            client_request_id=f"bench-{run_id}-warmup",
        )
        first = (await client.call(client.jobs.SubmitJob, warmup)).job_id
        ready_by = time.perf_counter() + 120
        while first not in placed and time.perf_counter() < ready_by:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        placed.clear()
        unmeasured = int(args.rate * args.warmup_seconds)
        total = unmeasured + int(args.rate * args.seconds)
        started = time.perf_counter()
        pending: set[asyncio.Task[None]] = set()

        async def submit(index: int) -> None:
            spec = jobs_pb2.JobSpec(
                name=f"bench-{index}",
                tenant=f"team-{index % 4}",
                resources=jobs_pb2.Resources(cpu_milli=500, memory_mib=1024, gpu_milli=100),
                expected_runtime_s=600,
            )
            request = jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=f"bench-{run_id}-{index}")
            began = time.perf_counter()
            try:
                response = await client.call(client.jobs.SubmitJob, request)
            except CallError as error:
                failed[error.code] = failed.get(error.code, 0) + 1
                return
            if index >= unmeasured:
                sent[response.job_id] = began
                rpc_ms.append((time.perf_counter() - began) * 1000)

        for index in range(total):
            delay = started + index / args.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(submit(index))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)
        submit_s = time.perf_counter() - started - args.warmup_seconds
        deadline = time.perf_counter() + 60
        while len([j for j in sent if j in placed]) < len(sent) and time.perf_counter() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
    finally:
        if tail is not None:  # stopped before verify reads the log and before the log closes
            await cancel_and_wait([tail])
        await client.close()
        for process in (api, scheduler):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process in (api, scheduler):
            await process.wait()
        scheduler_log.close()
        api_log.close()
    latencies = sorted((placed[j] - sent[j]) * 1000 for j in sent if j in placed)
    # Where the time went (clocks of two processes, ms resolution): until the job's cycle started
    # (the API's append, the scheduler noticing it, the cycle before it), and from then on (deciding,
    # the transaction, this reader seeing the commit).
    to_cycle = sorted((cycle_at[j] - sent[j]) * 1000 for j in sent if j in cycle_at)
    from_cycle = sorted((placed[j] - cycle_at[j]) * 1000 for j in sent if j in cycle_at)
    await event_log.close()
    # As an operator runs it: ``fedsched audit verify`` in its own process. This one holds gRPC's poller
    # thread, and verify never forks workers beside another thread.
    checked = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "audit",
        "verify",
        "--log",
        log_url,
        "--json",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await checked.communicate()
    report = json.loads(out)
    figures = {
        "submitted": len(sent),
        "failed": dict(sorted(failed.items())),
        "placed": len(latencies),
        "offered_rate_per_s": args.rate,
        "achieved_submit_rate_per_s": round(len(sent) / submit_s, 1),
        "submit_rpc_ms": {"p50": _q(sorted(rpc_ms), 50), "p99": _q(sorted(rpc_ms), 99)},
        "placement_latency_ms": {
            "p50": _q(latencies, 50),
            "p95": _q(latencies, 95),
            "p99": _q(latencies, 99),
            "max": round(latencies[-1], 1) if latencies else None,
            "until_cycle_start": {"p50": _q(to_cycle, 50), "p99": _q(to_cycle, 99)},
            "cycle_start_to_visible": {"p50": _q(from_cycle, 50), "p99": _q(from_cycle, 99)},
        },
        "verify": {key: report[key] for key in ("cycles", "identical_pct", "events_read", "events_per_s", "workers")},
    }
    if args.json:
        print(json.dumps(figures))
    else:
        lat = figures["placement_latency_ms"]
        print(
            f"submitted {len(sent)} at {figures['achieved_submit_rate_per_s']}/s (offered {args.rate}/s), "
            f"placed {len(latencies)}"
            + (f"; failed calls: {', '.join(f'{n} {code}' for code, n in sorted(failed.items()))}" if failed else "")
        )
        print(
            f"submit -> JobPlaced visible: p50 {lat['p50']} ms, p95 {lat['p95']} ms, p99 {lat['p99']} ms, "
            f"max {lat['max']} ms (of which the SubmitJob call: p50 {figures['submit_rpc_ms']['p50']} ms, "
            f"p99 {figures['submit_rpc_ms']['p99']} ms)"
        )
        split = figures["placement_latency_ms"]
        print(
            f"  until its cycle started: p50 {split['until_cycle_start']['p50']} ms, p99 "
            f"{split['until_cycle_start']['p99']} ms; from then until visible: p50 "
            f"{split['cycle_start_to_visible']['p50']} ms, p99 {split['cycle_start_to_visible']['p99']} ms"
        )
        print(
            f"audit verify: {report['cycles']} cycles, {_pct(report['identical_pct'])} identical, "
            f"{report['events_read']} events at {report['events_per_s']} events/s "
            f"({report['workers']} process{'es' if report['workers'] > 1 else ''})"
        )
        summaries = [line for line in (logs / "scheduler.log").read_text().splitlines() if "cycles_summary" in line]
        if summaries:
            last = summaries[-1].split("event=cycles_summary ", 1)[1]
            print(f"scheduler, its last cycles: {last}")
        print(f"process logs: {logs}")
    return 0


def _q(values: list[float], q: int) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, len(values) * q // 100)], 1)


async def _wait_for_api(client: Client, timeout_s: float = 60) -> None:
    import grpc

    from services.api.pb import jobs_pb2

    deadline = time.perf_counter() + timeout_s
    while True:
        try:
            await client.jobs.ListJobs(
                jobs_pb2.ListJobsRequest(page_size=1),
                metadata=client.metadata,
                timeout=2,
            )
            return
        except grpc.aio.AioRpcError:
            if time.perf_counter() > deadline:
                raise
            await asyncio.sleep(0.3)


async def _tail_placements(
    event_log: EventLog, placed: dict[str, float], cycle_at: dict[str, float], run_id: str
) -> None:
    """Fills ``placed`` (job -> when its ``JobPlaced`` was read) and ``cycle_at`` (job -> when the cycle
    that placed it started: the decision's envelope time, the scheduler's wall clock), both on the
    ``perf_counter`` clock."""
    wall_minus_perf = time.time() - time.perf_counter()
    tp = TopicPartition(DECISIONS.name, 0)
    reader = await event_log.reader()
    try:
        start = await reader.end_offset(tp)
    finally:
        await reader.close()
    tail = await event_log.tail({tp: start})
    try:
        while True:
            for record in await tail.poll(max_records=2000, timeout_s=0.5):
                seen = time.perf_counter()
                try:
                    envelope = decode(record.headers, record.value)
                except Exception:
                    continue
                event = envelope.data
                if isinstance(event, JobPlaced):
                    placed.setdefault(event.job_id, seen)
                    cycle_at.setdefault(event.job_id, envelope.time_ms / 1000 - wall_minus_perf)
    finally:
        await tail.close()


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}%"
