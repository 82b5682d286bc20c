"""Scrapes of a window averaged into one ``NodeUsageReported`` per node. Pure: no I/O, no clock.

Called by ``usage.task``: ``add`` after every scrape (with who each pod is: the connector's pods, from
their fedsched labels), ``close`` at the window's end. Mirrors what the simulated connector reports
(``connectors.sim.reports.node_usage``) from measurements instead of a model:

- each GPU measured: its mean utilisation and mean memory used over the scrapes that measured it;
- each run of ours the exporter saw on the node (its pods' ``fedsched.io/job-id`` and ``fedsched.io/run``):
  the GPUs the exporter attributed to its pods, their mean utilisation over the window, and the memory of
  the GPUs it held alone (a GPU shared with other pods reports one figure for the device, which is no one
  pod's share: not counted, rather than guessed). A run seen in only some of the scrapes that read its
  node (it started or ended within the window) used its GPUs for that share of the window only: its mean
  is scaled by it, as the simulator scales a run that started within the window (reported whole, a short
  run would count more GPU time used than it held). Scrapes that did not read the node (its exporter
  failing, or not found yet) count neither way: the node's report covers the share of the window its
  scrapes read (``window_ms`` scaled by it), so no time is said measured that was not;
- CPU and memory of the node and the jobs: 0, as the event's default says "not measured": the DCGM
  exporter measures GPUs only.

A node none of whose GPUs was measured in the window reports nothing (no report is "no usage data";
a report of zeros would say idle).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from connectors.kubernetes import names
from connectors.kubernetes.lifecycle import RunKey
from connectors.kubernetes.usage.dcgm import GpuReading, PodRef
from events.catalog.inventory import GpuUsage, JobUsage, NodeUsageReported
from events.catalog.types import ClusterId, NodeId

MAX_GPUS = 64
MAX_JOBS = 256


@dataclass
class _Mean:
    total: int = 0
    count: int = 0

    def add(self, value: int) -> None:
        self.total += value
        self.count += 1

    @property
    def value(self) -> int:
        return self.total // self.count if self.count else 0


@dataclass
class _Run:
    seen: int = 0
    """Scrapes that saw it."""
    gpus: set[int] = field(default_factory=set)
    utilisation: _Mean = field(default_factory=_Mean)
    """Over (scrape, GPU) pairs."""
    memory: _Mean = field(default_factory=_Mean)
    """Per scrape: the sum over the GPUs it held alone."""


@dataclass
class _Node:
    scrapes: int = 0
    """Scrapes that read it."""
    utilisation: dict[int, _Mean] = field(default_factory=dict)
    memory: dict[int, _Mean] = field(default_factory=dict)
    runs: dict[RunKey, _Run] = field(default_factory=dict)


@dataclass
class Window:
    cluster: ClusterId
    nodes: dict[str, _Node] = field(default_factory=dict)
    scrapes: int = 0

    def add(self, readings: Iterable[GpuReading], who: Callable[[PodRef], RunKey | None]) -> None:
        """One scrape's readings; ``who``: the run a pod is, or None for pods not ours."""
        self.scrapes += 1
        memory_now: dict[tuple[str, RunKey], int] = {}
        read: set[str] = set()
        for reading in readings:
            node = self.nodes.setdefault(reading.node, _Node())
            read.add(reading.node)
            if reading.utilisation_pct is not None:
                node.utilisation.setdefault(reading.index, _Mean()).add(reading.utilisation_pct)
            if reading.memory_used_mib is not None:
                node.memory.setdefault(reading.index, _Mean()).add(reading.memory_used_mib)
            keys = sorted({key for pod in reading.pods if (key := who(pod)) is not None})
            alone = len(reading.pods) == 1
            for key in keys:
                run = node.runs.setdefault(key, _Run())
                run.gpus.add(reading.index)
                if reading.utilisation_pct is not None:
                    run.utilisation.add(reading.utilisation_pct)
                held = reading.memory_used_mib if alone and reading.memory_used_mib is not None else 0
                memory_now[(reading.node, key)] = memory_now.get((reading.node, key), 0) + held
        for (where, key), mib in sorted(memory_now.items()):
            run = self.nodes[where].runs[key]
            run.memory.add(mib)
            run.seen += 1
        for where in sorted(read):
            self.nodes[where].scrapes += 1

    def close(self, window_ms: int) -> list[NodeUsageReported]:
        """The window's reports, one per node with a GPU measured, sorted by node; the window starts over."""
        reports = [r for name, node in sorted(self.nodes.items()) if (r := self._report(name, node, window_ms))]
        self.nodes, self.scrapes = {}, 0
        return reports

    def _report(self, name: str, node: _Node, window_ms: int) -> NodeUsageReported | None:
        measured = sorted(set(node.utilisation) | set(node.memory))[:MAX_GPUS]
        if not measured or not names.is_id(name):
            return None
        gpus = tuple(
            GpuUsage(
                index=i,
                utilisation_pct=min(100, _value(node.utilisation, i)),
                memory_used_mib=_value(node.memory, i),
            )
            for i in measured
        )
        jobs = [
            JobUsage(
                job_id=key.job_id,
                run=key.run,
                gpu_indices=tuple(sorted(run.gpus)),
                utilisation_pct=min(100, run.utilisation.value * run.seen // max(1, node.scrapes)),
                gpu_memory_used_mib=run.memory.value,
            )
            for key, run in sorted(node.runs.items())
        ]
        jobs = _one_per_job(jobs)[:MAX_JOBS]
        covered = window_ms * node.scrapes // max(1, self.scrapes)
        return NodeUsageReported(
            cluster=self.cluster, node=NodeId(name), window_ms=max(1, covered), gpus=gpus, jobs=tuple(jobs)
        )


def _value(means: dict[int, _Mean], index: int) -> int:
    mean = means.get(index)
    return mean.value if mean is not None else 0


def _one_per_job(jobs: list[JobUsage]) -> list[JobUsage]:
    """A report names a job once: of two runs of one job seen in a window (one ended, the next began on
    the same node), the later run's usage is kept; the earlier run's last window goes unreported."""
    latest: dict[str, JobUsage] = {}
    for usage in jobs:  # sorted by (job, run): the later run comes last
        latest[usage.job_id] = usage
    return [latest[job] for job in sorted(latest)]
