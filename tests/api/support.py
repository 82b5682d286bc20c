"""Builders and helpers of the API tests: keys and tokens, job specs, events for the log, waiting for
records on the log (by reading it with a timeout, never by sleeping)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from events.catalog.base import Event
from events.catalog.errors import EventError
from events.catalog.governance import FindingKind, GovernanceFinding
from events.catalog.reasons import ReasonCode
from events.log.contract import EventLog, LogRecord, TopicPartition
from events.log.publisher import to_record
from events.wire.codec import decode
from events.wire.envelope import Envelope
from services.api.auth import AuthConfig
from services.api.pb import jobs_pb2

ISSUER = "https://issuer.test"
AUDIENCE = "fedsched-test"
SECRET = b"test-secret-of-at-least-32-bytes-long!!"


def rsa_pair() -> tuple[Any, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return key, public


@dataclass
class Keys:
    rsa_private: Any
    rsa_public_pem: bytes
    secret: bytes = SECRET

    @classmethod
    def make(cls) -> Keys:
        private, public = rsa_pair()
        return cls(private, public)

    def auth(self) -> AuthConfig:
        return AuthConfig(ISSUER, AUDIENCE, hs256_secret=self.secret, rs256_public_key=self.rsa_public_pem)

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "alice@example.com",
            "iat": now,
            "exp": now + 600,
            "tenants": ["team-a"],
            "roles": ["submitter"],
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def hs(self, **overrides: Any) -> str:
        return jwt.encode(self.claims(**overrides), self.secret, algorithm="HS256")

    def rs(self, **overrides: Any) -> str:
        return jwt.encode(self.claims(**overrides), self.rsa_private, algorithm="RS256")

    def admin(self) -> str:
        return self.hs(sub="root@example.com", tenants=["*"], roles=["admin"])


def spec(**overrides: Any) -> jobs_pb2.JobSpec:
    """A valid job spec: 2 whole A100s, tenant team-a."""
    base: dict[str, Any] = {
        "name": "train-resnet",
        "tenant": "team-a",
        "resources": jobs_pb2.Resources(cpu_milli=8000, memory_mib=32768, gpus=2, gpu_models=["A100-80G"]),
    }
    base.update(overrides)
    return jobs_pb2.JobSpec(**base)


def new_request_id() -> str:
    return f"test-{uuid.uuid4().hex}"


def a_finding(tenant: str | None, subject: str, message: str) -> GovernanceFinding:
    """A crash-loop finding about job ``subject`` of ``tenant``, or, without a tenant, a suspect node
    ``subject`` of cluster ``sim-1``: as the governance service publishes them."""
    if tenant is None:
        return GovernanceFinding(
            finding_id=f"node-{subject}",
            kind=FindingKind.SUSPECT_NODE,
            rule="suspect-node",
            reason=ReasonCode.NODE_FAILURE,
            cluster="sim-1",
            node=subject,
            observed_ms=int(time.time() * 1000),
            message=message,
        )
    return GovernanceFinding(
        finding_id=f"crash-{subject}",
        kind=FindingKind.CRASH_LOOP,
        rule="crash-loop",
        reason=ReasonCode.CRASH_LOOP,
        tenant=tenant,
        job_id=subject,
        observed_ms=int(time.time() * 1000),
        message=message,
    )


@dataclass
class LogTail:
    """Reads a topic from where it ended when the tail was made."""

    log: EventLog
    topic: str
    start: dict[TopicPartition, int] = field(default_factory=dict)

    @classmethod
    async def of(cls, log: EventLog, topic: str) -> LogTail:
        reader = await log.reader()
        try:
            parts = await log.partitions(topic)
            start = {TopicPartition(topic, p): await reader.end_offset(TopicPartition(topic, p)) for p in range(parts)}
        finally:
            await reader.close()
        return cls(log, topic, start)

    async def read_all(self) -> list[LogRecord]:
        """Every record committed since the tail was made (up to the current end)."""
        reader = await self.log.reader()
        out: list[LogRecord] = []
        try:
            for tp, offset in self.start.items():
                end = await reader.end_offset(tp)
                while offset < end:
                    batch = await reader.read(tp, offset, timeout_s=1.0)
                    if not batch:
                        if await reader.caught_up(tp, offset):
                            break
                        continue
                    out += batch
                    offset = batch[-1].offset + 1
        finally:
            await reader.close()
        return out

    async def wait_for(
        self, predicate: Callable[[LogRecord], bool], *, count: int = 1, timeout_s: float = 30.0
    ) -> list[LogRecord]:
        """Records matching ``predicate``, once there are ``count`` of them (reads the log with a timeout)."""
        deadline = time.monotonic() + timeout_s
        reader = await self.log.reader()
        positions = dict(self.start)
        found: list[LogRecord] = []
        try:
            while time.monotonic() < deadline:
                for tp, offset in positions.items():
                    batch = await reader.read(tp, offset, timeout_s=0.2)
                    if batch:
                        positions[tp] = batch[-1].offset + 1
                        found += [r for r in batch if predicate(r)]
                if len(found) >= count:
                    return found
        finally:
            await reader.close()
        raise AssertionError(f"{len(found)} of {count} awaited records on {self.topic} after {timeout_s} s")


def envelope_of(record: LogRecord) -> Envelope | None:
    try:
        return decode(record.headers, record.value)
    except EventError:
        return None


def header(record: LogRecord, name: str) -> str | None:
    value = record.header(name)
    return None if value is None else value.decode()


async def append(log: EventLog, events: Sequence[Event | Envelope], *, time_ms: int | None = None) -> None:
    producer = await log.producer()
    try:
        envelopes = [
            e
            if isinstance(e, Envelope)
            else Envelope(id=uuid.uuid4().hex, time_ms=time_ms or int(time.time() * 1000), data=e)
            for e in events
        ]
        await producer.append([to_record(e) for e in envelopes])
    finally:
        await producer.close()


def status_of(error: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str | None]:
    """The code and the ``fedsched-field`` trailing metadata of a failed call."""
    field_name = None
    for key, value in error.trailing_metadata() or ():
        if key == "fedsched-field":
            field_name = value
    return error.code(), field_name
