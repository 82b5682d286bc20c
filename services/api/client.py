"""A small asyncio client of the API: a channel (plaintext, TLS or mutual TLS), the bearer token on
every call, stubs of every service, and gRPC errors turned into one readable form.

Called by the CLI's API commands (``services.cli.people_cmd``, ``config_cmd``, ``gov_quota_cmd``,
``gov_report_cmd``, ``audit timeline``), by tests and by tools written in Python.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from services.api.metadata import FIELD_HEADER, REASON_HEADER
from services.api.pb import (
    audit_pb2_grpc,
    config_pb2_grpc,
    governance_pb2_grpc,
    jobs_pb2_grpc,
    quota_pb2_grpc,
    resources_pb2_grpc,
)

DEFAULT_SERVER = "127.0.0.1:50051"
DEV_TOKEN_FILE = Path(".fedsched") / "dev-token"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    server: str = DEFAULT_SERVER
    token: str | None = None
    ca_cert: bytes | None = None
    """Trust this CA (PEM) and use TLS."""
    client_cert: bytes | None = None
    client_key: bytes | None = None
    timeout_s: float = 30.0


def resolve_token(flag: str | None) -> str | None:
    """``--token``, else ``FEDSCHED_TOKEN``, else the file ``FEDSCHED_TOKEN_FILE`` names, else the
    development token ``fedsched up`` leaves in ``.fedsched/dev-token``."""
    if flag:
        return flag
    if os.environ.get("FEDSCHED_TOKEN"):
        return os.environ["FEDSCHED_TOKEN"]
    path = Path(os.environ.get("FEDSCHED_TOKEN_FILE") or DEV_TOKEN_FILE)
    if path.is_file():
        return path.read_text().strip() or None
    return None


class CallError(Exception):
    """A failed call: the gRPC code name, the message, and the field and reason when the server gave them."""

    def __init__(self, code: str, message: str, field: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.reason = reason

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "field": self.field, "reason": self.reason}


def call_error(error: grpc.aio.AioRpcError) -> CallError:
    metadata = {key: value for key, value in (error.trailing_metadata() or ())}
    field = metadata.get(FIELD_HEADER)
    raw = metadata.get("grpc-status-details-bin")
    if isinstance(raw, bytes):
        status = status_pb2.Status.FromString(raw)
        for detail in status.details:
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(bad) and bad.field_violations:
                field = bad.field_violations[0].field
    reason = metadata.get(REASON_HEADER)
    return CallError(
        error.code().name,
        error.details() or error.code().name,
        field if isinstance(field, str) else None,
        reason if isinstance(reason, str) else None,
    )


class Client:
    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        options = [("grpc.max_receive_message_length", 4 * 1024 * 1024)]
        if config.ca_cert is not None or config.client_cert is not None:
            credentials = grpc.ssl_channel_credentials(config.ca_cert, config.client_key, config.client_cert)
            self.channel = grpc.aio.secure_channel(config.server, credentials, options=options)
        else:
            self.channel = grpc.aio.insecure_channel(config.server, options=options)
        # The generated stubs carry no type information.
        self.jobs: Any = jobs_pb2_grpc.JobServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.resources: Any = resources_pb2_grpc.ResourceServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.quota: Any = quota_pb2_grpc.QuotaServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.audit: Any = audit_pb2_grpc.AuditServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.documents: Any = config_pb2_grpc.ConfigServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.governance: Any = governance_pb2_grpc.GovernanceServiceStub(self.channel)  # type: ignore[no-untyped-call]

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.config.token}"),) if self.config.token else ()

    async def call(self, method: Callable[..., Any], request: Any, *, retries: int = 2) -> Any:
        """A unary call with the token and deadline; ``UNAVAILABLE`` is retried (every write of the API
        is idempotent given a request id). Raises ``CallError``."""
        delay = 0.2
        for attempt in range(retries + 1):
            try:
                return await method(request, metadata=self.metadata, timeout=self.config.timeout_s)
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE or attempt == retries:
                    raise call_error(error) from None
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def stream(self, method: Callable[..., Any], request: Any) -> Any:
        return method(request, metadata=self.metadata)

    async def close(self) -> None:
        await self.channel.close()
