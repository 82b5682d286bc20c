"""The long-running side of a simulated cluster: reads the log, drives the model, publishes.

Called by ``fedsched connector sim`` (one cluster per process) and by ``fedsched up`` through
``SimFleet`` (several clusters in one process, on one clock). Calls the ``EventLog`` (a reader at
start-up, an ``EventConsumer`` on the jobs and decisions topics, a transactional ``Publisher``) and the
pure model (``connectors.sim.cluster``).

Why a restart neither loses nor doubles anything: the state is rebuilt from the log, not from consumer
offsets. At start the host reads the jobs, decisions and inventory topics from the beginning
(``connectors.sim.restore``): a run whose ``JobStarted`` is in the log runs on to the same end; a
run that has ended is never touched again; a placement with no outcome yet is checked again. Its
publisher's transactional id (one per cluster) fences a predecessor that is still alive and aborts the
transaction it left open, and every step's events (all timers due up to ``now`` plus the effects of the
records just consumed) go out in one transaction, in time order; so "everything the clock drives up to
the last event published was published" holds, and the fault schedule and usage reports resume right
after it. The consumer group's committed offsets only spare re-reading: a record delivered again is
recognised (by job and run) and ignored, and at start the group is moved past what the restore read.
Event ids are derived from the facts, so even a consumer that reads a record twice can tell.

Every host's shape (``events.hosting``): the ``EventConsumer`` (a group follower and a sink for dead
letters and offsets), the pure model as the step, a transactional ``Publisher`` for what it reports, and
``ride_out`` around it. Errors: a fenced publisher stops the cluster (another instance owns it); any
other error closes the consumer and publisher, backs off, and starts over from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from connectors.sim.clock import SimClock
from connectors.sim.cluster import ClusterModel
from connectors.sim.config import SimConfig
from connectors.sim.history import History
from connectors.sim.nodes import NodeSpec, default_nodes_path, load_nodes
from connectors.sim.reports import Emit
from connectors.sim.restore import read_history
from connectors.sim.spec import ClusterSpec
from events.catalog.decisions import EXPLANATIONS_AND_CYCLES
from events.catalog.topics import DECISIONS, JOBS
from events.catalog.types import NodeId
from events.hosting.consumer import EventConsumer
from events.hosting.loop import ride_out
from events.log import EventLog, GroupOffsets, LogRecord, ProducerFenced, TopicPartition
from events.log.publisher import Publisher
from events.plumbing.outage import Outage
from events.plumbing.tasks import cancel_and_wait
from events.wire.envelope import Envelope

log = logging.getLogger("fedsched.connector.sim")


def _not_fenced(error: BaseException) -> bool:
    return not isinstance(error, ProducerFenced)


@dataclass(slots=True)
class SimStats:
    """What a cluster published, for logs, tests and benchmarks."""

    published: int = 0
    batches: int = 0
    publish_s: float = 0.0
    by_type: Counter[str] = field(default_factory=Counter)
    restored_records: int = 0
    restore_s: float = 0.0
    restarts: int = 0


class SimCluster:
    """One simulated cluster on the log. ``start()``, then ``stop()``; or ``prepare()`` + ``run()`` when
    a ``SimFleet`` starts several on one clock.

    The log must already have the catalogue's topics (``await log.create_topics(TOPICS)``). Events carry
    simulated time (``clock.now_ms()``); give other components the same ``clock`` if their times must
    line up with the cluster's. A shared clock's speed wins over ``config.speed``.
    """

    def __init__(
        self,
        event_log: EventLog,
        spec: ClusterSpec,
        config: SimConfig | None = None,
        *,
        clock: SimClock | None = None,
        poll_s: float = 0.2,
    ) -> None:
        self.spec = spec
        self.config = config or SimConfig()
        self.cluster = spec.cluster
        self.source = f"urn:fedsched:connector:sim:{spec.cluster}"
        self.group_id = f"fedsched.connector.sim.{spec.cluster}"
        self.clock = clock or SimClock(self.config.speed)
        self.stats = SimStats()
        self.model: ClusterModel | None = None
        self._log = event_log
        self._poll_s = poll_s
        self._publisher: Publisher | None = None
        self._consumer: EventConsumer | None = None
        self._joining: asyncio.Task[None] | None = None
        self._restored_to: dict[TopicPartition, int] = {}
        self._inbox: list[Envelope] = []
        self._drills: list[tuple[str, int | None, float]] = []
        """Operators' drills for the next step: (node, NPU index or None for the whole node, seconds)."""
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self.outage = Outage(f"sim-{spec.cluster}")
        self._done = asyncio.Event()
        self.error: BaseException | None = None

    # -- life --------------------------------------------------------------------------------------

    async def start(self) -> None:
        resume_ms = await self.prepare()
        self.clock.start(resume_ms)
        await self.run()

    async def prepare(self) -> int | None:
        """Fence any earlier instance, then rebuild the model from the log. Returns the time the clock
        must not start before (the last event this cluster published), ``None`` on a first start."""
        began = time.perf_counter()
        await self.fence()
        history = self.new_history()
        ends = await read_history(self._log, history)
        return self.restore(history, ends, time.perf_counter() - began)

    async def fence(self) -> None:
        """Start the transactional publisher: it fences a predecessor and aborts the transaction that one
        left open, so the restore's read is not held back by it (read_committed stops at open ones)."""
        self._publisher = Publisher(
            self._log, self.source, transactional_id=self.group_id, clock=self.clock.now_ms, ids=_no_random_ids
        )
        await self._publisher.start()

    def new_history(self) -> History:
        return History(self.cluster, self.source)

    def restore(self, history: History, ends: dict[TopicPartition, int], elapsed_s: float = 0.0) -> int | None:
        """Rebuild the model from a history read after ``fence()``; see ``prepare``."""
        model = ClusterModel(self.spec, self.config, source=self.source)
        model.restore(history)
        self.model = model
        self._restored_to = ends
        self.stats.restored_records += history.records
        self.stats.restore_s += elapsed_s
        log.info(
            "event=sim_restored cluster=%s records=%d runs=%d elapsed_s=%.3f",
            self.cluster, history.records, len(model.runs), elapsed_s,
        )  # fmt: skip
        return history.resume_ms

    async def run(self) -> None:
        """Publish the cluster's state and start following the log (returns once running)."""
        await self._open()
        self._task = asyncio.create_task(self._loop(), name=f"sim-{self.cluster}")

    async def stop(self, *, timeout_s: float = 10.0) -> None:
        """Finish the current step, publish that the cluster is stopping, close everything."""
        self._stop.set()
        if self._task is not None:
            await cancel_and_wait([self._task], grace_s=timeout_s)
        if self.error is None and self.model is not None and self._publisher is not None:
            with contextlib.suppress(Exception):
                await self._publish(self.model.shutdown(self.clock.now_ms()))
        await self._close()
        self._done.set()

    async def wait_stopped(self) -> None:
        """Returns when the cluster has stopped (``stop()``, or an error it cannot recover from)."""
        await self._done.wait()

    # -- the loop ----------------------------------------------------------------------------------

    async def _open(self) -> None:
        assert self.model is not None
        await self._publish(self.model.begin(self.clock.now_ms()))
        await self._skip_restored()
        self._inbox.clear()
        self._consumer = EventConsumer(
            self._log, self.group_id, (JOBS.name, DECISIONS.name), self._on_record, skip_types=EXPLANATIONS_AND_CYCLES
        )
        # Joining the group can take a while (after a SIGKILL, Kafka waits out the dead member's session);
        # the clock keeps driving starts, ends and faults meanwhile, and the restore already holds
        # everything published before this start.
        self._joining = asyncio.create_task(self._consumer.start(), name=f"sim-{self.cluster}-join")

    async def _skip_restored(self) -> None:
        """Move the consumer group past what the restore has read: it would only be ignored again."""
        if not self._restored_to or self._publisher is None:
            return
        try:
            await self._publisher.publish([], offsets=GroupOffsets(self.group_id, self._restored_to))
        except ProducerFenced:
            raise
        except Exception as error:  # only a cost: the consumer re-reads and ignores
            log.warning("event=sim_skip_failed cluster=%s reason=%r", self.cluster, str(error))

    async def _close(self) -> None:
        consumer, publisher, joining = self._consumer, self._publisher, self._joining
        self._consumer = self._publisher = self._joining = None
        if joining is not None and not joining.done():
            joining.cancel()
            with contextlib.suppress(BaseException):
                await joining
        for closing in (consumer, publisher):
            if closing is not None:
                with contextlib.suppress(Exception):
                    await closing.close()

    async def _loop(self) -> None:
        """Step until stopped. Any failure but being fenced starts the cluster over (``ride_out``): close,
        back off, then rebuild the model from the log as a restart would; fenced, it stops for good."""
        try:
            await ride_out(self._step_or_reopen, self._stop, self.outage, start_over=self._close, retry=_not_fenced)
        except ProducerFenced as error:
            log.error("event=sim_fenced cluster=%s reason=%r", self.cluster, str(error))
            self.error = error
            await self._close()
            self._done.set()
        except BaseException as error:
            if self._stop.is_set():
                raise
            # Ended without being asked (only a bug gets here): say so and count as stopped, so that
            # ``fedsched connector sim`` exits with the error and is started again, rather than living on
            # without stepping while its runs never end.
            log.error("event=sim_loop_ended cluster=%s reason=%r", self.cluster, str(error), exc_info=error)
            self.error = error
            self._done.set()
            if not isinstance(error, Exception):
                raise

    async def _step_or_reopen(self) -> None:
        if self._consumer is None:  # a failure closed it: rebuild the model from the log, then go on
            self.stats.restarts += 1
            self.clock.start(await self.prepare())
            await self._open()
        await self._step()

    async def _step(self) -> None:
        assert self.model is not None and self._consumer is not None
        due = self.model.next_due_ms()
        wait = self._poll_s if due is None else min(self._poll_s, self.clock.wall_seconds_until(due))
        wait = max(wait, 0.001)  # a poll with no timeout may return without ever yielding to other tasks
        joining = self._joining
        if joining is not None and not joining.done():
            await asyncio.wait([joining], timeout=wait)
            if joining.done():
                joining.result()  # raises what the join raised
        else:
            await self._consumer.poll_once(max_records=1000, timeout_s=wait)
        now = self.clock.now_ms()
        emits = self.model.advance(now)
        for envelope in self._inbox:
            emits.extend(self.model.handle(envelope, now))
        self._inbox.clear()
        for node, npu, for_s in self._drills:
            if npu is None:
                emits.extend(self.model.lose_node(NodeId(node), now, round(for_s * 1000)))
            else:
                emits.extend(self.model.fail_npu(NodeId(node), npu, now, round(for_s * 1000)))
        self._drills.clear()
        emits.extend(self.model.advance(now))
        await self._publish(emits)
        await asyncio.sleep(0)  # let the other clusters of a fleet (and everything else) run

    def lose_node(self, node: str, for_s: float) -> None:
        """An operator's drill (``ClusterModel.lose_node``): the node is lost at the next step."""
        self._drills.append((node, None, for_s))

    def fail_npu(self, node: str, npu: int, for_s: float) -> None:
        """An operator's drill (``ClusterModel.fail_npu``): the NPU fails at the next step."""
        self._drills.append((node, npu, for_s))

    async def _on_record(self, record: LogRecord, envelope: Envelope) -> None:
        self._inbox.append(envelope)

    async def _publish(self, emits: Sequence[Emit]) -> None:
        if not emits:
            return
        if self._publisher is None:
            raise RuntimeError("the publisher is closed")
        publisher = self._publisher
        envelopes = [
            publisher.envelope(e.event, id=e.id, time_ms=e.time_ms, tenant=e.tenant, causation_id=e.causation_id)
            for e in emits
        ]
        began = time.perf_counter()
        await publisher.publish(envelopes)
        self.stats.publish_s += time.perf_counter() - began
        self.stats.published += len(envelopes)
        self.stats.batches += 1
        self.stats.by_type.update(e.event.event_type.removeprefix("io.fedsched.") for e in emits)


