"""The catalogue's own rules: its contents are pinned, and every declaration keeps the house rules.

Each rule is checked over every declared class, so a new event that forgets one fails here: limits on
every string, list and mapping; no floats; stable type strings; keys that exist; retired names never
reused; one wire vocabulary of reasons that includes the scheduler's.
"""

from __future__ import annotations

import importlib
import json
import re
import types
import typing
from collections.abc import Iterator
from enum import Enum
from typing import ClassVar, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, JsonValue

import events.catalog
from events.catalog import REGISTRY, Event
from events.catalog.base import Event as BaseEvent
from events.catalog.base import EventRegistry
from events.catalog.decisions import SchedulingCycleCompleted
from events.catalog.errors import UnknownEventType, UnsupportedSchemaVersion
from events.catalog.inventory import ClusterRegistered, NodeObserved
from events.catalog.profiles import ResourceProfileUpdated
from events.catalog.reasons import DESCRIPTIONS, ReasonCode

from .catalog_samples import sample
from .catalog_strategies import fixup_for, limits_of, unwrap

pytestmark = pytest.mark.timeout(30)

CATALOGUE = {
    "io.fedsched.BudgetSet": 1,
    "io.fedsched.BudgetWindowOpened": 1,
    "io.fedsched.ClusterNodesListed": 1,
    "io.fedsched.ClusterRegistered": 1,
    "io.fedsched.ClusterStatusChanged": 1,
    "io.fedsched.CohortConfigured": 1,
    "io.fedsched.GovernanceClockTicked": 1,
    "io.fedsched.GovernanceFinding": 1,
    "io.fedsched.GpuHealthReported": 3,
    "io.fedsched.JobCancelRequested": 1,
    "io.fedsched.JobCancelled": 1,
    "io.fedsched.JobFailed": 1,
    "io.fedsched.JobIdleWarning": 1,
    "io.fedsched.JobPlaced": 2,
    "io.fedsched.JobPreempted": 1,
    "io.fedsched.JobPreemptionRequested": 1,
    "io.fedsched.JobQueued": 2,
    "io.fedsched.JobReclaimRequested": 1,
    "io.fedsched.JobReclaimed": 1,
    "io.fedsched.JobRejected": 1,
    "io.fedsched.JobReplicasAdded": 2,
    "io.fedsched.JobRetriesExhausted": 1,
    "io.fedsched.JobRetryScheduled": 1,
    "io.fedsched.JobRunClosed": 1,
    "io.fedsched.JobStarted": 1,
    "io.fedsched.JobSubmitted": 2,
    "io.fedsched.JobSucceeded": 1,
    "io.fedsched.NodeObserved": 1,
    "io.fedsched.NodeRemoved": 1,
    "io.fedsched.NodeUsageReported": 3,
    "io.fedsched.PolicyConfigured": 2,
    "io.fedsched.QuotaRequestApproved": 1,
    "io.fedsched.QuotaRequestRejected": 1,
    "io.fedsched.QuotaRequestSubmitted": 1,
    "io.fedsched.QuotaSet": 2,
    "io.fedsched.QuotaUsageUpdated": 2,
    "io.fedsched.ResourceProfileUpdated": 2,
    "io.fedsched.SchedulingCycleCompleted": 2,
    "io.fedsched.TenantRegistered": 3,
}

PUBLIC = sorted(
    ["REGISTRY", "Event", "PendingReason", "ReasonCode"]
    + [name.rsplit(".", 1)[1] for name in CATALOGUE]
    + ["decisions", "documents", "governance", "inventory", "jobs", "legacy", "lifecycle", "profiles", "schema"]
)


def test_the_catalogue_holds_exactly_the_pinned_types_and_current_versions() -> None:
    # Removing a type or bumping a version is a decision: change this table in the same commit.
    assert {cls.event_type: cls.schema_version for cls in REGISTRY.classes()} == CATALOGUE


