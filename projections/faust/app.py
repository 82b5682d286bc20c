"""The distributed projection host: a faust-streaming app running the same stages as the in-process runner.

Called by ``fedsched projections worker`` (``build_app`` then a faust ``Worker``), the benchmark and
the tests. Calls faust, aiokafka (through faust), asyncpg (through ``projections.faust.sink``) and
the pure stages; no reducer is implemented twice.

Topology, per worker (several workers share every topic's partitions and take over when one dies):

    source topics ──▶ router task  ──▶ <app id>.stage.<stage> ──▶ stage agent ──▶ <app id>.stage.<other>
    (inventory, jobs,  decode, align by      (packs of inputs,        reduce entities in a faust table;
     decisions,        event time, route;     keyed by entity)        deltas to other stages; outputs to
     governance)       dead-letter junk                               profiles / quota-usage; rows to PG

The router is a task, not an agent: it takes source records from faust's conductor as they were
fetched, a batch at a time, without a stream's per-record machinery (``projections.faust.source``).

Exactly-once effect from at-least-once delivery (``processing_guarantee`` stays ``at_least_once``;
faust's exactly-once mode is not used). A stage agent handles one batch of its records thus:
1. fold every input with the stage's reducer, a batch at a time (``projections.stages.core.Batch``: the
   outputs are those of each changed entity's latest version); each input carries a position (its
   source position, or one derived from its parent record's, see ``projections.faust.wire``) that the entity
   remembers, so an input seen before changes nothing and emits nothing;
2. send the deltas and output events and wait until Kafka has them;
3. meanwhile, write the changed entities' read-model rows to PostgreSQL in one transaction;
4. once both are done, write the changed entities to the table (its changelog);
5. acknowledge the records; faust commits their offsets later, after flushing the producer.
A crash before 4 leaves the table as it was, whichever of 2 and 3 were done: the records come again,
fold to the same states and the same deltas at the same positions (skipped by their targets), and
rewrite the same rows. A crash after 4 leaves states that already hold those positions: the records
come again and change nothing, and everything they caused was already delivered and written in 2
and 3. Output events
carry versions and ids derived from their inputs, so a re-sent one is recognisable. The router
likewise acknowledges a source record only after its stage inputs (or its dead letter) are in Kafka.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import pickle
import time
import weakref
from collections.abc import Coroutine, Generator, Sequence
from datetime import timedelta
from types import CoroutineType
from typing import Any

import faust
from aiokafka import TopicPartition
from faust.serializers import codecs
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.services import WaitResults

from events.catalog.topics import DEAD_LETTERS, Cleanup, TopicSpec, partition_for, topic
from events.log.contract import OutRecord
from events.log.contract import TopicPartition as LogPartition
from events.log.publisher import to_record
from events.wire.envelope import Envelope
from projections.faust.config import WorkerConfig
from projections.faust.fold import Record, fold
from projections.faust.progress import SourceProgress
from projections.faust.router import Outbox, Router
from projections.faust.sink import Sink
from projections.faust.source import SourceBuffer, source_topic
from projections.faust.wire import dumps, pack, partition_of, split, unpack
from projections.stages.core import Output, Stage
from projections.stages.topology import default_stages

log = logging.getLogger("fedsched.projections.faust")

STATE_CODEC = "fedsched_state"
OUTPUT_SOURCE = "urn:fedsched:projections"
INTERNAL_RETENTION = timedelta(days=7)
STREAM_BUFFER = 16384
"""Records faust may hold for an agent (``stream_buffer_maxsize``), and for the router."""


class _StateCodec(codecs.Codec):
    """Pickle (protocol 5, dataclasses as constructor calls: ``projections.faust.wire.dumps``) of our own entity
    dataclasses, for our own changelog topics only (named after the entity layout: ``projections.faust.config``)."""

    def _loads(self, s: bytes) -> Any:
        return pickle.loads(s)

    def _dumps(self, obj: Any) -> bytes:
        return dumps(obj)


codecs.register(STATE_CODEC, _StateCodec())


class _ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    """faust reads ``read_uncommitted`` unless in its exactly-once mode; we read committed data only,
    so a decision the scheduler aborted never reaches a projection."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"
        return consumer

    def verify_event_path(self, now: float, tp: Any) -> None:
        """faust's livelock check reads each partition's position, which aiokafka asserts is set: skip a
        partition whose position is being reset (``perform_seek`` sends fresh ones to their beginning)."""
        state = self._ensure_consumer()._fetcher._subscriptions.subscription.assignment.state_value(
            TopicPartition(tp.topic, tp.partition)
        )
        if state is not None and state.has_valid_position:
            super().verify_event_path(now, tp)


