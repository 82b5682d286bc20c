"""The in-process projection host (embedded mode, and ``fedsched projections rebuild``).

Called by ``fedsched up`` and the projections CLI. Calls the log ports and the read-model sink.

Every host's shape (``events.hosting``): its follower (``TimeOrderedFollower``) reads what is committed
on every source partition from the positions stored with the read models, merged in log-time order
(ties by topic, partition, offset: the order the live system saw causes before effects); the pure step
folds it through the topology (``projections.stages``); a ``LogSink`` publishes the outputs (profile and
quota events: the latest version of each entity the step changed) and the dead letters, and then the
read-model sink writes the rows, entity states and positions in one transaction; ``ride_out`` keeps
``run`` going through an outage, from what the read models hold. A crash between the two re-runs the
step from the stored positions: the same rows, and outputs whose ids and versions make a re-publication
harmless (a version's content depends only on the events folded, never on how they were batched).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import asyncpg

from events.catalog.errors import EventError
from events.hosting.loop import ride_out
from events.hosting.sink import LogSink, Sink
from events.log.contract import EventLog, OutRecord, TopicPartition
from events.log.deadletter import dead_letter
from events.log.publisher import to_record
from events.plumbing.metrics import Sample
from events.plumbing.outage import Outage
from events.wire.envelope import Envelope
from projections.inprocess.follower import TimeOrderedFollower
from projections.readmodel import writer as readmodels
from projections.readmodel.rows.tables import SCHEMA
from projections.stages.core import Output, Position
from projections.stages.jobs import STAGE as JOB_STAGE
from projections.stages.sources import SOURCE_TOPICS
from projections.stages.topology import MemoryStore, Processed, Topology

log = logging.getLogger("fedsched.projections")

GROUP = "fedsched-projections"


@dataclass(frozen=True, slots=True)
class StepResult:
    events: int
    dead_lettered: int
    outputs: int


class ProjectionRunner:
    def __init__(
        self,
        event_log: EventLog,
        pool: asyncpg.Pool,
        *,
        schema: str = SCHEMA,
        topics: Sequence[str] = SOURCE_TOPICS,
        publish: bool = True,
        batch: int = 5000,
    ) -> None:
        self._pool = pool
        self.schema = schema
        self._sink: Sink[readmodels.Changes] = readmodels.ReadModelSink(pool, schema)
        self._publish = publish
        self.topology = Topology()
        self.store = MemoryStore()
        self.follower = TimeOrderedFollower(event_log, topics, batch=batch)
        # A runner that does not publish (a rebuild into fresh tables) writes nothing to the log: not its
        # outputs, and not the dead letters the live host already wrote for the same records.
        self._outputs = LogSink(event_log, None) if publish else None
        self.folded_total = 0
        self.dead_lettered_total = 0
        self.published_total = 0
        self._ended_jobs: set[str] = set()  # jobs whose views are stored as ended, out of memory
        self.outage = Outage("projections")

    def samples(self) -> list[Sample]:
        """Its counters, for ``/metrics``."""
        return [
            ("fedsched_events_folded_total", {"component": "projections"}, self.folded_total),
            ("fedsched_dead_lettered_total", {"component": "projections"}, self.dead_lettered_total),
            ("fedsched_outputs_published_total", {"component": "projections"}, self.published_total),
        ]

    async def start(self) -> None:
        """Load what the read models hold (entities, positions): the host resumes where its sink stands."""
        await readmodels.ensure_schema(self._pool, self.schema)
        tables = await readmodels.load_state(self._pool, self.schema)
        if tables is None:
            log.warning("event=projections_replay schema=%s reason=entity_format_changed", self.schema)
            await readmodels.reset(self._pool, self.schema)
            tables = {}
        self.store.tables = tables
        self._ended_jobs = await readmodels.ended_job_keys(self._pool, self.schema)
        await self.follower.start(await readmodels.load_positions(self._pool, self.schema))
        if self._outputs is not None:
            await self._outputs.start()

    async def close(self) -> None:
        await self.follower.close()
        if self._outputs is not None:
            await self._outputs.close()

    async def step(self, *, timeout_s: float = 0.0) -> StepResult:
        merged = await self.follower.read(timeout_s)
        if not merged:
            return StepResult(0, 0, 0)
        await self._bring_back_jobs(item[3] for item in merged if isinstance(item[3], Envelope))
        processed = Processed()
        positions: dict[tuple[str, int], int] = {}
        dead: list[OutRecord] = []
        folded = 0
        for _, _, record, envelope in merged:
            positions[(record.topic, record.partition)] = record.offset + 1
            if isinstance(envelope, EventError):
                log.warning(
                    "event=dead_letter topic=%s offset=%d reason=%r", record.topic, record.offset, str(envelope)
                )
                dead.append(dead_letter(record, envelope, GROUP))
                continue
            position = Position(record.topic, record.partition, record.offset)
            self.topology.fold(self.store, envelope, position, processed)
            folded += 1
        self.topology.flush(self.store, processed, publish=self._publish)
        latest = max(item[0] for item in merged)
        outputs = [to_record(_envelope(out, latest)) for out in processed.outputs] if self._publish else []
        if self._outputs is not None and (dead or outputs):
            await self._outputs.commit(dead + outputs)
        stored = {TopicPartition(t, p): o for (t, p), o in {**self.follower.stored(), **positions}.items()}
        await self._sink.commit(readmodels.Changes(processed.changed, self.store.tables), stored)
        self.follower.advance(positions)
        jobs = self.store.tables.get(JOB_STAGE, {})
        for stage, key in processed.changed:  # stored: an ended job leaves memory until it is needed again
            if readmodels.ended(stage, jobs.get(key)):
                del jobs[key]
                self._ended_jobs.add(key)
        self.folded_total += folded
        self.dead_lettered_total += len(dead)
        self.published_total += len(outputs)
        return StepResult(folded, len(dead), len(outputs))

    async def _bring_back_jobs(self, envelopes: Iterable[Envelope]) -> None:
        """The stored views of ended jobs the batch is about, back into memory before it is folded (asked
        of PostgreSQL only for jobs known to be stored as ended: a new job's first events are not)."""
        stage, ended = self.topology.stages[JOB_STAGE], self._ended_jobs
        wanted = {key for envelope in envelopes for key in stage.keys(envelope) if key in ended}
        if wanted:
            self.store.tables.setdefault(JOB_STAGE, {}).update(
                await readmodels.load_ended_jobs(self._pool, self.schema, wanted)
            )
            ended -= wanted

    def positions(self) -> dict[TopicPartition, int]:
        """Where the read models stand, per source partition (next offset to fold)."""
        return self.follower.positions()

    async def catch_up(self) -> int:
        """Fold everything committed now; returns the number of events folded."""
        total = 0
        while True:
            result = await self.step()
            total += result.events + result.dead_lettered
            if result.events + result.dead_lettered == 0:
                return total

    async def run(self, stop: asyncio.Event) -> None:
        """Step until ``stop``; an outage of the log or the database is ridden out (``ride_out``): the
        host starts over from what the read models hold, as a restart would."""
        await ride_out(lambda: self.step(timeout_s=0.5), stop, self.outage, start_over=self._start_over)

    async def _start_over(self) -> None:
        # A step that failed may have folded into memory what it did not write: the read models are
        # where this host stands. (Reloading is what ``start`` does; when the database is still away,
        # ``ride_out`` waits and the next step meets it again; any other failure ends the loop.)
        await self.follower.forget()
        await self.start()


def _envelope(output: Output, time_ms: int) -> Envelope:
    return Envelope(
        id=output.id,
        time_ms=time_ms,
        data=output.event,
        source="urn:fedsched:projections",
        subject=output.event.partition_key(),
    )
