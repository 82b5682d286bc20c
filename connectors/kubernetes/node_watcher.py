"""Nodes of the cluster as inventory events: the reflector's handler for ``/api/v1/nodes``.

Called by the reflector (``synced`` after each list, ``changed`` for each watch event). Calls the pure
mapper ``nodes`` and publishes through the ``Reporter``:

- ``NodeObserved`` for a node seen for the first time (every node after a connector start: a
  restatement) or whose ``resourceVersion`` moved on; ``GpuHealthReported`` with it when the GPU
  samples changed (and on first sight of a node with GPUs);
- ``NodeRemoved`` for a DELETED event, or for a node a relist no longer contains (its delete happened
  while no watch was open).

Event ids derive from cluster, node and resource version, so the same snapshot published twice (a
restart, a relist) is a recognisable duplicate. Lists publish in batches of ``batch`` events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from connectors.kubernetes import names, nodes
from connectors.kubernetes.kubeapi import Obj
from connectors.kubernetes.reporting import Reporter
from events.catalog.base import Event
from events.catalog.inventory import GpuHealthSample, NodeRemoved
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, NodeId

log = logging.getLogger("fedsched.connector.kubernetes")

Item = tuple[Event, str]


class NodeWatcher:
    def __init__(self, cluster: ClusterId, reporter: Reporter, *, batch: int = 500) -> None:
        self.cluster = cluster
        self._reporter = reporter
        self._batch = batch
        self.generations: dict[str, int] = {}
        """Kubernetes node name -> generation last published."""
        self._health: dict[str, tuple[GpuHealthSample, ...]] = {}
        self._ids: dict[str, NodeId] = {}
        self._skipped: set[str] = set()

    def gpu_health(self, name: str) -> tuple[GpuHealthSample, ...]:
        """The latest GPU samples of a node (by its Kubernetes name): the pod watcher's blame of a failure."""
        return self._health.get(name, ())

    def _id(self, *parts: object) -> str:
        return names.event_id(self.cluster, *parts)

    def _observed(self, node: Obj) -> list[Item]:
        name = str((node.get("metadata") or {}).get("name", ""))
        view = nodes.observe(node, self.cluster)
        if view is None:
            if name not in self._skipped:
                self._skipped.add(name)
                log.warning("event=node_skipped node=%r reason=name_is_not_a_valid_node_id", name)
            return []
        gen = view.observed.generation
        if name in self.generations and self.generations[name] >= gen:
            return []
        for problem in view.problems:
            log.warning("event=node_problem node=%s problem=%r", name, problem)
        items: list[Item] = [(view.observed, self._id("node", view.observed.node, gen))]
        if view.health is not None and self._health.get(name) != view.health.gpus:
            items.append((view.health, self._id("gpu-health", view.observed.node, gen)))
            self._health[name] = view.health.gpus
        self.generations[name] = gen
        self._ids[name] = view.observed.node
        return items

    def _removed(self, name: str, generation: int) -> list[Item]:
        node_id = self._ids.pop(name, None)
        self.generations.pop(name, None)
        self._health.pop(name, None)
        if node_id is None:
            return []
        event = NodeRemoved(
            cluster=self.cluster,
            node=node_id,
            generation=generation,
            reason=ReasonCode.NODE_DELETED,
            message="the Node object was deleted from the API server",
        )
        return [(event, self._id("removed", node_id, generation))]

    async def _publish(self, items: Sequence[Item], *, wait: bool) -> None:
        """Hand events to the reporter; after a list, wait until they are in the log."""
        futures = [self._reporter.submit(items[s : s + self._batch]) for s in range(0, len(items), self._batch)]
        if wait:
            await asyncio.gather(*futures)
        else:
            await self._reporter.room()

    async def synced(self, objects: list[Obj]) -> None:
        items: list[Item] = []
        seen = set()
        for node in objects:
            seen.add(str((node.get("metadata") or {}).get("name", "")))
            items.extend(self._observed(node))
        top = max((nodes.generation(n) for n in objects), default=0)
        for name in sorted(set(self._ids) - seen):
            # Deleted while no watch was open: its deletion came after every version we hold.
            items.extend(self._removed(name, max(top, self.generations.get(name, 0)) + 1))
        await self._publish(items, wait=True)

    async def changed(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            name = str((obj.get("metadata") or {}).get("name", ""))
            items = self._removed(name, max(nodes.generation(obj), self.generations.get(name, 0) + 1))
        else:
            items = self._observed(obj)
        # Watch events are not awaited one by one: the reporter groups a burst into a few appends.
        await self._publish(items, wait=False)
