"""Helpers of the restart tests: intake requests, the answers on the log keyed by request, gRPC health,
waiting for a condition (with a timeout, never a bare sleep), and a PostgreSQL or Kafka of the test's own
that it may stop and start (``services.runtime.embedded_pg``, the same code as deploy/local/postgres.py;
``deploy/local/kafka.sh``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from events.catalog.topics import DEAD_LETTERS, INTAKE, JOBS
from events.log.contract import EventLog, LogRecord, OutRecord, TopicPartition
from events.log.deadletter import CODE, REASON
from services.api.intake import AUTH_HEADER, SUBMIT

ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def eventually(condition: Callable[[], Awaitable[object]], what: str, timeout_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await condition():
        assert loop.time() < deadline, f"timed out after {timeout_s:.0f} s waiting until {what}"
        await asyncio.sleep(0.05)


def submission(
    request_id: str, token: str, *, tenant: str = "team-a", gpus: int = 1, ce_id: str | None = None
) -> OutRecord:
    """A ``JobSubmitted`` request on the intake topic (``gpus=-1``: one the intake rejects)."""
    body: dict[str, Any] = {
        "name": "nightly-eval",
        "tenant": tenant,
        "client_request_id": request_id,
        "resources": {"gpus": gpus, "cpu_milli": 1000, "memory_mib": 1024},
        "expected_runtime_s": 60,
    }
    headers = (
        ("ce_specversion", b"1.0"),
        ("ce_id", (ce_id or f"ce-{request_id}").encode()),
        ("ce_source", b"urn:tool:pipelines"),
        ("ce_type", SUBMIT.encode()),
        ("content-type", b"application/json"),
        (AUTH_HEADER, f"Bearer {token}".encode()),
    )
    return OutRecord(INTAKE.name, value=json.dumps(body).encode(), key=request_id.encode(), headers=headers)


def garbage(ce_id: str) -> OutRecord:
    """A record that is no request at all: dead-lettered."""
    headers = (("ce_specversion", b"1.0"), ("ce_id", ce_id.encode()), ("ce_source", b"urn:x"), ("ce_type", b"x.y"))
    return OutRecord(INTAKE.name, value=b"{}", key=ce_id.encode(), headers=headers)


def ce_of(record: OutRecord) -> str:
    """The ``ce_id`` of a request written by these helpers."""
    return dict(record.headers)["ce_id"].decode()


async def publish(log: EventLog, records: list[OutRecord]) -> None:
    producer = await log.producer()
    try:
        await producer.append(records)
    finally:
        await producer.close()


@dataclass
class Answers:
    """What the log holds in answer to intake requests, keyed by the request's ``ce_id``."""

    records: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """ce_id -> [(answer id, kind)] in log order; kind: the event type, or ``dead-letter:<code>``."""
    reasons: dict[str, str] = field(default_factory=dict)
    """ce_id -> the dead letter's reason."""

    def kinds(self, ce_id: str) -> list[str]:
        return [kind for _, kind in self.records.get(ce_id, [])]

    def ids(self) -> set[tuple[str, str]]:
        return {(ce_id, ident) for ce_id, answers in self.records.items() for ident, _ in answers}

    def answered(self, ce_ids: list[str]) -> bool:
        return all(ce_id in self.records for ce_id in ce_ids)


async def read_topic(log: EventLog, topic: str) -> list[LogRecord]:
    reader = await log.reader()
    out: list[LogRecord] = []
    try:
        for partition in range(await log.partitions(topic)):
            tp = TopicPartition(topic, partition)
            end = await reader.end_offset(tp)
            position = 0
            while position < end:
                batch = await reader.read(tp, position, max_records=2000, timeout_s=1.0)
                if not batch:
                    break
                out += batch
                position = batch[-1].offset + 1
    finally:
        await reader.close()
    return out


def _text(record: LogRecord, name: str) -> str | None:
    raw = record.header(name)
    return None if raw is None else raw.decode()


async def answers(log: EventLog) -> Answers:
    found = Answers()
    for record in await read_topic(log, JOBS.name):
        cause = _text(record, "ce_causationid")
        if cause is not None and _text(record, "ce_source") in ("urn:fedsched:intake", "urn:fedsched:api"):
            kind = (_text(record, "ce_type") or "").removeprefix("io.fedsched.")
            found.records.setdefault(cause, []).append((_text(record, "ce_id") or "", kind))
    for record in await read_topic(log, DEAD_LETTERS.name):
        if (_text(record, "fedsched_dlq_source") or "").split("/")[0] != INTAKE.name:
            continue
        ce_id = _text(record, "ce_id") or ""
        source = _text(record, "fedsched_dlq_source") or ""
        found.records.setdefault(ce_id, []).append((f"dlq:{source}", f"dead-letter:{_text(record, CODE)}"))
        found.reasons[ce_id] = _text(record, REASON) or ""
        assert record.header(AUTH_HEADER) is None, "a credential was copied out of the intake topic"
    return found


async def health(address: str, service: str) -> int:
    """The gRPC health status of ``service`` at ``address`` (NOT_SERVING when the server does not answer)."""
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            response = await health_pb2_grpc.HealthStub(channel).Check(  # type: ignore[attr-defined]
                health_pb2.HealthCheckRequest(service=service), timeout=5
            )
        except grpc.aio.AioRpcError:
            return NOT_SERVING
    return int(response.status)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Broker:
    """A Kafka broker of the test's own (``deploy/local/kafka.sh``), stopped and started on its ports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.bootstrap = ""

    async def start(self) -> str:
        out = await asyncio.to_thread(
            subprocess.run, ["bash", str(KAFKA_SH), "start", str(self.directory)], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-3000:]
        bootstrap = out.stdout.strip().splitlines()[-1]
        assert not self.bootstrap or bootstrap == self.bootstrap, "the broker came back on another port"
        self.bootstrap = bootstrap
        return bootstrap

    async def stop(self) -> None:
        out = await asyncio.to_thread(
            subprocess.run, ["bash", str(KAFKA_SH), "stop", str(self.directory)], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-3000:]