class _ReadCommittedConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> Any:
        return _ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)

    _processed: set[tuple[str, int, int]]

    def processed(self, message: Any) -> None:
        """Mark a record of ours as processed: only such a record's acknowledgement counts."""
        if not hasattr(self, "_processed"):
            self._processed = set()
        self._processed.add((message.topic, message.partition, message.offset))

    def ack(self, message: Any) -> bool:
        """faust acknowledges the records its streams skip around a rebalance or a stop (flow suspended,
        old generation), and would commit past them unprocessed. A record of our topics counts only
        when our router or agent processed it; a skipped one is let go (read again from the committed offset)."""
        gated: frozenset[str] = getattr(self.app, "gated_topics", frozenset())
        if message.topic in gated:
            key = (message.topic, message.partition, message.offset)
            processed: set[tuple[str, int, int]] = getattr(self, "_processed", set())
            if key not in processed:
                self._unacked_messages.discard(message)
                return False
            processed.discard(key)
        return bool(super().ack(message))

    async def wait_first(self, *coros: Any, timeout: Any = None) -> Any:  # noqa: ASYNC109 (faust's signature)
        """faust hands every fetched record to its topic's callback as ``wait_first(callback(message),
        suspend_flow.wait())``: four tasks and an ``asyncio.wait`` per record, about a tenth of a busy
        worker's time. A callback that runs to its end without waiting (the usual case: the flow is
        on, the stream's queue and the producer's buffer have room) is run here at once instead; one
        that has to wait goes on from where it stopped, racing the flow's suspension as before (the
        same tasks, the same cancellation when the flow stops). Any other wait is faust's own."""
        if len(coros) == 2 and timeout is None and self._is_flow_wait(coros[1]) and not self.suspend_flow.is_set():
            callback, suspended = coros
            try:
                yielded = callback.send(None)
            except StopIteration as done:
                suspended.close()
                return WaitResults([callback], [done.value], False)
            except BaseException:
                suspended.close()
                raise
            return await super().wait_first(_Started(callback, yielded), suspended)
        return await super().wait_first(*coros, timeout=timeout)

    def _is_flow_wait(self, coro: Any) -> bool:
        """``coro`` is a fresh ``self.suspend_flow.wait()`` (the call ``_drain_messages`` makes)."""
        frame = getattr(coro, "cr_frame", None)
        return (
            isinstance(coro, CoroutineType)
            and frame is not None
            and frame.f_locals.get("self") is self.suspend_flow
            and coro.cr_code is type(self.suspend_flow).wait.__code__
        )

    async def perform_seek(self) -> None:
        """After a rebalance faust seeks every partition to its committed offset, having dropped what it
        had fetched beyond it.

        Delivery stops first, until faust resumes the flow. faust's recovery (``_resume_streams`` and
        ``on_recovery_completed`` in faust-streaming 0.15) resumes the stream partitions, awaits this
        seek, and only then calls ``app.flow_control.resume()``, which empties every agent's queue; the
        consumer's flow is already active, so records fetched from the committed offset during and
        after the seek were queued and then thrown away, with faust's read offset already past them.
        faust then committed past the first of them (it accepts a commit whose lowest acknowledged
        offset is one above the committed one, for transaction markers) or never committed again (two
        or more). With the flow stopped nothing is delivered until the queues are emptied: recovery
        calls ``resume_flow`` right after that, and reading goes on from the offsets sought here.

        aiokafka only seeks to a committed offset above 0, so a partition with nothing committed yet
        kept its position past the dropped records: start those over."""
        self.stop_flow()
        await super().perform_seek()
        fresh = [tp for tp in self.assignment() if not self._is_changelog_tp(tp) and not self._committed_offset.get(tp)]
        if fresh:
            await self._thread.seek_to_beginning(*(TopicPartition(tp.topic, tp.partition) for tp in fresh))
            for tp in fresh:
                self._read_offset.pop(tp, None)

    async def _add_gap(self, tp: Any, offset_from: int, offset_to: int) -> None:
        """Offsets that no record will ever have (transaction markers, in our sources), from ``offset_from``
        to ``offset_to`` inclusive, counted as acknowledged when faust computes what to commit.

        faust (0.15.3; its issue #606) calls this with ``offset_to`` the offset of the record read after
        the gap, so that record was counted twice: once in the gap and once when acknowledged. Each
        duplicate ended the run of consecutive offsets that ``_new_offset`` commits, and as every
        transaction leaves a marker, each commit went past one transaction only: a worker that had
        folded 20,000 records took 20 s more to commit them, and a restart read them all again. The
        gap ends before that record."""
        await super()._add_gap(tp, offset_from, offset_to - 1)

    def _new_offset(self, tp: Any) -> int | None:
        """faust's next offset to commit, but never past an internal record that was not acknowledged:
        our stage topics have no transaction markers, so the lowest acknowledged offset must be the
        committed one (faust accepts one above it). A hole there is a record lost on its way to the
        agent: hold the commit (it is read again after the next rebalance) and say so."""
        committed = self._committed_offset.get(tp)
        acked = self._acked.get(tp)
        internal: frozenset[str] = getattr(self.app, "internal_topics", frozenset())
        if tp.topic in internal and committed and acked and min(acked) != committed:
            log.error(
                "event=commit_hole topic=%s partition=%d committed=%d acked_from=%d",
                tp.topic,
                tp.partition,
                committed,
                min(acked),
            )
            return None
        offset: int | None = super()._new_offset(tp)
        return offset


