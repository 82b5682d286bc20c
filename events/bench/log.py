"""``fedsched bench log``: events per second through our log adapters, next to bare aiokafka.

Called by ``fedsched bench log``. Prints figures; asserts nothing. The baseline is a bare aiokafka
idempotent producer and a plain consumer on the same broker in the same run, so the ratio survives a
noisy machine better than the absolute numbers do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from events.catalog.topics import Cleanup, TopicSpec
from events.log.contract import EventLog, OutRecord, TopicPartition
from events.log.reading import read_to_end

_PARTITIONS = 3


@dataclass
class Figure:
    path: str
    append_per_s: float
    read_per_s: float
    group_read_per_s: float | None = None


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("log", help="append/read events per second: Kafka adapter, embedded log, bare aiokafka")
    parser.add_argument("--kafka", help="Kafka bootstrap host:port (skips the Kafka figures if absent)")
    parser.add_argument("--postgres", help="PostgreSQL DSN for the embedded log (skips it if absent)")
    parser.add_argument("--events", type=int, default=50_000, help="events per run (default 50000)")
    parser.add_argument("--size", type=int, default=1024, help="event size in bytes (default 1024)")
    parser.add_argument("--batch", type=int, default=500, help="records per append call (default 500)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    figures: list[Figure] = []
    payload = bytes(i % 251 for i in range(args.size))
    if args.kafka:
        figures.append(await _bare_aiokafka(args.kafka, args.events, payload))
        from events.log.kafka import KafkaEventLog

        figures.append(await _adapter("kafka adapter (idempotent)", KafkaEventLog(args.kafka), args, payload, None))
        figures.append(
            await _adapter("kafka adapter (transactional)", KafkaEventLog(args.kafka), args, payload, "bench-tx")
        )
    if args.postgres:
        from events.log.postgres import PostgresEventLog

        figures.append(
            await _adapter("embedded log (PostgreSQL)", PostgresEventLog(args.postgres), args, payload, None)
        )
    _print(figures, args)
    return 0


async def _timed(label: str, action: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await action()
    return time.perf_counter() - started


async def _adapter(name: str, log: EventLog, args: argparse.Namespace, payload: bytes, txn: str | None) -> Figure:
    await log.start()
    topic = f"bench.{uuid.uuid4().hex[:8]}"
    await log.create_topics([TopicSpec(topic, _PARTITIONS, "bench", Cleanup.DELETE, 3_600_000, "benchmark")])
    producer = await log.producer(None if txn is None else f"{txn}-{uuid.uuid4().hex[:6]}")
    records = [
        OutRecord(topic, value=payload, key=f"job-{i}".encode(), headers=(("ce_type", b"bench"),))
        for i in range(args.events)
    ]

    async def append_all() -> None:
        for start in range(0, len(records), args.batch):
            await producer.append(records[start : start + args.batch])

    append_s = await _timed("append", append_all)
    await producer.close()
    reader = await log.reader()

    async def read_all() -> None:
        seen = 0
        for partition in range(_PARTITIONS):
            async for batch in read_to_end(reader, TopicPartition(topic, partition), max_records=5000):
                seen += len(batch)
        if seen != args.events:
            raise RuntimeError(f"{name}: read {seen} of {args.events} events")

    read_s = await _timed("read", read_all)
    await reader.close()
    consumer = await log.group_consumer(f"bench-{topic}", [topic])

    async def consume_all() -> None:
        seen = 0
        while seen < args.events:
            seen += len(await consumer.poll(max_records=5000, timeout_s=1.0))

    group_s = await _timed("group", consume_all)
    await consumer.close()
    await log.close()
    return Figure(name, args.events / append_s, args.events / read_s, args.events / group_s)


async def _bare_aiokafka(bootstrap: str, count: int, payload: bytes) -> Figure:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = f"bench.bare.{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, _PARTITIONS, 1)])
    await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", max_batch_size=1024 * 1024
    )
    await producer.start()

    async def produce() -> None:
        futures = [await producer.send(topic, payload, key=f"job-{i}".encode()) for i in range(count)]
        await asyncio.gather(*futures)

    append_s = await _timed("append", produce)
    await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()

    async def consume() -> None:
        seen = 0
        while seen < count:
            batches = await consumer.getmany(timeout_ms=1000, max_records=5000)
            seen += sum(len(b) for b in batches.values())

    read_s = await _timed("read", consume)
    await consumer.stop()
    return Figure("bare aiokafka (baseline)", count / append_s, count / read_s, count / read_s)


def _print(figures: list[Figure], args: argparse.Namespace) -> None:
    baseline = next((f for f in figures if f.path.startswith("bare")), None)
    if args.json:
        out = {
            "events": args.events,
            "size": args.size,
            "batch": args.batch,
            "figures": [
                {
                    **asdict(f),
                    "append_vs_bare": None if baseline is None else f.append_per_s / baseline.append_per_s,
                    "read_vs_bare": None if baseline is None else f.read_per_s / baseline.read_per_s,
                }
                for f in figures
            ],
        }
        print(json.dumps(out, indent=2))
        return
    print(f"{args.events} events of {args.size} B, appended in batches of {args.batch}")
    print("read = one partition at a time by offset (replay, audit); group = a group member polling all partitions")
    header = f"{'path':<32}{'append ev/s':>13}{'read ev/s':>12}{'group ev/s':>12}"
    print(header + f"{'append/bare':>13}{'read/bare':>11}{'group/bare':>12}")
    for f in figures:
        group = f.group_read_per_s or 0.0
        row = f"{f.path:<32}{f.append_per_s:>13,.0f}{f.read_per_s:>12,.0f}{group:>12,.0f}"
        if baseline is not None:
            row += f"{f.append_per_s / baseline.append_per_s:>13.2f}{f.read_per_s / baseline.read_per_s:>11.2f}"
            row += f"{group / baseline.read_per_s:>12.2f}"
        print(row)
