"""Nodes of the cluster as inventory events: the reflector's handler for ``/api/v1/nodes``.

Called by the reflector (``synced`` after each list, ``changed`` for each watch event). Calls the pure
mapper ``nodes`` and publishes through the ``Reporter``:

- ``NodeObserved`` for a node seen for the first time (every node after a connector start: a
  restatement) or whose ``resourceVersion`` moved on; ``GpuHealthReported`` with it when the GPU
  samples changed (and on first sight of a node with GPUs);
- ``NodeRemoved`` for a DELETED event, or for a node a relist no longer contains (its delete happened
  while no watch was open), including a node of the roster the connector read back from the log at start
  (``remember``): one deleted while no connector ran;
- ``ClusterNodesListed`` (the roster, ``publish_roster``) after each list, soon after a node came or went
  (``run_roster``), and every ``roster.RESTATE_S`` even if none did;
- ``ClusterRegistered`` again (``registration``) before the first node with a GPU or NPU model the
  cluster's registration has no rate for, so cost attribution prices every model the cluster has.

It remembers each node's devices by index (``devices``): the executor asks them by their resources.

Event ids derive from cluster, node and resource version, so the same snapshot published twice (a
restart, a relist) is a recognisable duplicate. Lists publish in batches of ``batch`` events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence

from connectors.kubernetes import accelerators, names, nodes, roster
from connectors.kubernetes.kubeapi import Obj
from connectors.kubernetes.registration import Registration
from connectors.kubernetes.reporting import Reporter
from events.catalog.base import Event
from events.catalog.inventory import GpuHealthSample, NodeObserved, NodeRemoved, NpuHealthSample
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, NodeId

log = logging.getLogger("fedsched.connector.kubernetes")

Item = tuple[Event, str]


class NodeWatcher:
    def __init__(
        self,
        cluster: ClusterId,
        reporter: Reporter,
        *,
        batch: int = 500,
        clock_ms: Callable[[], int],
        roster_delay_s: float = 5.0,
        registration: Registration | None = None,
    ) -> None:
        self.cluster = cluster
        self._reporter = reporter
        self._batch = batch
        self._clock_ms = clock_ms
        self._roster_delay_s = roster_delay_s
        self._roster_due = asyncio.Event()
        """Set when the node set changed since the roster last published."""
        self._top = 0
        """The newest generation seen or given to a removal: the roster's ``as_of``."""
        self.rosters = 0
        self.generations: dict[str, int] = {}
        """Kubernetes node name -> generation last published."""
        self._health: dict[str, tuple[tuple[GpuHealthSample, ...], tuple[NpuHealthSample, ...]]] = {}
        self._ids: dict[str, NodeId] = {}
        self.devices: dict[str, accelerators.NodeDevices] = {}
        """Node id -> the resources its pods ask each GPU and NPU index by, as last seen (``pods``)."""
        self._registration = registration
        self._skipped: set[str] = set()

    def gpu_health(self, name: str) -> tuple[GpuHealthSample, ...]:
        """The latest GPU samples of a node (by its Kubernetes name): the pod watcher's blame of a failure."""
        samples = self._health.get(name)
        return samples[0] if samples is not None else ()

    def npu_health(self, name: str) -> tuple[NpuHealthSample, ...]:
        """The latest NPU samples of a node (by its Kubernetes name): the pod watcher's blame of a failure."""
        samples = self._health.get(name)
        return samples[1] if samples is not None else ()

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
        samples = (view.health.gpus, view.health.npus) if view.health is not None else None
        if view.health is not None and samples is not None and self._health.get(name) != samples:
            items.append((view.health, self._id("gpu-health", view.observed.node, gen)))
            self._health[name] = samples
        self.generations[name] = gen
        if name not in self._ids:
            self._roster_due.set()
        self._ids[name] = view.observed.node
        self._top = max(self._top, gen)
        self.devices[view.observed.node] = view.devices
        return items

    @property
    def known(self) -> int:
        """Nodes known now."""
        return len(self._ids)

    def remember(self, known: Iterable[NodeId], as_of: int) -> None:
        """Nodes the log says this cluster had (its last roster, as of that generation): the first list
        reports removed those it no longer contains, at a generation past any reported of them. Call
        before the node reflector starts."""
        for node in known:
            self._ids.setdefault(str(node), node)
        self._top = max(self._top, as_of)

    def _removed(self, name: str, generation: int) -> list[Item]:
        node_id = self._ids.pop(name, None)
        self.generations.pop(name, None)
        self._health.pop(name, None)
        if node_id is None:
            return []
        self._roster_due.set()
        self._top = max(self._top, generation)
        self.devices.pop(node_id, None)
        event = NodeRemoved(
            cluster=self.cluster,
            node=node_id,
            generation=generation,
            reason=ReasonCode.NODE_DELETED,
            message="the Node object was deleted from the API server",
        )
        return [(event, self._id("removed", node_id, generation))]

    async def _publish(self, items: Sequence[Item], *, wait: bool) -> None:
        """Hand events to the reporter; after a list, wait until they are in the log. A restated
        registration goes first when these nodes show device models it has no rate for."""
        if self._registration is not None:
            seen = [e for e, _ in items if isinstance(e, NodeObserved)]
            models = [g.model for e in seen for g in e.gpus] + [n.model for e in seen for n in e.npus]
            items = [*self._registration.restated(models), *items]
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
        past = max(top, self._top)
        for name in sorted(set(self._ids) - seen):
            # Deleted while no watch was open: its deletion came after every version we hold.
            items.extend(self._removed(name, max(past, self.generations.get(name, 0)) + 1))
        self._top = max(self._top, top)
        await self._publish(items, wait=True)
        await self.publish_roster()  # after the nodes' events: a roster never names a node the log has not seen

    async def changed(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            name = str((obj.get("metadata") or {}).get("name", ""))
            items = self._removed(name, max(nodes.generation(obj), self.generations.get(name, 0) + 1))
        else:
            items = self._observed(obj)
        # Watch events are not awaited one by one: the reporter groups a burst into a few appends.
        await self._publish(items, wait=False)

    async def publish_roster(self) -> None:
        """Publish the roster of the nodes known now, and wait until it is in the log."""
        self._roster_due.clear()
        events = roster.roster_events(self.cluster, self._top, self._clock_ms(), self._ids.values())
        taken = events[0].taken_ms
        items: list[Item] = [(e, self._id("roster", e.as_of, taken, e.part)) for e in events]
        await self._publish(items, wait=True)
        self.rosters += 1
        log.info("event=roster_published nodes=%d parts=%d as_of=%d", len(self._ids), len(events), self._top)

    async def run_roster(self, restate_s: float = roster.RESTATE_S) -> None:
        """Publish the roster ``roster_delay_s`` after the node set changed (changes in that time share
        one), and every ``restate_s`` anyway, until cancelled."""
        while True:
            try:
                await asyncio.wait_for(self._roster_due.wait(), timeout=restate_s)
            except TimeoutError:
                await self.publish_roster()
                continue
            await asyncio.sleep(self._roster_delay_s)
            if self._roster_due.is_set():  # a list may have published it meanwhile
                await self.publish_roster()
