"""What governance knows of a job: what it asked (``Spec``), its runs (``RunFacts``, and a spread run's
parts) with their recent usage samples, its wait and how it ended (``JobFacts``). Data only.

Built and changed by ``services.governance.core.runs`` (a job's run events) and
``services.governance.core.state`` (the rest), read by the rules (``reclaim``, ``abnormal``, ``budgets``).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events.catalog.base import Event
from events.catalog.decisions import ReplicaPlacement
from events.catalog.inventory import JobUsage
from events.catalog.jobs import JobKind, JobSubmitted, RunEnd
from events.catalog.lifecycle import JobStatus, spreads

Stamp = tuple[int, str]
"""An event's own time and its envelope id (what ``Latest`` orders reports by)."""


@dataclass(frozen=True, slots=True)
class Sample:
    end_ms: int
    window_ms: int
    node: str
    utilisation_pct: int
    """How busy the run's accelerators were over the window: its GPUs', its NPUs' (a run of NPUs alone),
    or the busier of the two kinds (a run that holds both is idle only when both are)."""


@dataclass(slots=True)
class RunFacts:
    """A run (or one cluster's part of a spread run: then ``cluster`` is the part's, ``placed_ms`` when the
    part opened, ``started_ms`` and ``ended_*`` its own start and end)."""

    run: int
    cluster: str
    nodes: tuple[str, ...]
    gpu_milli: int
    placed_ms: int
    started_ms: int | None = None
    ended_ms: int | None = None
    ended_how: RunEnd | None = None
    fail_reason: str | None = None
    fail_node: str | None = None
    reclaim_rule: str | None = None
    samples: list[Sample] = field(default_factory=list)
    replicas: int = 0
    """How many replicas it holds (its placement's and those added)."""
    grown: tuple[tuple[int, int], ...] = ()
    """Replicas added to the run (``JobReplicasAdded``): when, and the milli-GPU they hold (``gpu_milli``
    counts them too); its GPU time counts each from when it was added, as the scheduler's does."""
    npus: int = 0
    """The NPUs it holds (its placement's and those added)."""
    parts: dict[str, RunFacts] = field(default_factory=dict)
    """A spread run's parts by cluster, in the order they opened; empty for a run in one cluster."""
    closed_in: str = ""
    """A spread run's last part's cluster, once it is closed (``JobRunClosed.cluster``)."""
    undecided: tuple[tuple[int, tuple[ReplicaPlacement, ...]], ...] = ()
    """(own time, replicas) of its placement and additions while its job's submission is not
    read (the decisions topic read ahead of the jobs topic): whether it spreads is not known yet, and a
    spread run counts from its events' own times. Emptied once the submission is read."""

    @property
    def live(self) -> bool:
        return self.ended_ms is None

    @property
    def devices(self) -> str:
        """The accelerators it holds, in words: what its usage samples measure."""
        if self.npus and not self.gpu_milli:
            return "NPUs"
        return "GPUs and NPUs" if self.npus else "GPUs"

    def busy_pct(self, usage: JobUsage) -> int:
        """How busy a usage report found the accelerators this run holds (``Sample.utilisation_pct``)."""
        if not self.npus:
            return usage.utilisation_pct
        if not self.gpu_milli:
            return usage.npu_utilisation_pct
        return max(usage.utilisation_pct, usage.npu_utilisation_pct)

    def held_pieces(self) -> list[tuple[int, int]]:
        """(milli-GPU, held since) of its placement's replicas and of each addition."""
        base = self.gpu_milli - sum(milli for _, milli in self.grown)
        return [(base, self.placed_ms), *((milli, max(at, self.placed_ms)) for at, milli in self.grown)]

    def holdings(self) -> list[RunFacts]:
        """What holds resources: the run itself, or a spread run's parts (in the order they opened)."""
        return list(self.parts.values()) if self.parts else [self]

    def holding(self) -> bool:
        """Whether some of it still holds resources (a closed spread run may have a part whose end its
        cluster's connector reported, but that is not read yet)."""
        return any(h.ended_ms is None for h in self.holdings())


@dataclass(frozen=True, slots=True)
class Spec:
    """What the rules read of a job's request (the whole ``JobSubmitted``, kept for every job ever
    submitted, cost more memory than the rest of the job's facts together)."""

    tenant: str
    name: str
    kind: JobKind
    gang: bool
    max_runtime_s: int | None
    application_retries: int = 0
    spread: bool = False
    """Whether its runs live in parts, one per cluster (``events.catalog.lifecycle.spreads``)."""

    @classmethod
    def of(cls, e: JobSubmitted) -> Spec:
        retries = e.retry.on_application_failure
        return cls(e.tenant, e.name, e.kind, e.is_gang(), e.max_runtime_s, retries, spreads(e))


@dataclass(slots=True)
class JobFacts:
    job_id: str
    spec: Spec | None = None
    submitted_ms: int = 0
    queued_reasons: tuple[str, ...] = ()
    queued_message: str = ""
    last_wait: tuple[str, tuple[str, ...]] = ("", ())
    """The cycle of the latest ``JobQueued`` applied and the envelope ids applied of that cycle."""
    runs: dict[int, RunFacts] = field(default_factory=dict)
    cancel_requested: bool = False
    terminal: JobStatus | None = None
    """The job's final status, once it has ended for good."""
    early: dict[int, list[tuple[Event, int, Stamp]]] = field(default_factory=dict)
    """Facts about a run read before its placement (topics are read one after another), or about a spread
    run's part read before the addition that opened it, kept for it (with the log's time and their own)."""

    def settled(self) -> bool:
        """Ended for good, every run placed (and every part of one) has ended and no fact waits for a run's
        placement: no rule reads it again (its failures stay in the indexes)."""
        return self.terminal is not None and not self.early and not any(run.holding() for run in self.runs.values())

    def live_run(self) -> RunFacts | None:
        live = [r for r in self.runs.values() if r.live]
        return max(live, key=lambda r: r.run) if live else None

    def pending(self) -> bool:
        return self.spec is not None and self.terminal is None and not self.cancel_requested and not self.live_run()


__all__ = ["JobFacts", "RunFacts", "Sample", "Spec", "Stamp"]
