"""A job's runs as governance knows them, and the parts of a run that spreads over clusters.

Called by ``services.governance.core.state`` (its handlers open, grow and end runs and parts) and read by
the rules (``reclaim``, ``abnormal``, ``budgets``). Pure: no I/O, no clock.

A run in one cluster is one ``RunFacts``: what it holds (nodes, GPUs, NPUs, replicas and those added
later), when it was placed, started and ended, its recent usage samples. A run of a job that spreads
(``events.catalog.lifecycle.spreads``: an inference service with ``spread_clusters`` above 1) has a part
per cluster, each a ``RunFacts`` of that cluster's replicas alone (``RunFacts.parts``: the ``JobPlaced``'s
cluster first, then each cluster a ``JobReplicasAdded`` opened). A part's end (its cluster's run-end event)
ends that part's time and nothing else; the run ends with the scheduler's ``JobRunClosed``. What a spread
run holds is in its parts (``holdings``), never in the run's own counts, which stay empty; its
``replicas`` is the next replica number of the run (numbers run on across its parts), so that a repeated
addition is known.

A spread run's times are its events' own times, where the rest of governance reads the log's clock: its
parts are opened by the scheduler and ended by several connectors, on two topics a reader meets in any
interleaving, and what each part held must not depend on which was read first (the scheduler counts a
budget from the events' own times too). The one-cluster run keeps the log's clock, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from events.catalog.decisions import ReplicaPlacement
from events.catalog.inventory import JobUsage
from events.catalog.jobs import RunEnd


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


def opened(run: int, cluster: str, replicas: Sequence[ReplicaPlacement], at_ms: int) -> RunFacts:
    """A run (or a part) that holds ``replicas`` in ``cluster`` from ``at_ms``."""
    nodes = tuple(dict.fromkeys(r.node for r in replicas))
    return RunFacts(run, cluster, nodes, _milli(replicas), at_ms, replicas=len(replicas), npus=_npus(replicas))


def grow(holding: RunFacts, replicas: Sequence[ReplicaPlacement], at_ms: int) -> None:
    """``holding`` holds ``replicas`` more from ``at_ms``."""
    milli = _milli(replicas)
    holding.replicas += len(replicas)
    holding.nodes = tuple(dict.fromkeys((*holding.nodes, *(r.node for r in replicas))))
    holding.gpu_milli += milli
    holding.npus += _npus(replicas)
    holding.grown = (*holding.grown, (at_ms, milli))


def split(run: RunFacts) -> None:
    """Make ``run`` a spread run (once): what it holds becomes its first part's, in the cluster it was
    placed in. A run placed (and grown) before its job's submission was read is rebuilt from those
    events' own times (``undecided``); one placed after it is split as it is placed."""
    if run.parts:
        return
    if run.undecided:
        (placed_ms, replicas), *added = run.undecided
        first = opened(run.run, run.cluster, replicas, placed_ms)
        for at_ms, more in added:
            grow(first, more, max(at_ms, placed_ms))
        run.placed_ms = placed_ms
    else:
        first = RunFacts(run.run, run.cluster, run.nodes, run.gpu_milli, run.placed_ms, replicas=run.replicas)
        first.grown, first.npus = run.grown, run.npus
    first.started_ms, first.samples, first.reclaim_rule = run.started_ms, run.samples, run.reclaim_rule
    run.parts = {run.cluster: first}
    run.nodes, run.gpu_milli, run.npus, run.grown, run.samples, run.reclaim_rule = (), 0, 0, (), [], None
    run.undecided = ()


def _milli(replicas: Sequence[ReplicaPlacement]) -> int:
    return sum(len(r.gpu_indices) * r.gpu_milli_each for r in replicas)


def _npus(replicas: Sequence[ReplicaPlacement]) -> int:
    return sum(len(r.npu_indices) for r in replicas)


__all__ = ["RunFacts", "Sample", "grow", "opened", "split"]
