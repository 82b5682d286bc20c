"""Requests checked at the edge, with the catalogue's own rules: every error names the field.

Called by the servicers and the intake. A job spec (protobuf or an intake body) becomes a plain JSON
object and is validated as a ``JobSubmitted`` by the catalogue's pydantic model, exactly as a consumer
would read it from the log; a validation failure becomes ``InvalidArgument`` with the dotted path of
the first bad field (``resources.gpus``). Identifiers, page sizes and page tokens are checked here too.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from events.catalog.base import Event
from events.catalog.errors import EventError, InvalidEvent
from events.catalog.images import refusal, template_images
from events.catalog.jobs import JobSubmitted
from events.catalog.types import GpuModel, Id, RequestId
from events.wire.codec import invalid_event
from services.api.errors import InvalidArgument
from services.api.pb import jobs_pb2

E = TypeVar("E", bound=Event)

DEFAULT_PAGE = 100
MAX_PAGE = 1000
MAX_TEMPLATE_JSON = 65_536 * 2
#: Catalogue field names that the protobuf API spells differently.
_PROTO_NAMES = {"template": "template_json"}
_ID = TypeAdapter(Id)
_REQUEST_ID = TypeAdapter(RequestId)
_GPU_MODEL = TypeAdapter(GpuModel)


def event_from(cls: type[E], body: Mapping[str, Any], *, whole: str = "spec") -> E:
    """Validate ``body`` as the JSON of a ``cls`` event; ``InvalidArgument`` names the first bad field
    (``whole`` when a rule spans several fields, such as a period whose end is before its start)."""
    try:
        raw = json.dumps(body, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidArgument(whole, f"not representable as JSON: {error}") from None
    try:
        return cls.model_validate_json(raw)
    except ValidationError as error:
        raise _invalid(invalid_event(cls.event_type, error), whole) from None


def _invalid(error: EventError, whole: str) -> InvalidArgument:
    if isinstance(error, InvalidEvent):
        head, _, rest = error.field.partition(".")
        field = whole if head == "data" else _PROTO_NAMES.get(head, head) + (f".{rest}" if rest else "")
        return InvalidArgument(field, error.reason)
    return InvalidArgument(whole, str(error))


def job_spec_body(spec: jobs_pb2.JobSpec) -> dict[str, Any]:
    """A protobuf job spec as the JSON body of a ``JobSubmitted`` (without the ids the API adds).

    Unset fields are left out so the catalogue's defaults apply; proto3 ``optional`` fields tell unset
    from zero (``replicas: 0`` is refused, a missing ``replicas`` is 1)."""
    body: dict[str, Any] = {}
    for name in ("name", "tenant", "project", "queue", "kind", "priority_class", "interconnect"):
        value = getattr(spec, name)
        if value:
            body[name] = value
    for name in ("replicas", "gang", "preemptible", "expected_runtime_s", "max_runtime_s"):
        if spec.HasField(name):
            body[name] = getattr(spec, name)
    if spec.interconnect_required:
        body["interconnect_required"] = True
    if spec.HasField("resources"):
        r = spec.resources
        body["resources"] = {
            "cpu_milli": r.cpu_milli,
            "memory_mib": r.memory_mib,
            "gpus": r.gpus,
            "gpu_milli": r.gpu_milli,
            "npus": r.npus,
            "gpu_models": list(r.gpu_models),
            "min_gpu_memory_mib": r.min_gpu_memory_mib,
            "npu_models": list(r.npu_models),
            "min_npu_memory_mib": r.min_npu_memory_mib,
        }
    if spec.datasets:
        body["datasets"] = list(spec.datasets)
    if spec.tolerations:
        body["tolerations"] = [_toleration(t) for t in spec.tolerations]
    if spec.HasField("inference"):
        # proto3 cannot tell an unset number from 0: a service that does not say how many clusters it
        # spreads over is in one (0 was refused as "spread_clusters: greater than or equal to 1").
        body["inference"] = {
            "min_replicas": spec.inference.min_replicas,
            "spread_clusters": spec.inference.spread_clusters or 1,
        }
    if spec.HasField("retry"):
        body["retry"] = {"on_application_failure": spec.retry.on_application_failure}
    if spec.template_json:
        body["template"] = parse_template(spec.template_json)
    if spec.labels:
        body["labels"] = dict(spec.labels)
    return body


def asks_for_something(event: JobSubmitted) -> JobSubmitted:
    """The submission, if it asks for some resource. A job asking for nothing would wait forever (no
    node "fits" it) with nothing to account; the catalogue allows it for records already in the log. A
    replica asking NPUs and no GPU that names GPU models is refused: its NPU models go in ``npu_models``
    (the catalogue keeps accepting such records of a CPU-only job, whose GPU models nothing reads)."""
    r = event.resources
    if not (r.cpu_milli or r.memory_mib or r.gpus or r.gpu_milli or r.npus):
        raise InvalidArgument("resources", "asks for nothing: give cpu_milli, memory_mib, gpus, gpu_milli or npus")
    if r.npus and not (r.gpus or r.gpu_milli):
        for name in ("gpu_models", "min_gpu_memory_mib"):
            if getattr(r, name):
                npu_name = name.replace("gpu", "npu")
                raise InvalidArgument(f"resources.{name}", f"is for GPUs and the replica asks none; NPUs: {npu_name}")
    return event


def spreads_as_it_can(event: JobSubmitted) -> JobSubmitted:
    """The submission, if a service spread over clusters (``inference.spread_clusters`` above 1) can start
    as asked: its first part holds at most ceil(replicas / spread_clusters) replicas, so ``min_replicas``
    above that could never start; all replicas at once (``gang``) is never one cluster's part; and an
    interconnect domain never spans clusters. The catalogue keeps accepting such records already in the
    log (the scheduler starts them with the cap)."""
    inference = event.inference
    if inference is None or inference.spread_clusters <= 1:
        return event
    cap = inference.per_cluster_cap(event.replicas)
    if inference.min_replicas > cap:
        raise InvalidArgument(
            "inference.min_replicas",
            f"{inference.min_replicas} cannot start: spread over {inference.spread_clusters} clusters, a cluster "
            f"holds at most {cap} of its {event.replicas} replicas (lower min_replicas or spread_clusters)",
        )
    if event.gang:
        raise InvalidArgument("gang", "a service spread over clusters starts part by part: it cannot be a gang")
    if event.interconnect_required:
        raise InvalidArgument(
            "interconnect_required", "an interconnect domain never spans clusters: a spread service cannot require one"
        )
    return event


def images_allowed(event: JobSubmitted, registries: Sequence[str] | None) -> None:
    """Raise ``InvalidArgument`` naming the first image of the job's template (``template_json.spec.
    containers[0].image``) that is not a reference Docker would pull, or comes from a registry outside
    ``registries`` (``None``: any registry)."""
    for field, image in template_images(event.template):
        reason = refusal(registries, image, whose=f"tenant {event.tenant}")
        if reason is not None:
            raise InvalidArgument(_PROTO_NAMES["template"] + field.removeprefix("template"), reason)


def _toleration(t: jobs_pb2.Toleration) -> dict[str, Any]:
    out: dict[str, Any] = {"key": t.key}
    if t.HasField("value"):
        out["value"] = t.value
    if t.HasField("effect"):
        out["effect"] = t.effect
    return out


def parse_template(text: str) -> dict[str, Any]:
    if len(text) > MAX_TEMPLATE_JSON:
        raise InvalidArgument("template_json", f"longer than {MAX_TEMPLATE_JSON} characters")
    try:
        value = json.loads(text)
    except ValueError as error:
        raise InvalidArgument("template_json", f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise InvalidArgument("template_json", "must be a JSON object")
    return value


def identifier(field: str, value: str) -> str:
    """A catalogue id (job, tenant, queue, cluster): lowercase letters, digits and ``._-``, 1-128."""
    if not value:
        raise InvalidArgument(field, "is required")
    return _adapted(_ID, field, value)


def is_identifier(value: str) -> bool:
    """Whether ``value`` is a catalogue id (a request naming something else is refused later, naming it)."""
    try:
        _ID.validate_python(value)
    except ValidationError:
        return False
    return True


def optional_identifier(field: str, value: str) -> str | None:
    return identifier(field, value) if value else None


def optional_gpu_model(field: str, value: str) -> str | None:
    """A GPU model name as the catalogue spells them (``A100``, ``V100M32``), or None when empty."""
    return _adapted(_GPU_MODEL, field, value) if value else None


def request_id(field: str, value: str) -> str | None:
    return _adapted(_REQUEST_ID, field, value) if value else None


def _adapted(adapter: TypeAdapter[str], field: str, value: str) -> str:
    try:
        return adapter.validate_python(value)
    except ValidationError as error:
        raise InvalidArgument(field, error.errors(include_url=False)[0]["msg"]) from None


def page_size(value: int) -> int:
    if value == 0:
        return DEFAULT_PAGE
    if not 1 <= value <= MAX_PAGE:
        raise InvalidArgument("page_size", f"must be between 1 and {MAX_PAGE} (0 for {DEFAULT_PAGE})")
    return value


def one_of(field: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise InvalidArgument(field, f"must be one of {', '.join(allowed)}; got {value[:64]!r}")
    return value


def encode_page_token(query: Mapping[str, Any], after: Sequence[Any]) -> str:
    payload = json.dumps({"q": _query_digest(query), "a": list(after)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_page_token(token: str, query: Mapping[str, Any], arity: int) -> list[Any] | None:
    """The position a page token continues from; ``None`` for the first page."""
    if not token:
        return None
    try:
        if len(token) > 2048:
            raise ValueError("too long")
        payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        after = payload["a"]
        if not isinstance(after, list) or len(after) != arity or not all(isinstance(v, int | str) for v in after):
            raise ValueError("bad position")
        if payload["q"] != _query_digest(query):
            raise InvalidArgument("page_token", "belongs to a different query (filters changed)")
    except InvalidArgument:
        raise
    except (ValueError, KeyError, TypeError):
        raise InvalidArgument("page_token", "not a page token this server gave") from None
    return after


def _query_digest(query: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(query, sort_keys=True, default=str).encode()).hexdigest()[:16]