class _Started:
    """A coroutine already started (it yielded ``yielded``), awaited from there on as ``await`` would
    have gone on with it: what the running task sends or throws in is passed through."""

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._coro = coro
        self._yielded = yielded

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self._coro, self._yielded
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as error:  # a cancellation, thrown in by the task
                try:
                    yielded = coro.throw(error)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as done:
                    return done.value


class _Transport(faust_aiokafka.Transport):
    Consumer = _ReadCommittedConsumer


class ProjectionsApp(faust.App):
    """A faust app that knows its host (started and stopped with it, told of rebalances first)."""

    host: ProjectionsHost

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)

    async def on_start(self) -> None:
        await self.host.start()
        await super().on_start()

    async def on_stop(self) -> None:
        await self.host.on_revoked()  # before faust waits for every record taken to be acknowledged
        await super().on_stop()
        await self.host.close()

    async def _on_partitions_revoked(self, revoked: Any) -> None:
        # Before faust waits for every record taken to be acknowledged: the router lets go of what
        # it holds for alignment (it is read again from the committed offsets after the rebalance).
        await self.host.on_revoked()
        await super()._on_partitions_revoked(revoked)


class FaustOutbox:
    def __init__(self, app: faust.App) -> None:
        self._app = app

    async def deliver(self, records: Sequence[OutRecord], *, tombstones: bool = False) -> None:
        """Send and wait until the broker has every record. ``tombstones``: an empty value is sent as none
        (a deletion in a compacted changelog)."""
        producer = self._app.producer
        futures = [
            await producer.send(
                r.topic,
                r.key,
                None if tombstones and not r.value else r.value,
                r.partition,
                None,
                list(r.headers) or None,
            )
            for r in records
        ]
        if futures:
            await asyncio.gather(*futures)


