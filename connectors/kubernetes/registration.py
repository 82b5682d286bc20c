"""What the cluster is, as ``ClusterRegistered``: stated at start, restated when its nodes show new models.

Called by the connector (the first statement, before any node is listed) and by ``node_watcher`` (before
publishing nodes whose GPU or NPU models have no rate yet). Pure but for the clock that stamps event ids.

The first statement carries the rates of the ``cluster:`` section (``config_file``); a model the nodes
show later without a configured rate gets the shared default (``connectors.rates``) in a restatement
published ahead of those nodes, in the same append. Governance prices usage with the latest statement,
so every device the scheduler can place on has a price before anything runs on it. A restarted connector
states again from the start: its restatements follow as its nodes are listed again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from connectors.kubernetes import names
from connectors.rates import rates_for
from events.catalog.base import Event
from events.catalog.inventory import ClusterRegistered, GpuRate

MAX_RATES = 64
"""How many rates ``ClusterRegistered`` holds: configured ones first, then discovered models by name."""


class Registration:
    def __init__(self, base: ClusterRegistered, clock_ms: Callable[[], int]) -> None:
        self._base = base
        self._configured = tuple((r.model, r.micro_per_gpu_hour) for r in base.gpu_rates)
        self._discovered: set[str] = set()
        self._clock_ms = clock_ms
        self.statements = 0

    def current(self) -> ClusterRegistered:
        """The statement with a rate for every configured and every discovered model."""
        configured = dict(self._configured)
        discovered = rates_for(self._discovered, ())
        rates = [*self._configured, *((m, r) for m, r in discovered if m not in configured)][:MAX_RATES]
        chosen = tuple(GpuRate(model=m, micro_per_gpu_hour=r) for m, r in sorted(rates))
        return self._base.model_copy(update={"gpu_rates": chosen})

    def stated(self) -> tuple[ClusterRegistered, str]:
        """The statement now, with its event id (a new one each time: the latest statement wins)."""
        self.statements += 1
        ident = names.event_id(self._base.cluster, "registered", self._clock_ms(), self.statements)
        return self.current(), ident

    def restated(self, models: Iterable[str]) -> list[tuple[Event, str]]:
        """A restatement if ``models`` name one without a rate yet, else nothing."""
        priced = {m for m, _ in self._configured} | self._discovered
        new = set(models) - priced
        if not new:
            return []
        self._discovered |= new
        return [self.stated()]


__all__ = ["MAX_RATES", "Registration"]
