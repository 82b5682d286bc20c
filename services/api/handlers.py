"""gRPC method handlers built from the service descriptors, around plain servicer objects.

Called by ``services.api.server``. For every method of a ``fedsched.v1`` service it takes the
servicer's method of the same name and wraps it so that:
- a request that does not parse as its protobuf message ends with ``INVALID_ARGUMENT`` (field
  ``request``) rather than the library's ``INTERNAL``;
- any exception becomes the status ``services.api.errors`` maps it to (the one place that does);
- the call is logged with its method, code and duration.
A servicer missing a method of its service fails at start, not at the first call.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeAlias

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from services.api.errors import InvalidArgument, abort, classify

log = logging.getLogger("fedsched.api")

#: Calls answered by this process, by (method, status code name): the ``fedsched_api_requests_total``
#: counter (``request_samples``).
REQUESTS: Counter[tuple[str, str]] = Counter()
#: ``grpc.aio.ServicerContext`` (grpc ships no type information).
Context: TypeAlias = Any


class Undecodable:
    """Stands in for a request whose bytes are not its message."""

    def __init__(self, error: str) -> None:
        self.error = error


def _deserializer(cls: type[Message]) -> Callable[[bytes], Message | Undecodable]:
    def parse(data: bytes) -> Message | Undecodable:
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError) as error:
            return Undecodable(str(error)[:200])

    return parse


def generic_handler(service: ServiceDescriptor, servicer: object) -> grpc.GenericRpcHandler:
    handlers = {}
    for method in service.methods:
        impl = getattr(servicer, method.name, None)
        if impl is None:
            raise TypeError(f"{type(servicer).__name__} does not implement {service.full_name}.{method.name}")
        handlers[method.name] = _method_handler(service, method, impl)
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


def _method_handler(
    service: ServiceDescriptor, method: MethodDescriptor, impl: Callable[..., Any]
) -> grpc.RpcMethodHandler[Any, Any]:
    request_cls = message_factory.GetMessageClass(method.input_type)
    response_cls = message_factory.GetMessageClass(method.output_type)
    name = f"/{service.full_name}/{method.name}"
    parse = _deserializer(request_cls)
    if method.client_streaming:
        raise TypeError(f"{name}: client streaming is not used by this API")
    if method.server_streaming:

        async def stream(request: Message | Undecodable, context: Context) -> AsyncIterator[Message]:
            started = time.monotonic()
            code = grpc.StatusCode.OK
            try:
                if isinstance(request, Undecodable):
                    raise InvalidArgument("request", f"not a valid {request_cls.DESCRIPTOR.full_name}: {request.error}")
                async for item in impl(request, context):
                    yield item
            except asyncio.CancelledError:
                code = _ended_early(context)
                raise
            except Exception as error:
                if _is_abort(error):
                    raise
                code = classify(error).code
                await abort(context, error)
            finally:
                _log_call(name, code, started)

        return grpc.unary_stream_rpc_method_handler(
            stream, request_deserializer=parse, response_serializer=response_cls.SerializeToString
        )

    async def unary(request: Message | Undecodable, context: Context) -> Message:
        started = time.monotonic()
        code = grpc.StatusCode.OK
        try:
            if isinstance(request, Undecodable):
                raise InvalidArgument("request", f"not a valid {request_cls.DESCRIPTOR.full_name}: {request.error}")
            result: Message = await impl(request, context)
            return result
        except asyncio.CancelledError:
            code = _ended_early(context)
            raise
        except Exception as error:
            if _is_abort(error):
                raise
            code = classify(error).code
            await abort(context, error)
        finally:
            _log_call(name, code, started)

    return grpc.unary_unary_rpc_method_handler(
        unary, request_deserializer=parse, response_serializer=response_cls.SerializeToString
    )


def _ended_early(context: Context) -> grpc.StatusCode:
    """Why a call's task was cancelled: its deadline passed, or the client went away. Either way the
    client saw no answer, whatever the call did meanwhile (a submission may still be appended: its
    request id makes a retry return the same job), so it is not counted or logged as OK."""
    remaining = context.time_remaining()
    return grpc.StatusCode.DEADLINE_EXCEEDED if remaining is not None and remaining <= 0 else grpc.StatusCode.CANCELLED


def _is_abort(error: BaseException) -> bool:
    """``context.abort`` ends a call by raising; let that through untouched."""
    return isinstance(error, grpc.aio.AbortError)


def request_samples() -> list[tuple[str, dict[str, str], float]]:
    """Prometheus samples of the calls answered so far (for ``events.plumbing.metrics``)."""
    return [
        ("fedsched_api_requests_total", {"method": method, "code": code}, float(count))
        for (method, code), count in sorted(REQUESTS.items())
    ]


def _log_call(method: str, code: grpc.StatusCode, started: float) -> None:
    REQUESTS[(method, code.name)] += 1
    log.info("event=rpc method=%s code=%s ms=%.1f", method, code.name, (time.monotonic() - started) * 1000)