def _no_random_ids() -> str:
    raise RuntimeError("every event of the simulated cluster carries a derived id")


class SimFleet:
    """Several simulated clusters in one process, on one clock (what ``fedsched up`` runs)::

    fleet = SimFleet.from_node_list(log, config=SimConfig(speed=10))  # sim-1, sim-2, sim-3 from openb
    await fleet.start()
    ...
    await fleet.stop()
    """

    def __init__(
        self,
        event_log: EventLog,
        specs: Sequence[ClusterSpec],
        config: SimConfig | None = None,
        *,
        clock: SimClock | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.clock = clock or SimClock(self.config.speed)
        self._log = event_log
        self.clusters = [SimCluster(event_log, spec, self.config, clock=self.clock) for spec in specs]

    @classmethod
    def from_node_list(
        cls,
        event_log: EventLog,
        path: Path | None = None,
        *,
        names: Sequence[str] = ("sim-1", "sim-2", "sim-3"),
        regions: Sequence[str] | None = None,
        config: SimConfig | None = None,
        clock: SimClock | None = None,
        extra: Mapping[str, Sequence[NodeSpec]] | None = None,
    ) -> SimFleet:
        """One cluster per name, the node list (default: the openb GPU nodes) dealt round-robin among
        them, so each gets a similar mix of GPU models; ``extra`` adds nodes to named clusters (the
        default fleet's NPU pool: ``nodes.npu_pool``), each of which must be one of ``names``. A YAML
        node list's ``cluster:`` section (display name, site, region, currency, GPU rates, datasets,
        labels) applies to every cluster, as it does for ``fedsched connector sim``. Without a site
        there, each cluster is its own site; ``regions`` (one per name) win over the section's region,
        and both default to ``sim``."""
        source = path or default_nodes_path()
        where = list(regions) if regions is not None else [None] * len(names)
        if len(where) != len(names):
            raise ValueError("give one region per cluster name")
        added = dict(extra or {})
        unknown = sorted(set(added) - set(names))
        if unknown:
            raise ValueError(f"nodes added to {', '.join(unknown)}, which is not one of the clusters")
        specs = []
        for index, (name, region) in enumerate(zip(names, where, strict=True)):
            listing = load_nodes(source, split=(len(names), index))
            nodes = (*listing.nodes, *added.get(name, ()))
            specs.append(ClusterSpec.build(name, nodes, region=region, defaults=listing.cluster))
        return cls(event_log, specs, config, clock=clock)

    async def start(self) -> None:
        began = time.perf_counter()
        for cluster in self.clusters:
            await cluster.fence()
        histories = [cluster.new_history() for cluster in self.clusters]
        ends = await read_history(self._log, *histories)  # one read of the log for every cluster
        elapsed = time.perf_counter() - began
        resumes = [c.restore(h, ends, elapsed) for c, h in zip(self.clusters, histories, strict=True)]
        self.clock.start(max((r for r in resumes if r is not None), default=None))
        await asyncio.gather(*(c.run() for c in self.clusters))

    async def stop(self) -> None:
        await asyncio.gather(*(c.stop() for c in self.clusters))

    def lose_node(self, cluster: str, node: str, for_s: float) -> None:
        """An operator's drill: ``node`` of ``cluster`` is lost for ``for_s`` simulated seconds."""
        self._cluster(cluster).lose_node(node, for_s)

    def fail_npu(self, cluster: str, node: str, npu: int, for_s: float) -> None:
        """An operator's drill: NPU ``npu`` of ``node`` of ``cluster`` fails for ``for_s`` simulated seconds."""
        self._cluster(cluster).fail_npu(node, npu, for_s)

    def _cluster(self, cluster: str) -> SimCluster:
        for each in self.clusters:
            if each.cluster == cluster:
                return each
        raise KeyError(f"no simulated cluster {cluster}")


__all__ = ["SimCluster", "SimFleet", "SimStats"]