def test_the_public_names_of_the_package_are_pinned() -> None:
    assert sorted(events.catalog.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(events.catalog, name) is not None


def test_every_version_below_the_current_one_is_declared_and_upcast() -> None:
    from events.catalog.upcasters import UPCASTERS

    for event_type, current in CATALOGUE.items():
        assert REGISTRY.versions(event_type) == list(range(1, current + 1))
        assert all((event_type, v) in UPCASTERS for v in range(1, current))


def test_a_type_string_is_stable_explicit_and_not_a_module_path() -> None:
    for cls in REGISTRY.all_classes():
        assert cls.event_type == f"io.fedsched.{cls.event_type.rsplit('.', 1)[1]}"
        assert cls.__module__ not in cls.event_type


def test_the_registry_answers_current_and_older_versions_and_refuses_unknown_ones() -> None:
    assert REGISTRY.get("io.fedsched.GpuHealthReported").schema_version == 3
    assert REGISTRY.get_version("io.fedsched.GpuHealthReported", 1).schema_version == 1
    assert "io.fedsched.GpuHealthReported" in REGISTRY and "io.fedsched.Nope" not in REGISTRY
    with pytest.raises(UnknownEventType):
        REGISTRY.get("io.fedsched.Nope")
    with pytest.raises(UnsupportedSchemaVersion):
        REGISTRY.get_version("io.fedsched.JobStarted", 2)


def test_declaring_a_type_twice_or_badly_fails_when_the_class_is_declared() -> None:
    with pytest.raises(TypeError, match="declared twice"):

        class Twice(BaseEvent):
            event_type: ClassVar[str] = "io.fedsched.JobStarted"
            schema_version: ClassVar[int] = 1
            topic: ClassVar[str] = "fedsched.jobs"

    with pytest.raises(TypeError, match=r"must be io\.fedsched"):

        class ModulePath(BaseEvent):
            event_type: ClassVar[str] = "events.catalog.jobs.JobStarted"
            schema_version: ClassVar[int] = 1
            topic: ClassVar[str] = "fedsched.jobs"

    with pytest.raises(TypeError, match="key_field part 'job'"):

        class BadKey(BaseEvent):
            event_type: ClassVar[str] = "io.fedsched.BadKey"
            schema_version: ClassVar[int] = 1
            key_field: ClassVar[str | None] = "job"
            topic: ClassVar[str] = "fedsched.jobs"

    with pytest.raises(KeyError, match="unknown topic"):

        class BadTopic(BaseEvent):
            event_type: ClassVar[str] = "io.fedsched.BadTopic"
            schema_version: ClassVar[int] = 1
            topic: ClassVar[str] = "fedsched.nowhere"

    assert "io.fedsched.BadKey" not in REGISTRY and "io.fedsched.BadTopic" not in REGISTRY


def test_a_fresh_registry_keeps_versions_apart() -> None:
    registry = EventRegistry()
    for cls in REGISTRY.all_classes():
        registry.register(cls)
    assert registry.types() == REGISTRY.types()
    superseded = sum(version - 1 for version in CATALOGUE.values())
    assert len(registry.all_classes()) == len(REGISTRY.all_classes()) == len(CATALOGUE) + superseded


def test_partition_keys_join_their_parts_and_leave_out_missing_ones() -> None:
    assert sample(NodeObserved).partition_key() == "eu-west-a100/gpu-node-017"
    profile = sample(ResourceProfileUpdated)
    assert isinstance(profile, ResourceProfileUpdated)
    assert profile.partition_key() == "eu-west-a100/gpu-node-017"
    assert profile.model_copy(update={"node": None}).partition_key() == "eu-west-a100"
    assert sample(SchedulingCycleCompleted).partition_key() == "cycle-000000481516"
    for cls in REGISTRY.all_classes():
        assert sample(cls).partition_key(), cls.event_type


def test_mappings_are_canonical_so_equal_events_encode_to_equal_bytes() -> None:
    event = sample(ClusterRegistered)
    assert isinstance(event, ClusterRegistered)
    forward = ClusterRegistered(**{**dict(event), "labels": {"a": "1", "b": "2"}})
    backward = ClusterRegistered(**{**dict(event), "labels": {"b": "2", "a": "1"}})
    assert forward.model_dump_json() == backward.model_dump_json()


# -- house rules, checked over every field of every declared class --------------------------------


def walk(cls: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, object, tuple[object, ...]]]:
    """(dotted path, type, metadata) of every field and nested type, models included."""
    for name, field in cls.model_fields.items():
        yield from _walk_type(f"{prefix}{name}", field.annotation, tuple(field.metadata))


def _walk_type(path: str, tp: object, metadata: tuple[object, ...]) -> Iterator[tuple[str, object, tuple[object, ...]]]:
    tp, metadata = unwrap(tp, metadata)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        for arg in get_args(tp):
            if arg is not type(None):
                yield from _walk_type(path, arg, metadata)
        return
    yield path, tp, metadata
    if origin is tuple:
        yield from _walk_type(f"{path}[]", get_args(tp)[0], ())
    elif origin is dict:
        key, value = get_args(tp)
        yield from _walk_type(f"{path}{{key}}", key, ())
        if value is not JsonValue:
            yield from _walk_type(f"{path}{{value}}", value, ())
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        yield from walk(tp, f"{path}.")


def every_field() -> Iterator[tuple[str, object, tuple[object, ...]]]:
    for cls in REGISTRY.all_classes():
        for path, tp, metadata in walk(cls):
            yield f"{cls.event_type}.v{cls.schema_version}:{path}", tp, metadata


def test_every_string_list_and_mapping_in_the_catalogue_has_a_limit() -> None:
    unbounded = []
    for path, tp, metadata in every_field():
        limits = limits_of(metadata)
        # A pattern bounds a string only if it has no open-ended repetition.
        if tp is str and limits.max_length is None and not _bounded(limits.pattern):
            unbounded.append(path)
        if get_origin(tp) in (tuple, dict) and limits.max_length is None and limits.json is None:
            unbounded.append(path)
        if tp is int and (limits.ge is None or limits.le is None):
            unbounded.append(path)
    assert unbounded == []


