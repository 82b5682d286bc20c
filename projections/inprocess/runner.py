"""The in-process projection host (embedded mode, and ``fedsched projections rebuild``).

Called by ``fedsched up`` and the projections CLI. Calls the log ports and the read-model sink.

Each step reads what is committed on every source partition from the positions stored with the read
models, merges it in log-time order (ties by topic, partition, offset: the order the live system saw
causes before effects), folds it through the topology, publishes the outputs (profile and quota
events: the latest version of each entity the step changed), and then writes the read models, entity
states and positions in one transaction. A crash between the two re-runs the step from the stored
positions: the same rows, and outputs whose ids and versions make a re-publication harmless (a
version's content depends only on the events folded, never on how they were batched).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import asyncpg

from events.catalog.errors import EventError
from events.log.contract import EventLog, LogProducer, LogReader, LogRecord, OutRecord, TopicPartition
from events.log.deadletter import dead_letter
from events.log.publisher import to_record
from events.wire.codec import decode
from events.wire.envelope import Envelope
from projections.readmodel import writer as readmodels
from projections.stages.core import Output, Position
from projections.stages.jobs import STAGE as JOB_STAGE
from projections.stages.sources import SOURCE_TOPICS, source_rank
from projections.stages.topology import MemoryStore, Processed, Topology

log = logging.getLogger("fedsched.projections")

GROUP = "fedsched-projections"

Item = tuple[int, int, LogRecord, "Envelope | None"]


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
        schema: str = "fedsched_rm",
        topics: Sequence[str] = SOURCE_TOPICS,
        publish: bool = True,
        batch: int = 5000,
    ) -> None:
        self._log = event_log
        self._pool = pool
        self.schema = schema
        self._topics = tuple(topics)
        self._publish = publish
        self._batch = batch
        self.topology = Topology()
        self.store = MemoryStore()
        self._positions: dict[tuple[str, int], int] = {}
        self._partitions: list[TopicPartition] = []
        self._reader: LogReader | None = None
        self._producer: LogProducer | None = None
        self._cut_all = False  # the last read was cut by its limit across partitions
        self.folded_total = 0
        self.dead_lettered_total = 0
        self.published_total = 0
        self._ended_jobs: set[str] = set()  # jobs whose views are stored as ended, out of memory

    async def start(self) -> None:
        await readmodels.ensure_schema(self._pool, self.schema)
        tables = await readmodels.load_state(self._pool, self.schema)
        if tables is None:
            log.warning("event=projections_replay schema=%s reason=entity_format_changed", self.schema)
            await readmodels.reset(self._pool, self.schema)
            tables = {}
        self._positions = await readmodels.load_positions(self._pool, self.schema)
        self.store.tables = tables
        self._ended_jobs = await readmodels.ended_job_keys(self._pool, self.schema)
        self._partitions = [
            TopicPartition(topic, p) for topic in self._topics for p in range(await self._log.partitions(topic))
        ]
        self._reader = await self._log.reader()
        # A runner that does not publish (a rebuild into fresh tables) writes nothing to the log: not its
        # outputs, and not the dead letters the live host already wrote for the same records.
        self._producer = await self._log.producer() if self._publish else None

    async def close(self) -> None:
        if self._reader is not None:
            await self._reader.close()
        if self._producer is not None:
            await self._producer.close()

    async def step(self, *, timeout_s: float = 0.0) -> StepResult:
        per_partition = await self._read()
        if not per_partition and timeout_s > 0:
            per_partition = await self._wait_and_read(timeout_s)
        if not per_partition:
            return StepResult(0, 0, 0)
        positions = dict(self._positions)
        decoded: list[list[Item]] = []
        errors: dict[tuple[str, int, int], EventError] = {}
        for records in per_partition:
            items: list[Item] = []
            time_ms = 0  # a record we cannot read keeps its place after the last one we could
            for record in records:
                try:
                    envelope: Envelope | None = decode(record.headers, record.value)
                except EventError as error:
                    errors[(record.topic, record.partition, record.offset)] = error
                    envelope = None
                time_ms = envelope.time_ms if envelope is not None else time_ms
                items.append((time_ms, source_rank(record.topic), record, envelope))
            decoded.append(items)
        merged = self._merge(decoded)
        await self._bring_back_jobs(envelope for _, _, _, envelope in merged if envelope is not None)
        processed = Processed()
        dead: list[OutRecord] = []
        folded = 0
        for _, _, record, envelope in merged:
            positions[(record.topic, record.partition)] = record.offset + 1
            if envelope is None:
                problem = errors[(record.topic, record.partition, record.offset)]
                log.warning("event=dead_letter topic=%s offset=%d reason=%r", record.topic, record.offset, str(problem))
                dead.append(dead_letter(record, problem, GROUP))
                continue
            position = Position(record.topic, record.partition, record.offset)
            self.topology.fold(self.store, envelope, position, processed)
            folded += 1
        self.topology.flush(self.store, processed, publish=self._publish)
        latest = max((item[0] for part in decoded for item in part), default=0)
        outputs = [to_record(_envelope(out, latest)) for out in processed.outputs] if self._publish else []
        if self._producer is not None and (dead or outputs):
            await self._producer.append(dead + outputs)
        await readmodels.flush(self._pool, self.schema, processed.changed, self.store.tables, positions)
        jobs = self.store.tables.get(JOB_STAGE, {})
        for stage, key in processed.changed:  # stored: an ended job leaves memory until it is needed again
            if readmodels.ended(stage, jobs.get(key)):
                del jobs[key]
                self._ended_jobs.add(key)
        self._positions = positions
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
        return {tp: self._positions.get((tp.topic, tp.partition), 0) for tp in self._partitions}

    async def catch_up(self) -> int:
        """Fold everything committed now; returns the number of events folded."""
        total = 0
        while True:
            result = await self.step()
            total += result.events + result.dead_lettered
            if result.events + result.dead_lettered == 0:
                return total

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.step(timeout_s=0.5)

    async def _read(self) -> list[list[LogRecord]]:
        self._cut_all = False
        if self._log.snapshot_reads:
            return await self._read_snapshot()
        assert self._reader is not None
        per_partition: list[list[LogRecord]] = []
        for tp in self._partitions:
            offset = self._positions.get((tp.topic, tp.partition), 0)
            end = await self._reader.end_offset(tp)
            if offset >= end:
                continue
            if end - offset <= 2 and await self._reader.caught_up(tp, offset):
                # Only the marker(s) of the last transaction(s): a read would have waited its whole
                # timeout for records that never come (a second per partition per transaction written).
                self._positions[(tp.topic, tp.partition)] = end
                continue
            # Something is committed there: wait for it (a Kafka fetch takes a round trip).
            records = await self._reader.read(tp, offset, max_records=self._batch, timeout_s=1.0)
            while records and len(records) < self._batch and records[-1].offset + 1 < end:
                # A Kafka read returns what one fetch brought: take what else is already at hand, so a
                # step folds (and writes, and publishes) more at once. No waiting: the rest may be markers.
                more = await self._reader.read(
                    tp, records[-1].offset + 1, max_records=self._batch - len(records), timeout_s=0.0
                )
                if not more:
                    break
                records += more
            if records:
                per_partition.append(records)
            elif await self._reader.caught_up(tp, offset):
                # Only transaction markers were left; move past them so we do not ask again.
                self._positions[(tp.topic, tp.partition)] = await self._reader.end_offset(tp)
        return per_partition

    async def _read_snapshot(self) -> list[list[LogRecord]]:
        """Every partition in one read of one snapshot (a log with ``snapshot_reads``: the embedded log
        answers a tail's poll with one query). Partition by partition, a commit landing between two
        reads could show an effect without its cause. The job view does not depend on that (it is the
        same in any order of a job's partitions), but other stages fold what different topics say in the
        order they get it: a placement before the node it lands on was observed, a run priced before its
        cluster's rates were read, a queue's usage before its quota was set; and the versions of the
        aggregates count what they went through. From one snapshot, merged in event-time order, the live
        fold sees causes before effects, as a rebuild does (and a step costs one query)."""
        tail = await self._log.tail({tp: self._positions.get((tp.topic, tp.partition), 0) for tp in self._partitions})
        try:
            records = await tail.poll(max_records=self._batch, timeout_s=0.0)
        finally:
            await tail.close()
        # Cut by the limit, any partition may have more: fold only up to the earliest last time.
        self._cut_all = len(records) >= self._batch
        by_tp: dict[tuple[str, int], list[LogRecord]] = {}
        for record in records:
            by_tp.setdefault((record.topic, record.partition), []).append(record)
        return [by_tp[key] for key in sorted(by_tp)]

    async def _wait_and_read(self, timeout_s: float) -> list[list[LogRecord]]:
        """Wait for a commit without polling: on the embedded log any commit wakes a tailing read."""
        assert self._reader is not None
        tp = self._partitions[0]
        await self._reader.read(
            tp, self._positions.get((tp.topic, tp.partition), 0), max_records=1, timeout_s=timeout_s
        )
        return await self._read()

    def _merge(self, decoded: list[list[Item]]) -> list[Item]:
        """Event time first (causes before effects across topics), then topic rank, partition, offset.
        A partition stays in offset order. Stop at the earliest last time among partitions cut short
        by the batch size: one not read to its end could hold an earlier event than one we fold."""
        cut = min(
            (part[-1][0] for part in decoded if part and (self._cut_all or len(part) >= self._batch)),
            default=None,
        )
        merged = heapq.merge(*decoded, key=lambda item: (item[0], item[1], item[2].partition, item[2].offset))
        return [item for item in merged if cut is None or item[0] <= cut]


def _envelope(output: Output, time_ms: int) -> Envelope:
    return Envelope(
        id=output.id,
        time_ms=time_ms,
        data=output.event,
        source="urn:fedsched:projections",
        subject=output.event.partition_key(),
    )
