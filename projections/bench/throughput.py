"""``fedsched bench projections``: events per second through one faust worker into PostgreSQL, the lag
left when the producer stops, next to a bare aiokafka consumer reading the same topics and the in-process
runner folding the same stream, all in the same run.

Called by ``fedsched bench projections``. Prints figures; asserts nothing. The stream is synthetic
inventory and job events: clusters, quotas and nodes, then jobs submitted, placed, started and
finished round-robin over the nodes' GPUs. The worker is a real ``fedsched projections worker``
process on its own topics, consumer group and schema; the stream is appended while it runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
from events.catalog.governance import QuotaLine, QuotaSet
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuDevice, GpuRate, NodeObserved
from events.catalog.jobs import JobStarted, JobSubmitted, JobSucceeded
from events.catalog.types import ClusterId, CycleId, JobId, NodeId, ResourceKind, Resources, TenantId
from events.wire.envelope import Envelope

BASE_MS = 1_767_225_600_000
GPUS_PER_NODE = 8
TENANTS = (TenantId("t0"), TenantId("t1"), TenantId("t2"))


@dataclass
class Figures:
    events: int
    worker_events_per_s: float
    worker_seconds: float
    lag_at_end_source: int
    lag_at_end_internal: int
    bare_aiokafka_events_per_s: float
    in_process_events_per_s: float


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("projections", help="events/s through a faust projection worker into PostgreSQL")
    parser.add_argument("--kafka", required=True, help="Kafka bootstrap host:port")
    parser.add_argument("--postgres", required=True, help="PostgreSQL DSN for the read models")
    parser.add_argument("--nodes", type=int, default=200, help="nodes (8 GPUs each, two clusters; default 200)")
    parser.add_argument("--jobs", type=int, default=5000, help="jobs, four events each (default 5000)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of each stage topic (default 6)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def synthetic(nodes: int, jobs: int) -> list[Envelope]:
    """Inventory first, then each job's lifecycle; a GPU is reused only after its last job finished."""
    out: list[tuple[int, int, Envelope]] = []

    def emit(time_ms: int, data: object, tenant: str | None = None) -> None:
        envelope = Envelope(id=f"b-{len(out)}", time_ms=BASE_MS + time_ms, data=data, tenant=tenant)  # type: ignore[arg-type]
        out.append((time_ms, len(out), envelope))

    rates = (GpuRate(model="A100", micro_per_gpu_hour=3_000_000),)
    for cluster in (ClusterId("c-a"), ClusterId("c-b")):
        emit(
            -10_000,
            ClusterRegistered(
                cluster=cluster, kind=ClusterKind.SIMULATED, site=cluster, region="eu", currency="EUR", gpu_rates=rates
            ),
        )
    for tenant in TENANTS:
        line = QuotaLine(resource=ResourceKind.GPU, guaranteed=64_000, limit=512_000)
        emit(-9_000, QuotaSet(tenant=tenant, lines=(line,), set_by="bench"))
    names = [(ClusterId("c-a" if i % 2 == 0 else "c-b"), NodeId(f"node-{i:05d}")) for i in range(nodes)]
    for cluster, node in names:
        gpus = tuple(GpuDevice(index=g, model="A100", memory_mib=81920) for g in range(GPUS_PER_NODE))
        emit(
            -5_000,
            NodeObserved(cluster=cluster, node=node, generation=1, cpu_milli=64_000, memory_mib=512_000, gpus=gpus),
        )
    slots = nodes * GPUS_PER_NODE
    step_ms = 100
    for i in range(jobs):
        job, tenant = JobId(f"job-{i:07d}"), TENANTS[i % len(TENANTS)]
        cluster, node = names[i % nodes]
        gpu = (i // nodes) % GPUS_PER_NODE
        start = i * step_ms
        resources = Resources(cpu_milli=4000, memory_mib=16_384, gpus=1)
        emit(start, JobSubmitted(job_id=job, name=job, tenant=tenant, resources=resources), tenant)
        replica = ReplicaPlacement(replica=0, node=node, gpu_indices=(gpu,), gpu_milli_each=1000)
        chosen = CandidateScore(cluster=cluster, node=node, total=0)
        emit(
            start + 1,
            JobPlaced(
                job_id=job,
                cycle_id=CycleId(f"cy-{i}"),
                cluster=cluster,
                replicas=(replica,),
                chosen=chosen,
                explanation="bench",
            ),
        )
        emit(start + 2, JobStarted(job_id=job, cluster=cluster))
        emit(start + (slots - 1) * step_ms, JobSucceeded(job_id=job, cluster=cluster))
    out.sort(key=lambda item: (item[0], item[1]))
    return [envelope for _, _, envelope in out]


async def run(args: argparse.Namespace) -> int:
    from events.plumbing.collector import tune_for_service

    tune_for_service()  # as the worker and the in-process runner do
    figures = await measure(args.kafka, args.postgres, nodes=args.nodes, jobs=args.jobs, partitions=args.partitions)
    if args.json:
        print(json.dumps(asdict(figures), indent=2))
        return 0
    print(f"{figures.events} inventory and job events ({args.nodes} nodes, {args.jobs} jobs), one worker")
    print(f"{'path':<44}{'events/s':>12}")
    print(f"{'faust worker -> PostgreSQL (appended live)':<44}{figures.worker_events_per_s:>12,.0f}")
    print(f"{'bare aiokafka consumer (read only)':<44}{figures.bare_aiokafka_events_per_s:>12,.0f}")
    print(f"{'in-process runner -> PostgreSQL':<44}{figures.in_process_events_per_s:>12,.0f}")
    print(
        f"lag when the producer stopped: {figures.lag_at_end_source} source records, "
        f"{figures.lag_at_end_internal} internal records; drained {figures.worker_seconds:.1f} s after the first append"
    )
    return 0


async def measure(kafka: str, dsn: str, *, nodes: int, jobs: int, partitions: int) -> Figures:
    import asyncpg
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient

    from events.catalog.topics import TOPICS, Cleanup, TopicSpec
    from events.log.contract import OutRecord
    from events.log.kafka import KafkaEventLog
    from events.log.publisher import to_record
    from projections.bench.workers import WorkerProcess, group_topics, lag, wait_members, wait_quiet
    from projections.faust.config import WorkerConfig
    from projections.inprocess.runner import ProjectionRunner
    from projections.readmodel import writer as readmodels

    envelopes = synthetic(nodes, jobs)
    tag = uuid.uuid4().hex[:8]
    # The worker's tables and log live in a directory of their own, removed after a clean run (faust
    # would otherwise leave ``<app-id>-data`` in the caller's working directory).
    workdir = Path(tempfile.mkdtemp(prefix="fedsched-bench-"))
    config = WorkerConfig(
        broker=kafka, dsn=dsn, app_id=f"bench-{tag}", topic_prefix=f"bench{tag}", schema=f"bench_faust_{tag}",
        partitions=partitions, session_timeout_s=6.0, data_dir=workdir / "data",
    )  # fmt: skip
    log = KafkaEventLog(kafka)
    await log.start()
    names = {spec.name: config.source(spec.name) for spec in TOPICS}
    await log.create_topics(
        [TopicSpec(names[s.name], s.partitions, s.key, Cleanup.DELETE, 3_600_000, s.purpose) for s in TOPICS]
    )
    records = [to_record(e) for e in envelopes]
    records = [OutRecord(names[r.topic], r.value, r.key, r.headers) for r in records]
    worker = WorkerProcess(config, workdir / "worker.log")
    worker.start()
    try:
        await wait_members(config, 1, timeout_s=120)
        await wait_quiet(config, timeout_s=120, workers=[worker])
        producer = await log.producer(f"bench-{tag}")  # in transactions, as the scheduler and the API write
        started = time.monotonic()
        for start in range(0, len(records), 1000):
            await producer.append(records[start : start + 1000])
        await producer.close()
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
        ends = AIOKafkaConsumer(bootstrap_servers=kafka, isolation_level="read_committed")
        await admin.start()
        await ends.start()
        left = await lag(config, admin, ends)
        await ends.stop()
        await admin.close()
        await wait_quiet(config, timeout_s=1800, workers=[worker])
        worker_s = time.monotonic() - started
    finally:
        worker.stop()
    sources = list(config.source_topics)
    internal = set(group_topics(config)) - set(sources)

    consumer = AIOKafkaConsumer(*sources, bootstrap_servers=kafka, auto_offset_reset="earliest")
    await consumer.start()
    read_started, seen = time.monotonic(), 0
    while seen < len(records):
        batches = await consumer.getmany(timeout_ms=1000, max_records=10_000)
        seen += sum(len(batch) for batch in batches.values())
    bare_s = time.monotonic() - read_started
    await consumer.stop()

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    runner = ProjectionRunner(log, pool, schema=f"bench_inproc_{tag}", topics=sources, publish=False)
    await runner.start()
    runner_started = time.monotonic()
    await runner.catch_up()
    runner_s = time.monotonic() - runner_started
    await runner.close()
    for schema in (config.schema, f"bench_inproc_{tag}"):
        await readmodels.drop_schema(pool, schema)
    await pool.close()
    await log.close()
    shutil.rmtree(workdir, ignore_errors=True)
    return Figures(
        events=len(records),
        worker_events_per_s=len(records) / worker_s,
        worker_seconds=worker_s,
        lag_at_end_source=sum(n for topic, n in left.items() if topic not in internal),
        lag_at_end_internal=sum(n for topic, n in left.items() if topic in internal),
        bare_aiokafka_events_per_s=len(records) / bare_s,
        in_process_events_per_s=len(records) / runner_s,
    )
