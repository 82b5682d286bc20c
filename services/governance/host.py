"""The governance service: follows the log, runs the pure rules, publishes what they decide.

Called by ``fedsched gov run`` and by ``fedsched up``. Calls the log ports and the pure rules
(``services.governance.core.rules``). Time is the latest event time in the log; the host reads the clock only
to note, on a quiet log, that time passed (``tick``), so that what a rule waits for happens on time.

Recipe of one step:
 1. Fold every committed record of the inventory, jobs, decisions and governance topics into
    ``GovState`` (governance's own earlier outputs included: their ids mark what was done already).
 2. ``evaluate(state, config, offsets)``: auto-approvals, quota changes at grant start and expiry, idle
    warnings and reclaims, runtime stops, lease releases, findings, budget windows opened and soft budgets'
    findings (the zones' rules from ``events.plumbing.zones``); each under an id derived from its cause.
 3. Publish them in one transaction (a transactional id per deployment fences a second instance), each
    envelope at the log time of step 1 and under its derived id; remember the ids.

A restarted host re-reads the log from the start, so it never repeats an action it published.

Reading: a record is folded once (the host keeps the next offset to fold per partition), decoded by
``events.log.reading.decode_record``: an event whose time lies further from its time in the log than
the allowed skew is not folded (the projections dead-letter it), so no producer's clock moves the log
time every rule reads to the year 9999. A record repeated at a later offset changes nothing either:
see ``services.governance.core.state``.

Every host's shape (``events.hosting``): a ``Follower`` of the input topics, the pure step above, a
``LogSink`` for the outputs, and ``ride_out`` around it. An outage of the log does not end ``run``: the
step is tried again with backoff (``events.plumbing.outage``), on a fresh reader, and on a fresh
producer if the append failed (its transaction aborted, or committed without our knowing: the next step
folds what was committed first, so nothing is published twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from events.catalog.errors import EventError
from events.catalog.governance import GovernanceClockTicked
from events.catalog.topics import DECISIONS, GOVERNANCE, INVENTORY, JOBS
from events.hosting.follower import Follower
from events.hosting.loop import ride_out
from events.hosting.sink import LogSink
from events.log.contract import EventLog, LogRecord, ProducerFenced, TopicPartition
from events.log.publisher import to_record, wall_clock_ms
from events.log.reading import decode_record, skew_from_environment
from events.plumbing.metrics import Sample
from events.plumbing.outage import Outage
from events.plumbing.zones import offsets
from events.wire.codec import TimeSkew
from events.wire.envelope import Envelope
from services.governance.core.config import GovConfig
from services.governance.core.rules import evaluate
from services.governance.core.state import SOURCE, GovState, Output

log = logging.getLogger("fedsched.governance")

INPUT_TOPICS = (DECISIONS.name, GOVERNANCE.name, INVENTORY.name, JOBS.name)
TRANSACTIONAL_ID = "fedsched-governance"
TICK_MS = 15_000
"""How long the log may stay quiet while a rule waits for time before ``run`` notes the moment in it."""


@dataclass
class GovMetrics:
    folded: int = 0
    published: int = 0
    steps: int = 0
    unreadable: int = 0
    ticks: int = 0


class GovernanceHost:
    def __init__(
        self,
        event_log: EventLog,
        config: GovConfig | None = None,
        *,
        namespace: str = "",
        transactional_id: str = TRANSACTIONAL_ID,
        clock: Callable[[], int] = wall_clock_ms,
        tick_ms: int | None = TICK_MS,
        skew: TimeSkew | None = None,
    ) -> None:
        """``skew``: how far an input's event time may lie from its time in the log (None: as the
        environment says, see ``events.log.reading``)."""
        self._log = event_log
        self._skew = skew if skew is not None else skew_from_environment(os.environ)
        self._folded: dict[tuple[str, int], int] = {}  # the next offset to fold, per (topic, partition)
        self._clock = clock
        self._tick_ms = tick_ms
        self.config = config or GovConfig()
        self._ns = f"{namespace}." if namespace else ""
        self._transactional_id = self._ns + transactional_id
        self.state = GovState()
        self.metrics = GovMetrics()
        self.follower = Follower(event_log, [self._ns + topic for topic in INPUT_TOPICS])
        self._sink = LogSink(event_log, self._transactional_id, namespace=namespace)
        self._settled = False  # the last evaluation gave nothing, and nothing was folded or published since
        self._stepping = asyncio.Lock()  # one step at a time: a caller's step and the run loop's never interleave
        self.outage = Outage("governance")

    @property
    def positions(self) -> dict[TopicPartition, int]:
        """Where the fold stands, per input partition (next offset)."""
        return self.follower.positions

    def samples(self) -> list[Sample]:
        """Its counters, for ``/metrics``."""
        m = self.metrics
        return [
            ("fedsched_events_folded_total", {"component": "governance"}, m.folded),
            ("fedsched_unreadable_total", {"component": "governance"}, m.unreadable),
            ("fedsched_governance_outputs_total", {}, m.published),
            ("fedsched_governance_steps_total", {}, m.steps),
        ]

    async def start(self) -> None:
        await self.follower.start()
        await self._sink.start()

    async def close(self) -> None:
        await self.follower.close()
        await self._sink.close()

    async def follow(self) -> int:
        """Fold every record committed now; returns how many were read."""
        folded = 0
        async for records in self.follower.committed():
            self._fold(records)
            folded += len(records)
            self._settled = False  # here, not after the loop: a failure later in it must not lose this
        self.metrics.folded += folded
        return folded

    def _fold(self, records: list[LogRecord]) -> None:
        """Fold records the follower handed out, each once; one that cannot be read is counted."""
        folded_to, skew = self._folded, self._skew
        for record in records:
            where = (record.topic, record.partition)
            if record.offset < folded_to.get(where, 0):
                continue  # folded already: the same record read again changes nothing
            folded_to[where] = record.offset + 1
            try:
                self.state.fold(decode_record(record, skew))
            except EventError:
                self.metrics.unreadable += 1

    async def step(self) -> list[Output]:
        """Fold what is new, evaluate the rules, publish their outputs; returns what was published."""
        async with self._stepping:
            return await self._step()

    async def _step(self) -> list[Output]:
        await self._sink.start()  # fenced before reading: what an earlier instance left is then committed
        await self.follow()
        if self._settled:
            return []
        outputs = evaluate(self.state, self.config, offsets)
        if not outputs:
            # ``evaluate`` reads only the state (time too is the log's), which changes only by a fold or
            # by what is published: until either happens, it would give nothing again. With thousands of
            # jobs running it cost most of an idle host's CPU, twice a second.
            self._settled = True
            return []
        await self._append(outputs)
        self.state.emitted.update(o.id for o in outputs)
        self.metrics.published += len(outputs)
        self.metrics.steps += 1
        for output in outputs:
            log.info("event=governance_output id=%s type=%s", output.id, output.event.event_type)
        return outputs

    async def _append(self, outputs: list[Output]) -> None:
        """Append ``outputs`` in one transaction, under this deployment's topic names."""
        await self._sink.commit([to_record(self._envelope(o)) for o in outputs])

    def _envelope(self, output: Output) -> Envelope:
        tenant = getattr(output.event, "tenant", None)
        return Envelope(
            id=output.id,
            time_ms=output.time_ms,
            data=output.event,
            source=SOURCE,
            subject=output.event.partition_key(),
            tenant=None if tenant is None else str(tenant),
        )

    async def tick(self) -> bool:
        """Note the moment in the log (a ``GovernanceClockTicked`` at the wall clock's time) when nothing
        was logged for ``tick_ms`` while a rule waits for time to pass; the next step folds it like any
        record, so the rule acts within about ``tick_ms`` of its moment and a replay acts at the same one.
        Returns whether it did."""
        async with self._stepping:
            now = self._clock()
            if self._tick_ms is None or now - self.state.now_ms < self._tick_ms or not self.state.waits_for_time():
                return False
            tick = Output(f"gov:tick:{now}", now, GovernanceClockTicked(ticked_by=self._transactional_id))
            await self._append([tick])
            self.metrics.ticks += 1
            return True

    async def run(self, stop: asyncio.Event, *, poll_s: float = 0.5) -> None:
        async def once() -> None:
            await self.step()
            await self.tick()
            await self._wait_for_input(stop, poll_s)

        try:
            await ride_out(once, stop, self.outage, start_over=self.follower.forget)
        except ProducerFenced:
            log.warning("event=fenced reason='another governance instance took over'")

    async def _wait_for_input(self, stop: asyncio.Event, timeout_s: float) -> None:
        # Tail the jobs topic's first partition for a wake-up; on the embedded log any commit wakes it.
        tp = TopicPartition(self._ns + JOBS.name, 0)
        if tp in self.positions:
            await self.follower.wait(tp, timeout_s)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout_s)
