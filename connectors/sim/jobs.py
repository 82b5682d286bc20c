"""What the simulator keeps of a submitted job, and how long a run of it lasts.

Called by the model when a ``JobSubmitted`` arrives. Pure: no I/O.

How long a job runs, first match wins (simulated seconds):

1. the trace's times carried in labels: ``trace.fedsched.io/deletion-time`` minus
   ``trace.fedsched.io/creation-time`` (the openb pod list columns, in seconds);
2. ``expected_runtime_s``;
3. ``max_runtime_s``;
4. for training, fine-tune and batch jobs ``SimConfig.default_runtime_s``; notebooks and inference
   services run until they are cancelled, preempted or reclaimed.

A run still going at ``max_runtime_s`` fails with ``RuntimeExceeded``. Labels that steer the simulator
(for tests and demos): ``sim.fedsched.io/utilisation-pct`` (fixed GPU utilisation, 0..100),
``sim.fedsched.io/fail-after-s`` and ``sim.fedsched.io/exit-code`` (every run exits with that code after
that long; default code 1), ``sim.fedsched.io/start-delay-s`` (this job's own start delay).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from connectors.sim.config import SimConfig, ms
from events.catalog.jobs import Interconnect, JobKind, JobSubmitted, Toleration
from events.catalog.lifecycle import spreads
from events.catalog.types import JobId, Resources, TenantId

CREATION_LABEL = "trace.fedsched.io/creation-time"
DELETION_LABEL = "trace.fedsched.io/deletion-time"
UTILISATION_LABEL = "sim.fedsched.io/utilisation-pct"
FAIL_AFTER_LABEL = "sim.fedsched.io/fail-after-s"
EXIT_CODE_LABEL = "sim.fedsched.io/exit-code"
START_DELAY_LABEL = "sim.fedsched.io/start-delay-s"

_UNTIL_STOPPED = (JobKind.NOTEBOOK, JobKind.INFERENCE)


@dataclass(frozen=True, slots=True)
class JobSpec:
    job_id: JobId
    tenant: TenantId
    kind: JobKind
    replicas: int
    gang: bool
    resources: Resources
    tolerations: tuple[Toleration, ...]
    runtime_ms: int | None
    """``None``: runs until stopped."""
    max_runtime_ms: int | None
    utilisation_pct: int | None = None
    fail_after_ms: int | None = None
    exit_code: int = 1
    start_delay_ms: int | None = None
    interconnect: Interconnect | None = None
    """The interconnect the job requires (``interconnect_required``): every replica in one NVLink domain
    or RDMA fabric of it; None: none required."""
    spread_clusters: int = 1
    """How many clusters the job's run may hold replicas in (``inference.spread_clusters``)."""
    part_cap: int | None = None
    """For a job that spreads (``events.catalog.lifecycle.spreads``): the most replicas of its run one
    cluster may hold (``InferenceSpec.per_cluster_cap``), its part here; None: it does not spread, its run
    lives in one cluster."""

    @property
    def spreads(self) -> bool:
        return self.part_cap is not None

    @classmethod
    def from_submitted(cls, job: JobSubmitted, config: SimConfig) -> JobSpec:
        labels = job.labels
        return cls(
            job_id=job.job_id,
            tenant=job.tenant,
            kind=job.kind,
            replicas=job.replicas,
            gang=job.is_gang(),
            resources=job.resources,
            tolerations=job.tolerations,
            runtime_ms=runtime_ms(job, config),
            max_runtime_ms=None if job.max_runtime_s is None else job.max_runtime_s * 1000,
            utilisation_pct=_label_int(labels, UTILISATION_LABEL, 0, 100),
            fail_after_ms=_label_ms(labels, FAIL_AFTER_LABEL),
            exit_code=_label_int(labels, EXIT_CODE_LABEL, -(2**31), 2**31 - 1) or 1,
            start_delay_ms=_label_ms(labels, START_DELAY_LABEL),
            interconnect=job.interconnect if job.interconnect_required else None,
            spread_clusters=job.inference.spread_clusters if job.inference is not None else 1,
            part_cap=job.inference.per_cluster_cap(job.replicas) if job.inference and spreads(job) else None,
        )


def runtime_ms(job: JobSubmitted, config: SimConfig) -> int | None:
    created = _label_float(job.labels, CREATION_LABEL)
    deleted = _label_float(job.labels, DELETION_LABEL)
    if created is not None and deleted is not None and deleted >= created:
        return ms(deleted - created)
    if job.expected_runtime_s is not None:
        return job.expected_runtime_s * 1000
    if job.max_runtime_s is not None:
        return job.max_runtime_s * 1000
    if job.kind in _UNTIL_STOPPED:
        return None
    return config.default_runtime_s * 1000


def _label_float(labels: Mapping[str, str], key: str) -> float | None:
    text = labels.get(key)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 and value == value and value != float("inf") else None


def _label_ms(labels: Mapping[str, str], key: str) -> int | None:
    value = _label_float(labels, key)
    return None if value is None else ms(value)


def _label_int(labels: Mapping[str, str], key: str, low: int, high: int) -> int | None:
    text = labels.get(key)
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and low <= value <= high else None


__all__ = ["JobSpec", "runtime_ms"]
