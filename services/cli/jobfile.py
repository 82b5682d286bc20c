"""The job file of ``fedsched submit``: YAML with the fields of ``JobSubmitted``, as a protobuf job spec.

Called by ``services.cli.people_cmd``. Checks shapes and types here (naming the field); every rule about
values (limits, patterns, defaults) is the server's, which applies the catalogue's own model.

```yaml
name: llama-finetune            # required
tenant: team-a                  # required
resources: {gpus: 8, cpu_milli: 32000, memory_mib: 262144, gpu_models: [A100-80G]}   # required
project: nlp                    # optional from here on; defaults are the catalogue's
queue: default
kind: fine_tune                 # training, fine_tune, batch, inference, notebook
priority_class: standard        # production_inference, critical_training, standard, best_effort
replicas: 2
gang: true
interconnect: rdma              # none, nvlink, rdma: replicas inside one RDMA fabric / NVLink domain
interconnect_required: true     # a hard constraint (otherwise a preference)
datasets: [c4-en]
preemptible: true
expected_runtime: 6h            # seconds, or 90s / 30m / 6h / 2d / 1h30m (also expected_runtime_s)
max_runtime: 1d
retry: {on_application_failure: 2}   # retries after the workload fails (node losses: the policy's)
template: {image: "registry.example/llm:1.2", command: [python, train.py]}
labels: {team: nlp}
client_request_id: ft-2026-12-02-1   # idempotency key (optional)
```
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from services.api.pb import jobs_pb2

_SCALARS = {
    "name": str,
    "tenant": str,
    "project": str,
    "queue": str,
    "kind": str,
    "priority_class": str,
    "interconnect": str,
    "interconnect_required": bool,
    "replicas": int,
    "gang": bool,
    "preemptible": bool,
}
_RESOURCES = {
    "cpu_milli": int,
    "memory_mib": int,
    "gpus": int,
    "gpu_milli": int,
    "npus": int,
    "min_gpu_memory_mib": int,
    "min_npu_memory_mib": int,
}
_MODEL_LISTS = ("gpu_models", "npu_models")
_DURATIONS = ("expected_runtime", "max_runtime")
_OTHER = {"resources", "datasets", "tolerations", "inference", "retry", "template", "labels", "client_request_id"}
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


class JobFileError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def parse(text: str) -> tuple[jobs_pb2.JobSpec, str | None]:
    """The job spec and the file's ``client_request_id`` (if any). Raises ``JobFileError``."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise JobFileError("(file)", f"not valid YAML: {error}") from None
    if not isinstance(doc, dict):
        raise JobFileError("(file)", "must be a YAML mapping of job fields")
    known = set(_SCALARS) | set(_OTHER) | set(_DURATIONS) | {f"{d}_s" for d in _DURATIONS}
    for key in doc:
        if key not in known:
            raise JobFileError(str(key), f"unknown field; known: {', '.join(sorted(known))}")
    spec = jobs_pb2.JobSpec()
    for name, kind in _SCALARS.items():
        if name in doc:
            _set(spec, name, _typed(name, doc[name], kind), field=name)
    resources = doc.get("resources")
    if resources is not None:
        _resources(spec, _mapping("resources", resources))
    for name in _DURATIONS:
        for key in (name, f"{name}_s"):
            if key in doc:
                _set(spec, f"{name}_s", seconds(key, doc[key]), field=key)
    if "datasets" in doc:
        spec.datasets.extend(_strings("datasets", doc["datasets"]))
    for i, item in enumerate(_list("tolerations", doc.get("tolerations", []))):
        item = _mapping(f"tolerations[{i}]", item)
        toleration = spec.tolerations.add(key=_typed(f"tolerations[{i}].key", item.get("key", ""), str))
        for part in ("value", "effect"):
            if item.get(part) is not None:
                setattr(toleration, part, _typed(f"tolerations[{i}].{part}", item[part], str))
    if doc.get("inference") is not None:
        inference = _mapping("inference", doc["inference"])
        for part in ("min_replicas", "spread_clusters"):
            if part in inference:
                field = f"inference.{part}"
                _set(spec.inference, part, _typed(field, inference[part], int), field=field)
        spec.inference.SetInParent()
    if doc.get("retry") is not None:
        retry = _mapping("retry", doc["retry"])
        for part in retry:
            if part != "on_application_failure":
                raise JobFileError(f"retry.{part}", "unknown field; known: on_application_failure")
        if "on_application_failure" in retry:
            field = "retry.on_application_failure"
            _set(spec.retry, "on_application_failure", _typed(field, retry["on_application_failure"], int), field=field)
        spec.retry.SetInParent()
    if doc.get("template") is not None:
        spec.template_json = json.dumps(_mapping("template", doc["template"]), default=str)
    for key, value in _mapping("labels", doc.get("labels") or {}).items():
        spec.labels[str(key)] = _typed(f"labels.{key}", value, str)
    request_id = doc.get("client_request_id")
    return spec, None if request_id is None else _typed("client_request_id", request_id, str)


def _resources(spec: jobs_pb2.JobSpec, doc: dict[str, Any]) -> None:
    for key in doc:
        if key not in _RESOURCES and key not in _MODEL_LISTS:
            raise JobFileError(f"resources.{key}", f"unknown field; known: {', '.join([*_RESOURCES, *_MODEL_LISTS])}")
    for name, kind in _RESOURCES.items():
        if name in doc:
            field = f"resources.{name}"
            _set(spec.resources, name, _typed(field, doc[name], kind), field=field)
    for name in _MODEL_LISTS:
        if name in doc:
            getattr(spec.resources, name).extend(_strings(f"resources.{name}", doc[name]))
    spec.resources.SetInParent()


def seconds(field: str, value: Any) -> int:
    """A duration: whole seconds, or text such as ``90s``, ``30m``, ``6h``, ``2d``, ``1h30m``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        match = _DURATION.match(value.strip())
        if match and any(match.groups()):
            d, h, m, s = (int(g or 0) for g in match.groups())
            return ((d * 24 + h) * 60 + m) * 60 + s
    raise JobFileError(field, f"a duration is whole seconds or text like 90s, 30m, 6h, 2d; got {value!r}")


def _set(message: Any, name: str, value: Any, *, field: str) -> None:
    """Set ``name`` on a (nested) message; ``field`` is where the value is in the file, for the error."""
    try:
        setattr(message, name, value)
    except (ValueError, TypeError) as error:
        raise JobFileError(field, f"out of range: {error}") from None


def _typed(field: str, value: Any, kind: type) -> Any:
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise JobFileError(field, f"must be a whole number, got {value!r}")
    if kind is bool and not isinstance(value, bool):
        raise JobFileError(field, f"must be true or false, got {value!r}")
    if kind is str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise JobFileError(field, f"must be text, got {value!r}")
        return str(value)
    return value


def _mapping(field: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise JobFileError(field, "must be a mapping")
    return value


def _list(field: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise JobFileError(field, "must be a list")
    return value


def _strings(field: str, value: Any) -> list[str]:
    return [_typed(f"{field}[{i}]", item, str) for i, item in enumerate(_list(field, value))]