class ProjectionsHost:
    """The agents, tables and sinks of one worker."""

    def __init__(
        self, app: ProjectionsApp, config: WorkerConfig, *, sink: Sink | None = None, outbox: Outbox | None = None
    ) -> None:
        self.app = app
        self.config = config
        self.stages: dict[str, Stage[Any]] = {stage.name: stage for stage in default_stages()}
        self.partitions = {name: config.stage_partitions(name) for name in self.stages}
        self.outbox: Outbox = outbox or FaustOutbox(app)
        self.agents: dict[str, Any] = {}
        self.sink = sink or Sink(config.dsn, config.schema)
        self.router = Router(
            self.stages.values(),
            stage_topics={name: config.stage_topic(name) for name in self.stages},
            partitions=self.partitions,
            rank=config.rank,
            dead_letters=config.source(DEAD_LETTERS.name),
            group=config.app_id,
            outbox=self.outbox,
            pack_size=config.pack_size,
        )
        self._lock = asyncio.Lock()
        self._intake = SourceBuffer(STREAM_BUFFER)
        self._sources = source_topic(app, config.source_topics, self._intake)
        self._stale_generation = -1
        self._waiting_since: float | None = None
        self._received: dict[tuple[str, int], int] = {}
        self.progress = SourceProgress(config.broker, f"{config.app_id}-router")
        self.tables: dict[str, Any] = {}
        self.folded = 0
        self._install()

    async def start(self) -> None:
        _tune_gc()
        from events.log.kafka import KafkaEventLog

        kafka = KafkaEventLog(self.config.broker, replication_factor=self.config.replication)
        await kafka.start()
        try:
            # All of them before faust subscribes: a topic created while the group forms is left
            # unassigned until the next rebalance.
            await kafka.create_topics([*self.config.public_specs(), *self._internal_specs()])
        finally:
            await kafka.close()
        await self.sink.start()
        self.app.topics.add(self._sources)  # subscribed with the agents' topics

    async def close(self) -> None:
        await self.progress.close()
        await self.sink.close()

    def _internal_specs(self) -> list[TopicSpec]:
        specs = []
        for name in self.stages:
            partitions = self.partitions[name]
            retention = int(INTERNAL_RETENTION.total_seconds() * 1000)
            purpose = f"inputs of the {name} stage"
            specs.append(
                TopicSpec(self.config.stage_topic(name), partitions, "entity", Cleanup.DELETE, retention, purpose)
            )
            purpose = f"entities of the {name} stage"
            specs.append(
                TopicSpec(self.config.changelog_topic(name), partitions, "entity", Cleanup.COMPACT, -1, purpose)
            )
        return specs

    # -- wiring ------------------------------------------------------------------------------------

    def _install(self) -> None:
        app, config = self.app, self.config
        app.task(self._route)
        app.timer(interval=config.tick_s, name="router-tick")(self._tick)
        for name, stage in self.stages.items():
            partitions = self.partitions[name]
            channel = app.topic(
                config.stage_topic(name),
                partitions=partitions,
                internal=True,
                key_serializer="raw",
                value_serializer="raw",
                retention=INTERNAL_RETENTION,
                deleting=True,
            )
            changelog = app.topic(
                config.changelog_topic(name),
                partitions=partitions,
                internal=True,
                key_type=str,
                key_serializer="json",
                value_serializer=STATE_CODEC,
                compacting=True,
                deleting=False,
                config={"retention.ms": "-1"},  # compacted, never expired by time (faust #597)
                acks=False,
                maxsize=131_072,
                allow_empty=True,
            )
            table: Any = app.Table(
                config.table_name(name), partitions=partitions, key_type=str, changelog_topic=changelog
            )
            table.key_serializer, table.value_serializer = "json", STATE_CODEC
            self.tables[name] = table
            self.agents[name] = app.agent(channel, name=f"stage-{name}")(self._stage_agent(stage, table))

    # -- router --------------------------------------------------------------------------------------

    async def _route(self) -> None:
        """The router: source records as the conductor fetched them (``faust_source``), a batch at a time."""
        try:
            while not self.app.should_stop:
                await self._intake.ready(self.config.batch, self.config.linger_s)
                messages = self._intake.take()
                async with self._lock:
                    self._receive(messages)
                    await self._release()
        except Exception as error:
            # What alignment holds would never be acknowledged nor let go: stop the worker; a restart
            # reads it again from the committed offsets.
            log.exception("event=router_failed")
            await self.app.crash(error)
            raise

    def _receive(self, messages: list[Any]) -> None:
        """What a stream does with each record it takes, and then ``router.receive``: a record of an old
        generation, or taken while the flow is suspended (a rebalance), is skipped (read again from the
        committed offsets); any other is tracked (faust waits for its acknowledgement before a
        rebalance or a stop) and held for alignment."""
        if not self.app.flow_control.is_active():
            return
        generation = self.app.consumer_generation_id
        if generation <= self._stale_generation:
            return
        track = self.app.consumer.unacked.add
        receive = self.router.receive
        received = self._received
        for message in messages:
            if message.generation_id != generation:
                continue
            track(message)
            topic, partition, offset = message.topic, message.partition, message.offset
            receive(message, topic, partition, offset, message.key, message.value, tuple(message.headers or ()))
            received[(topic, partition)] = offset + 1
        # faust's livelock check looks for when a stream last read each partition.
        self.app.monitor.stream_inbound_time.update(dict.fromkeys({m.tp for m in messages}, time.monotonic()))

    async def _tick(self) -> None:
        # A release under way (the router's, or an earlier tick's) covers this tick: queueing behind it
        # would only repeat it at once, and made ticks overlap under load.
        if not self.router.aligner.held or self._lock.locked():
            return
        async with self._lock:
            await self._release()

    async def _release(self) -> None:
        if self.app.should_stop:
            return
        if not self.config.align:
            await self.router.release((), lambda tp: True, self._ack_routed)
            return
        owned = self._owned()
        empty = [tp for tp in owned if not self.router.aligner.holds(tp)]
        done = await self.progress.caught_up(empty, self._next_offset, self._fetched_to) if empty else set()
        if await self.router.release(owned, done.__contains__, self._ack_routed) or not self.router.aligner.held:
            self._waiting_since = None
        elif self._waiting_since is None:
            self._waiting_since = time.monotonic()
        elif time.monotonic() - self._waiting_since > 10.0:
            self._waiting_since = time.monotonic()
            waiting = [(tp, self._next_offset(tp), self._fetched_to(tp)) for tp in empty if tp not in done]
            log.warning("event=router_waiting held=%d for=%s", self.router.aligner.held, waiting)

    async def _ack_routed(self, message: Any) -> None:
        consumer = self.app.consumer
        consumer.processed(message)  # type: ignore[attr-defined]
        consumer.ack(message)

    async def on_revoked(self) -> None:
        """A rebalance (or a stop) begins: let go of what alignment holds, and of whatever of this
        generation still arrives. All of it is read again from the committed offsets: faust seeks there
        once the partitions are assigned."""
        self._stale_generation = max(self._stale_generation, self.app.consumer_generation_id)
        async with self._lock:
            for held in self.router.drop():
                self._forget(held.event)
            self._received.clear()
            self._intake.clear()  # never tracked

    def _forget(self, message: Any) -> None:
        """Neither processed nor acknowledged: faust must not wait for it; it is read again."""
        self.app.consumer.unacked.discard(message)

    async def _ack(self, stream: Any, event: Any) -> None:
        self.app.consumer.processed(event.message)  # type: ignore[attr-defined]
        await stream.ack(event)

    def consumer_positions(self) -> dict[LogPartition, int]:
        """The next offset to fold of each source and stage partition this worker holds, as committed, for
        its consumer lag (which counts a partition with only transaction markers left as done); 0 where
        nothing was committed yet (the worker reads from the start)."""
        topics = {*self.config.source_topics, *(self.config.stage_topic(name) for name in self.stages)}
        consumer = self.app.consumer
        committed = consumer._committed_offset  # type: ignore[attr-defined]
        out: dict[LogPartition, int] = {}
        for tp in consumer.assignment():
            if tp.topic in topics:
                offset = committed.get(tp)
                out[LogPartition(tp.topic, tp.partition)] = offset if isinstance(offset, int) else 0
        return out

    def _owned(self) -> list[tuple[str, int]]:
        sources = set(self.config.source_topics)
        return [(tp.topic, tp.partition) for tp in self.app.consumer.assignment() if tp.topic in sources]

    def _next_offset(self, tp: tuple[str, int]) -> int | None:
        """The next offset the router would receive: after the last it received, else where faust reads
        from (its committed offset; or, once it handed a record on, that record's offset: not caught up)."""
        received = self._received.get(tp)
        if received is not None:
            return received
        offset = self.app.consumer._read_offset.get(tp)  # type: ignore[attr-defined]
        return offset if isinstance(offset, int) else None

    def _fetched_to(self, tp: tuple[str, int]) -> int | None:
        state = _partition_state(self.app, tp)
        return state.position if state is not None and state.has_valid_position else None

    # -- stages ----------------------------------------------------------------------------------------

    def _stage_agent(self, stage: Stage[Any], table: Any) -> Any:
        async def agent(stream: Any) -> None:
            async for events in stream.noack_take(self.config.batch, within=self.config.linger_s):
                try:
                    await self.fold_batch(stage, table, events)
                except Exception as error:
                    # Half a batch must not be acknowledged, nor the agent restarted over a table that
                    # may be ahead of its changelog: stop the worker; a restart recovers consistently.
                    log.exception("event=stage_failed stage=%s", stage.name)
                    await self.app.crash(error)
                    raise
                for event in events:
                    await self._ack(stream, event)

        agent.__name__ = f"stage_{stage.name}"
        return agent

    async def fold_batch(self, stage: Stage[Any], table: Any, events: list[Any]) -> None:
        """Steps 1 to 4 of the module docstring for one batch (the agent acknowledges it after)."""
        records = [
            Record(e.message.topic, e.message.partition, e.message.offset, unpack(e.message.value)) for e in events
        ]
        by_partition = {e.message.partition: e for e in events}
        partitions = self.partitions[stage.name]

        def get(key: str) -> Any:
            # A store on disk reads the key's partition: the one its records arrive on.
            _set_current_event(by_partition.get(partition_of(key, partitions), events[-1]))
            return table.get(key)

        folded = fold(stage, records, get, self.partitions)
        out: list[OutRecord] = []
        for (target, partition), items in folded.packs.items():
            for chunk in split(items, self.config.pack_size):
                out.append(OutRecord(self.config.stage_topic(target), pack(chunk), None, (), partition))
        out.extend(self._output(output, time_ms) for output, time_ms in folded.outputs)
        if folded.entities:
            # Steps 2 and 3 at once: both only have to be done before the changelog is written.
            await asyncio.gather(self.outbox.deliver(out), self.sink.write(stage.name, folded.entities))
        else:
            await self.outbox.deliver(out)
        self.folded += folded.inputs
        if not folded.entities:
            return
        # The changelog is written by us and waited for (faust's own table writes are buffered and
        # flushed best-effort at commit time); only then does the local store change.
        changelog = self.config.changelog_topic(stage.name)
        owners = {key: events[index] for key, index in folded.owner.items()}
        await self.outbox.deliver(
            [
                OutRecord(
                    changelog,
                    b"" if entity is None else codecs.dumps(table.value_serializer, entity),
                    codecs.dumps(table.key_serializer, key),
                    (),
                    owners[key].message.partition,
                )
                for key, entity in folded.entities.items()
            ],
            tombstones=True,
        )
        for key, entity in folded.entities.items():
            _set_current_event(owners[key])  # a store on disk keeps each partition apart
            if entity is None:
                table.data.pop(key, None)
            else:
                table.data[key] = entity

    def _output(self, output: Output, time_ms: int) -> OutRecord:
        event = output.event
        envelope = Envelope(
            id=output.id, time_ms=time_ms, data=event, source=OUTPUT_SOURCE, subject=event.partition_key()
        )
        record = to_record(envelope)
        partitions = topic(record.topic).partitions
        return OutRecord(
            self.config.source(record.topic),
            record.value,
            record.key,
            record.headers,
            partition_for(record.key, partitions),
        )