def _bounded(pattern: str | None) -> bool:
    if pattern is None:
        return False
    outside_classes = re.sub(r"\[(\\.|[^\]])*\]", "", pattern)
    return not any(mark in outside_classes for mark in ("+", "*", ",}"))


def test_no_float_and_no_bare_any_in_the_catalogue() -> None:
    offenders = [path for path, tp, _ in every_field() if tp in (float, typing.Any, object)]
    assert offenders == []


def test_every_field_of_a_known_kind() -> None:
    # Guards the strategy builder and the JSON Schema: every type is one the tests know how to build.
    def known(tp: object) -> bool:
        if tp in (str, int, bool) or get_origin(tp) in (tuple, dict):
            return True
        return isinstance(tp, type) and issubclass(tp, (Enum, BaseModel))

    assert [path for path, tp, _ in every_field() if not known(tp)] == []


def test_retired_fields_stay_reserved() -> None:
    for cls in REGISTRY.classes():
        current = {path.split(":", 1)[1].replace("[]", "") for path, _, _ in walk_named(cls)}
        assert not set(cls.retired_fields) & current, cls.event_type
    assert "gpus.errors" in REGISTRY.get("io.fedsched.GpuHealthReported").retired_fields


def walk_named(cls: type[Event]) -> Iterator[tuple[str, object, tuple[object, ...]]]:
    for path, tp, metadata in walk(cls):
        yield f"{cls.event_type}:{path}", tp, metadata


def test_every_model_with_a_cross_field_rule_has_a_strategy_fixup() -> None:
    models = {tp for _, tp, _ in every_field() if isinstance(tp, type) and issubclass(tp, BaseModel)}
    models |= set(REGISTRY.all_classes())
    missing = [m.__name__ for m in models if m.__pydantic_decorators__.model_validators and fixup_for(m) is None]
    assert missing == []


def test_every_module_docstring_keeps_a_note_on_retired_fields() -> None:
    for name in ("inventory", "jobs", "decisions", "governance", "profiles"):
        doc = importlib.import_module(f"events.catalog.{name}").__doc__ or ""
        assert "Retired fields stay reserved" in doc, name


def test_every_event_has_a_one_line_description() -> None:
    for cls in REGISTRY.all_classes():
        assert cls.doc_line() and cls.doc_line() != Event.doc_line(), cls.event_type


# -- reasons ---------------------------------------------------------------------------------------


def test_every_reason_code_has_a_plain_description_and_a_pascal_case_value() -> None:
    assert set(DESCRIPTIONS) == set(ReasonCode)
    for code in ReasonCode:
        assert code.value[0].isupper() and code.value.isalnum(), code


def test_the_scheduler_decides_with_the_wire_vocabulary() -> None:
    scheduler = pytest.importorskip("services.scheduler.core.policy.reasons")
    assert scheduler.ReasonCode is ReasonCode
    assert set(scheduler.CAPACITY_REASON_ORDER) <= set(ReasonCode)


def test_a_v1_replica_asking_npus_and_no_gpu_has_its_models_read_as_npu_models() -> None:
    """v1 had no ``npu_models``: such a replica could name its NPU models only in ``gpu_models``."""
    from events.catalog.jobs import JobSubmitted
    from events.catalog.upcasters import upcast

    def v2(resources: dict[str, object]) -> JobSubmitted:
        payload = {"job_id": "j-1", "name": "n", "tenant": "t", "resources": resources}
        return JobSubmitted.model_validate_json(json.dumps(upcast("io.fedsched.JobSubmitted", 1, 2, payload)))

    npu = v2({"npus": 4, "gpu_models": ["Ascend910B"], "min_gpu_memory_mib": 65536}).resources
    assert (npu.npu_models, npu.min_npu_memory_mib, npu.gpu_models, npu.min_gpu_memory_mib) == (
        ("Ascend910B",),
        65536,
        (),
        0,
    )
    both = v2({"npus": 4, "gpus": 1, "gpu_models": ["A100"]}).resources
    assert (both.gpu_models, both.npu_models) == (("A100",), ())


def test_a_job_that_does_not_say_is_a_gang_by_its_kind() -> None:
    """Distributed training expects its workers together (as Volcano's and Kueue's defaults do); a batch
    array or a service starts with what fits. A v1 request's ``gang: false`` was the default: unset."""
    from events.catalog.jobs import JobKind, JobSubmitted
    from events.catalog.types import Resources
    from events.catalog.upcasters import upcast

    def job(kind: JobKind, gang: bool | None = None) -> JobSubmitted:
        return JobSubmitted(
            job_id="j", name="n", tenant="t", kind=kind, replicas=4, gang=gang, resources=Resources(gpus=1)
        )

    assert [job(k).is_gang() for k in JobKind] == [True, True, False, False, False]
    assert not job(JobKind.TRAINING, gang=False).is_gang() and job(JobKind.BATCH, gang=True).is_gang()
    v1 = {"job_id": "j", "name": "n", "tenant": "t", "kind": "training", "gang": False, "resources": {"gpus": 1}}
    assert JobSubmitted.model_validate_json(json.dumps(upcast("io.fedsched.JobSubmitted", 1, 2, v1))).is_gang()
