"""The scheduler service: follows the log, and when it leads, runs the pure core in cycles.

Called by ``fedsched scheduler`` and ``fedsched up``. Calls the log ports, the clock, and the core.

Numbered recipe of one cycle (leader only):
 1. Fold every committed input record into ``SchedulerState`` (standbys do this too: they stay hot).
 2. If anything but our own decisions arrived since the last cycle and work is waiting, read the clock
    once: that is the cycle's logical time.
 3. ``decide`` (``services.scheduler.core.decide``, as audit verify replays it): snapshot the state, run
    ``schedule(snapshot, policy in force)``, turn the decisions into events (ids derived from the cycle).
 4. Add a ``SchedulingCycleCompleted`` with the input offsets, the logical time, the policy version and a
    digest of the decisions.
 5. Append all of it in one transaction together with the scheduler group's offsets: a crash leaves
    either the whole cycle or none of it, and never a decision twice.

Every host's shape (``events.hosting``): a ``Follower`` of the input topics (from the start of the log,
which a scheduler replays), the pure step (``SchedulerState.fold``, and ``decide`` when leading), a
``LogSink`` that commits a cycle with the group's offsets, and ``ride_out`` around it.

The read path (``_fold``): a record is folded once, whatever reads it again (a tail and a catch-up, our
own output folded as appended and read back): the host keeps the next offset to fold per partition. A
record is decoded by ``events.log.reading.decode_record`` without the event-time check the projections
and governance apply: the decisions must be a function of the log alone, which ``audit verify``
re-executes, and a check whose bounds an operator sets (``FEDSCHED_EVENT_TIME_SKEW``, or off under a
simulated clock running faster than the wall) would make them depend on a setting no record keeps. An
event time far from the log's costs the scheduler no work proportional to it (usage is summed per epoch
of the fairness half-life; waits and runtimes are differences of times).

Leadership: every instance is a member of one consumer group on the single-partition decisions topic;
the member that holds the partition leads (Kafka's group coordinator, or on the embedded log an
advisory lock, notices a dead leader). A new leader opens the transactional producer with the shared
transactional id, which fences the old one: a deposed leader's next append fails with
``ProducerFenced`` and it steps down.

The election connection is rebuilt like every other: when the log or the database is away the instance
steps down and drops its membership (on the embedded log the lock lives as long as the connection that
took it, so a leader whose lock connection is lost owns nothing and stops deciding at once), and joins
again once the log answers; it leads again only when it holds the lock again, fencing whoever led
meanwhile and catching up on what they wrote before deciding.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from events.catalog.decisions import JobPlaced
from events.catalog.errors import EventError
from events.catalog.topics import DECISIONS
from events.hosting.follower import Follower
from events.hosting.loop import ride_out
from events.hosting.sink import LogSink
from events.log.contract import Appended, EventLog, GroupConsumer, LogRecord, OutRecord, ProducerFenced, TopicPartition
from events.log.publisher import to_record, wall_clock_ms
from events.log.reading import decode_record
from events.plumbing.metrics import Sample, latency_quantiles
from events.plumbing.outage import Outage
from services.scheduler.core.decide import INPUT_TOPICS, decide
from services.scheduler.core.outputs import SOURCE
from services.scheduler.core.policy import CycleMemo
from services.scheduler.core.state import SchedulerState

log = logging.getLogger("fedsched.scheduler")

GROUP = "fedsched-scheduler"
LEADER_GROUP = "fedsched-scheduler-leader"
TRANSACTIONAL_ID = "fedsched-scheduler"


@dataclass
class Metrics:
    cycles: int = 0
    decisions: int = 0
    placements: int = 0
    folded: int = 0
    unreadable: int = 0
    last_cycle_ms: float = 0.0
    # Where cycle time goes, summed since the last summary line (milliseconds): decide is snapshot +
    # policy + decision events, append the transaction, fold reading our own output back.
    decide_ms: float = 0.0
    append_ms: float = 0.0
    fold_ms: float = 0.0
    summed: int = 0  # cycles in those sums
    last_phases_ms: dict[str, float] = field(default_factory=dict)  # decide / append / fold, last cycle
    own_direct: int = 0  # partitions of our own output folded as appended
    own_read_back: int = 0  # ... and read back from the log (something else could lie between)
    leader: bool = False
    queue_depth: dict[str, int] = field(default_factory=dict)
    # Submission (the API's append) to its placement committed, for the latest placements (ms).
    placement_latency_ms: deque[int] = field(default_factory=lambda: deque(maxlen=1024))


class SchedulerHost:
    def __init__(
        self,
        event_log: EventLog,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        transactional_id: str = TRANSACTIONAL_ID,
        namespace: str = "",
        idle_cycle_ms: int = 5_000,
    ) -> None:
        self._log = event_log
        self._clock = clock
        # A namespace prefixes every topic and group (several deployments, or tests, on one log).
        self._ns = f"{namespace}." if namespace else ""
        self._idle_cycle_ms = idle_cycle_ms
        self._leader_group = self._ns + LEADER_GROUP
        self.state = SchedulerState()
        self.metrics = Metrics()
        # A reader for each catch-up pass, closed after: a Kafka reader's consumers keep long-polling their
        # partitions while open (an idle scheduler's twenty cost ~0.3 cores, and as much of the broker's).
        self.follower = Follower(event_log, [self._ns + t for t in INPUT_TOPICS], reader_per_pass=True)
        self._decisions = self._ns + DECISIONS.name
        self._folded: dict[tuple[str, int], int] = {}  # the next offset to fold, per (topic, partition)
        # Opened when elected (fencing any earlier leader), dropped when deposed.
        self._sink = LogSink(event_log, transactional_id, namespace=namespace, group=self._ns + GROUP)
        self._own_end: dict[TopicPartition, int] = {}  # where our last directly folded records ended
        self._memo = CycleMemo()  # what a cycle's set-up leaves for the next (same decisions either way)
        self._leadership: GroupConsumer | None = None
        self._member = ""  # its name in the leadership group, kept across a rejoin
        self._caught_up = False  # the run loop has read everything committed since it (re)started
        self._dirty = True
        self._last_cycle_at = 0
        self.outage = Outage("scheduler")

    @property
    def positions(self) -> dict[TopicPartition, int]:
        """Where the fold stands, per input partition (next offset)."""
        return self.follower.positions

    def samples(self) -> list[Sample]:
        """Its counters and its queue depth per priority class, for ``/metrics``."""
        m = self.metrics
        samples: list[Sample] = [
            ("fedsched_scheduler_cycles_total", {}, m.cycles),
            ("fedsched_scheduler_decisions_total", {}, m.decisions),
            ("fedsched_scheduler_placements_total", {}, m.placements),
            ("fedsched_scheduler_cycle_seconds", {}, m.last_cycle_ms / 1000),
            ("fedsched_scheduler_leader", {}, 1.0 if m.leader else 0.0),
            *(
                ("fedsched_scheduler_cycle_phase_seconds", {"phase": phase}, ms / 1000)
                for phase, ms in sorted(m.last_phases_ms.items())
            ),
            ("fedsched_events_folded_total", {"component": "scheduler"}, m.folded),
            ("fedsched_unreadable_total", {"component": "scheduler"}, m.unreadable),
            *latency_quantiles(m.placement_latency_ms),
        ]
        depth: dict[str, int] = {}
        for job in self.state.pending_jobs():
            key = job.priority_class.value
            depth[key] = depth.get(key, 0) + 1
        samples += [("fedsched_queue_depth", {"priority_class": k}, v) for k, v in sorted(depth.items())]
        return samples

    async def start(self) -> None:
        await self.follower.start()
        await self._join()

    async def _join(self) -> None:
        """Become a member of the leadership group (a new connection, on the embedded log)."""
        # The oldest instance sorts first and keeps the lead when a standby joins (no hand-over on join);
        # a member that joins again after an outage sorts by its first start.
        self._member = self._member or f"fedsched-scheduler-{time.time_ns():020d}-{os.getpid()}"
        self._leadership = await self._log.group_consumer(
            self._leader_group, [self._ns + DECISIONS.name], member_name=self._member, records=False
        )

    async def _leave(self) -> None:
        leadership, self._leadership = self._leadership, None
        if leadership is not None:
            with contextlib.suppress(Exception):  # its connection may be dead: closing is only tidying up
                await leadership.close()

    async def close(self) -> None:
        self._summary()
        await self.follower.close()
        await self._sink.close()
        await self._leave()

    # -- following the log -----------------------------------------------------------------------

    async def follow(self) -> int:
        """Fold every record committed now; returns how many were folded."""
        folded = 0
        async for records in self.follower.committed():
            folded += self._fold(records)
        self.metrics.folded += folded
        return folded

    async def _follow_tail(self, timeout_s: float) -> int:
        """Fold what has arrived on any input partition, waiting up to ``timeout_s`` for something."""
        folded = self._fold(await self.follower.poll(timeout_s))
        self.metrics.folded += folded
        return folded

    def _fold(self, records: list[LogRecord]) -> int:
        """Fold records the follower handed out (its positions are past them already), each once."""
        folded_to = self._folded
        for record in records:
            where = (record.topic, record.partition)
            if record.offset < folded_to.get(where, 0):
                continue  # folded already: the same record read again changes nothing
            folded_to[where] = record.offset + 1
            try:
                envelope = decode_record(record, None)  # unchecked: see the module docstring
            except EventError:
                self.metrics.unreadable += 1  # the projections' dead-letter copy keeps it
            else:
                self.state.fold(envelope)
                if envelope.source != SOURCE:
                    self._dirty = True
        if records:
            self.state.refresh()  # a standby takes no snapshot: it would keep every job it ever saw
        return len(records)

    # -- leading ---------------------------------------------------------------------------------

    async def is_leader(self) -> bool:
        if self._leadership is None:  # left after an outage: join again (the log answers by now)
            await self._join()
            assert self._leadership is not None
        await self._leadership.poll(max_records=1, timeout_s=0.0)  # heartbeat and rebalance
        leading = bool(self._leadership.assignment())
        if leading and not self._sink.open:
            # Fence any earlier leader, then catch up on what it may have written before the fence.
            await self._sink.start()
            await self.follow()
            self._dirty = True
            log.info("event=leader_elected transactional_id=%s", self._sink.transactional_id)
        elif not leading and self._sink.open:
            await self._step_down("lost the leadership group assignment")
        self.metrics.leader = self._sink.open
        return self.metrics.leader

    async def _step_down(self, why: str) -> None:
        log.warning("event=step_down reason=%r", why)
        self.metrics.leader = False
        await self._sink.drop()

    def needs_cycle(self, now_ms: int) -> bool:
        state = self.state
        waiting = state.pending_count() or state.growing_count()  # jobs to place, runs to grow
        if not (waiting or state.open_cancellations() or state.awaiting_verdict_count()):
            return False
        return self._dirty or now_ms - self._last_cycle_at >= self._idle_cycle_ms

    async def cycle(self) -> int:
        """Run one cycle now (the caller checked leadership); returns the number of decision events."""
        assert self._sink.open, "not the leader"
        loop = asyncio.get_running_loop()
        started = loop.time()
        now = self._clock()
        decided = decide(self.state, now, self._memo)
        events = decided.events
        if not events:
            # Nothing to say (every waiting job already has its explanation): no cycle to record.
            self._dirty = False
            self._last_cycle_at = now
            return 0
        decided_at = loop.time()
        offsets = dict(self.positions)
        record = decided.record([(tp.topic, tp.partition, o) for tp, o in offsets.items()])
        records = [to_record(e) for e in [*events, record]]
        try:
            appended = await self._sink.commit(records, offsets)
        except ProducerFenced:
            await self._step_down("fenced by a newer leader")
            return 0
        appended_at = loop.time()
        committed_ms = self._clock()
        placed = [e.data.job_id for e in events if isinstance(e.data, JobPlaced)]
        for job_id in placed:  # submission (the API's append) to the placement committed
            facts = self.state.jobs.get(job_id)
            if facts is not None and facts.spec is not None:
                self.metrics.placement_latency_ms.append(max(0, committed_ms - facts.submitted_ms))
        self._dirty = False
        self._last_cycle_at = now
        self.metrics.cycles += 1
        self.metrics.decisions += len(events)
        self.metrics.placements += len(placed)
        # Our own output is an input of the next cycle: fold it before deciding again (anything else
        # folded with it marks the state dirty again).
        await self._fold_through(self._fold_own(records, appended))
        m = self.metrics
        m.last_cycle_ms = (loop.time() - started) * 1000
        m.last_phases_ms = {
            "decide": (decided_at - started) * 1000,
            "append": (appended_at - decided_at) * 1000,
            "fold": (loop.time() - appended_at) * 1000,
        }
        m.decide_ms += m.last_phases_ms["decide"]
        m.append_ms += m.last_phases_ms["append"]
        m.fold_ms += m.last_phases_ms["fold"]
        m.summed += 1
        if m.summed >= 50:
            self._summary()
        return len(events)

    def _summary(self) -> None:
        m = self.metrics
        if not m.summed:
            return
        log.info(
            "event=cycles_summary cycles=%d decisions=%d decide_ms_avg=%.1f append_ms_avg=%.1f fold_ms_avg=%.1f"
            " pending=%d running=%d",
            m.summed, m.decisions, m.decide_ms / m.summed, m.append_ms / m.summed, m.fold_ms / m.summed,
            self.state.pending_count(), self.state.running_count(),
        )  # fmt: skip
        m.decide_ms = m.append_ms = m.fold_ms = 0.0
        m.summed = 0

    def _fold_own(self, records: list[OutRecord], appended: list[Appended]) -> dict[TopicPartition, int]:
        """Fold what we just appended without waiting to read it back, on every partition where nothing
        else can lie between what we folded last and it: our records come right after our position, or,
        on a log with commit markers, right after the one marker of our own previous transaction. The
        rest is left to read back (returned: partition -> last offset of ours there)."""
        by_tp: dict[TopicPartition, list[tuple[OutRecord, int]]] = {}
        for out, at in zip(records, appended, strict=True):
            by_tp.setdefault(TopicPartition(at.topic, at.partition), []).append((out, at.offset))
        remaining: dict[TopicPartition, int] = {}
        for tp, ours in by_tp.items():
            offsets = [offset for _, offset in ours]
            position = self.positions.get(tp, 0)
            gap = offsets[0] - position
            adjacent = gap == 0 or (gap == 1 and self._log.commit_markers and self._own_end.get(tp) == position)
            if not adjacent or offsets != list(range(offsets[0], offsets[0] + len(offsets))):
                remaining[tp] = offsets[-1]
                self.metrics.own_read_back += 1
                continue
            self.metrics.own_direct += 1
            mine = [LogRecord(tp.topic, tp.partition, o, r.key, r.value, tuple(r.headers), 0) for r, o in ours]
            self.follower.moved(mine)
            self._fold(mine)
            self._own_end[tp] = self.positions[tp]
        return remaining

    async def _fold_through(self, appended: dict[TopicPartition, int]) -> None:
        if not self._caught_up:  # a cycle outside ``run`` (tests): no tail to wait on
            await self.follow()
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30.0
        while any(self.positions.get(tp, 0) <= offset for tp, offset in appended.items()):
            if loop.time() > deadline:
                # Committed yet not readable for this long: read it the slow, certain way.
                await self.follow()
                return
            await self._follow_tail(0.05)

    async def run(self, stop: asyncio.Event, *, poll_s: float = 0.05) -> None:
        """Follow, and lead when elected, until ``stop``. An outage of the log does not end it
        (``ride_out``): the instance steps down and starts over from its positions, as a restart would (a
        cycle whose append failed is in doubt: the next leader's producer aborts it or finds it committed
        when it catches up), with backoff meanwhile; ``/healthz`` names the log until it answers again."""

        async def once() -> None:
            if not self._caught_up:  # a step of its own: the log answered it, whatever the next one meets
                await self.follow()
                self._caught_up = True
            elif await self.is_leader() and self.needs_cycle(self._clock()):
                await self.cycle()
            else:
                await self._follow_tail(poll_s)  # wakes as soon as anything is committed on any input

        await ride_out(once, stop, self.outage, start_over=self._start_over)

    async def _start_over(self) -> None:
        self._caught_up = False
        await self.follower.forget()
        if self._sink.open:
            await self._step_down("the log is unreachable")
        # The membership's connection may be dead, and with it the lock: join again when the log answers.
        await self._leave()
        self.metrics.leader = False