def _tune_gc() -> None:
    """Collect cycles rarely: a worker allocates a great many short-lived objects (records, inputs,
    entity versions) beside a large, long-lived heap (its tables), and with the default thresholds
    the collector took about a fifth of the worker's time, mostly in full collections scanning the
    tables. What was loaded at start (modules, settings) is left out of every collection."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def _set_current_event(event: Any) -> None:
    """Make ``event`` the one faust attributes table writes to (their changelog partition is its)."""
    faust.streams._current_event.set(weakref.ref(event))


def _partition_state(app: faust.App, tp: tuple[str, int]) -> Any:
    """aiokafka's fetch state of a partition of the worker's consumer (its position), or None."""
    try:
        consumer = app.consumer._thread._consumer  # type: ignore[attr-defined]
        return consumer._subscription.subscription.assignment.state_value(TopicPartition(*tp))
    except Exception:
        return None


def build_app(config: WorkerConfig, *, sink: Sink | None = None, outbox: Outbox | None = None) -> ProjectionsApp:
    """The app of one worker. ``sink`` and ``outbox`` replace PostgreSQL and the Kafka producer in tests."""
    heartbeat = min(3.0, config.session_timeout_s / 4)
    settings: dict[str, Any] = {
        "broker": [f"kafka://{server}" for server in config.broker.split(",")],
        "store": "rocksdb://" if config.store == "rocksdb" else "memory://",
        "topic_partitions": config.partitions,
        "topic_replication_factor": config.replication,
        "processing_guarantee": "at_least_once",
        "stream_wait_empty": True,
        "table_standby_replicas": 0,
        "consumer_auto_offset_reset": "earliest",
        "broker_session_timeout": config.session_timeout_s,
        "broker_heartbeat_interval": heartbeat,
        "broker_commit_interval": config.commit_interval_s,
        "stream_buffer_maxsize": STREAM_BUFFER,
        "producer_max_batch_size": 1024 * 1024,
        "producer_max_request_size": 8 * 1024 * 1024,
        "producer_linger": 0.002,
        "web_enabled": config.web_port is not None,
        "autodiscover": False,
    }
    if config.web_port is not None:
        settings["web_port"] = config.web_port
    if config.data_dir is not None:
        settings["datadir"] = str(config.data_dir)
    app = ProjectionsApp(config.group, **settings)
    app.host = ProjectionsHost(app, config, sink=sink, outbox=outbox)
    app.internal_topics = frozenset(config.stage_topic(name) for name in app.host.stages)  # type: ignore[attr-defined]
    app.gated_topics = frozenset([*config.source_topics, *app.internal_topics])  # type: ignore[attr-defined]
    return app
