"""The API's domain errors and the one place that maps errors to gRPC status codes and reason codes.

Called by every handler of the gRPC servicers (through ``services.api.handlers``), by the auth
interceptor and by the intake, which answers a refused request with a ``JobRejected`` carrying the
same reason code and field. Every error names what was wrong; an error about a request field names it
with the catalogue's dotted path (``resources.gpus``).

On the wire an error is a gRPC status with the rich error model: a ``google.rpc.BadRequest`` field
violation for ``INVALID_ARGUMENT`` (and ``google.rpc.ErrorInfo`` with the reason code for every code),
plus the trailing metadata ``fedsched-field`` and ``fedsched-reason`` for clients without it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import ClassVar, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from events.catalog.errors import EventError, InvalidEvent
from events.catalog.reasons import ReasonCode
from events.log.contract import LogError
from events.plumbing.outage import transient
from services.api.metadata import FIELD_HEADER, REASON_HEADER

log = logging.getLogger("fedsched.api")

DOMAIN = "fedsched.io"
_MESSAGE_LIMIT = 1024
_FIELD_PATH = re.compile(r"^[A-Za-z0-9_.\[\]-]{1,256}$")


class ApiError(Exception):
    """Base of the errors a handler raises on purpose. ``field`` is a dotted request path, if any."""

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL
    default_reason: ClassVar[ReasonCode] = ReasonCode.UNKNOWN

    def __init__(self, message: str, *, field: str | None = None, reason: ReasonCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.reason = reason or self.default_reason

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidArgument(ApiError):
    code = grpc.StatusCode.INVALID_ARGUMENT
    default_reason = ReasonCode.INVALID_REQUEST

    def __init__(self, field: str, message: str, *, reason: ReasonCode | None = None) -> None:
        super().__init__(message, field=field, reason=reason)


class Unauthenticated(ApiError):
    code = grpc.StatusCode.UNAUTHENTICATED
    default_reason = ReasonCode.UNAUTHORIZED


class PermissionDenied(ApiError):
    code = grpc.StatusCode.PERMISSION_DENIED
    default_reason = ReasonCode.UNAUTHORIZED


class NotFound(ApiError):
    code = grpc.StatusCode.NOT_FOUND
    default_reason = ReasonCode.INVALID_REQUEST


class AlreadyExists(ApiError):
    code = grpc.StatusCode.ALREADY_EXISTS
    default_reason = ReasonCode.DUPLICATE_REQUEST


class FailedPrecondition(ApiError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    default_reason = ReasonCode.INVALID_REQUEST


class Unavailable(ApiError):
    code = grpc.StatusCode.UNAVAILABLE
    default_reason = ReasonCode.UNKNOWN


def classify(error: BaseException) -> ApiError:
    """Any exception as the ``ApiError`` a client sees. Unexpected ones are logged and hidden."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, InvalidEvent):
        return InvalidArgument(error.field, error.reason)
    if isinstance(error, EventError):
        return InvalidArgument(getattr(error, "field", "request"), str(error))
    if isinstance(error, LogError | OSError | asyncio.TimeoutError) or _is_database_outage(error):
        log.warning("event=dependency_unavailable error=%r", error)
        return Unavailable("the event log or the database is unavailable; retry later")
    log.exception("event=internal_error", exc_info=error)
    return ApiError("internal error; the server log has the details")


def _is_database_outage(error: BaseException) -> bool:
    # The same rule as the hosts' (a restart's terminated sessions included), so a call that meets an
    # outage answers UNAVAILABLE, which clients retry, not INTERNAL.
    return transient(error)


def reason_of(error: BaseException) -> ReasonCode:
    return classify(error).reason


def field_path(path: str) -> str | None:
    """``path`` if it is a valid catalogue field path (``FieldPath``), else its longest valid prefix."""
    if _FIELD_PATH.match(path):
        return path
    parts: list[str] = []
    for part in path.split("."):
        if not _FIELD_PATH.match(".".join([*parts, part])):
            break
        parts.append(part)
    return ".".join(parts) or None


def trailing_metadata(error: ApiError) -> tuple[tuple[str, str | bytes], ...]:
    details = [_packed(error_details_pb2.ErrorInfo(reason=error.reason.value, domain=DOMAIN))]
    if error.field is not None:
        violation = error_details_pb2.BadRequest.FieldViolation(field=error.field, description=error.message)
        details.append(_packed(error_details_pb2.BadRequest(field_violations=[violation])))
    status = status_pb2.Status(code=error.code.value[0], message=_bounded(str(error)), details=details)
    out: list[tuple[str, str | bytes]] = [
        ("grpc-status-details-bin", status.SerializeToString()),
        (REASON_HEADER, error.reason.value),
    ]
    safe = field_path(error.field) if error.field else None
    if safe:
        out.append((FIELD_HEADER, safe))
    return tuple(out)


async def abort(context: grpc.aio.ServicerContext[object, object], error: BaseException) -> NoReturn:
    """End the call with the status of ``error`` (never returns)."""
    api_error = classify(error)
    await context.abort(api_error.code, _bounded(str(api_error)), trailing_metadata(api_error))
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


def _packed(message: error_details_pb2.ErrorInfo | error_details_pb2.BadRequest) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _bounded(text: str) -> str:
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."
