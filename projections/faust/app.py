"""The distributed projection host: a faust-streaming app running the same stages as the in-process runner.

Called by ``fedsched projections worker`` (``build_app`` then a faust ``Worker``), the benchmark and
the tests. Calls faust through its public API (every subclass of faust's classes, and every use of its
private names, is in ``projections.faust.adapters``), asyncpg (through ``projections.faust.sink``),
aiokafka (through faust, and ``projections.faust.progress``) and the pure stages; no reducer is
implemented twice.

Topology, per worker (several workers share every topic's partitions and take over when one dies):

    source topics ──▶ router task  ──▶ <app id>.stage.<stage> ──▶ stage agent ──▶ <app id>.stage.<other>
    (inventory, jobs,  decode, align by      (packs of inputs,        reduce entities in a faust table;
     decisions,        event time, route;     keyed by entity)        deltas to other stages; outputs to
     governance)       dead-letter junk                               profiles / quota-usage; rows to PG

The router is a task, not an agent: it takes source records from faust's conductor as they were
fetched, a batch at a time, without a stream's per-record machinery (``projections.faust.source``
and its channel, ``projections.faust.adapters.SourceTopic``).

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
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import faust
from faust.serializers import codecs

from events.catalog.topics import DEAD_LETTERS, Cleanup, TopicSpec, partition_for, topic
from events.log.contract import OutRecord
from events.log.contract import TopicPartition as LogPartition
from events.log.publisher import to_record
from events.wire.envelope import Envelope
from projections.faust.adapters import (
    ProjectionsApp,
    ProjectionsConsumer,
    make_current,
    readable,
    source_topic,
    state_codec,
)
from projections.faust.config import WorkerConfig
from projections.faust.fold import Record, fold
from projections.faust.progress import SourceProgress
from projections.faust.router import Outbox, Router
from projections.faust.sink import Sink
from projections.faust.source import SourceBuffer, log_time_ms
from projections.faust.wire import pack, partition_of, read_packs, split
from projections.stages.core import Output, Stage
from projections.stages.topology import default_stages

log = logging.getLogger("fedsched.projections.faust")

OUTPUT_SOURCE = "urn:fedsched:projections"
INTERNAL_RETENTION = timedelta(days=7)
STREAM_BUFFER = 16384
"""Records faust may hold for an agent (``stream_buffer_maxsize``), and for the router."""


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
        self,
        app: ProjectionsApp[ProjectionsHost],
        config: WorkerConfig,
        *,
        sink: Sink | None = None,
        outbox: Outbox | None = None,
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
                value_serializer=state_codec(name),
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
            table.key_serializer, table.value_serializer = "json", state_codec(name)
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
        track = self._consumer.unacked.add
        receive = self.router.receive
        received = self._received
        for message in messages:
            if message.generation_id != generation:
                continue
            track(message)
            topic, partition, offset = message.topic, message.partition, message.offset
            headers = tuple(message.headers or ())
            receive(message, topic, partition, offset, message.key, message.value, headers, log_time_ms(message))
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

    @property
    def _consumer(self) -> ProjectionsConsumer:
        return self.app.projections_consumer

    async def _ack_routed(self, message: Any) -> None:
        consumer = self._consumer
        consumer.processed(message)
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
        self._consumer.unacked.discard(message)

    async def _ack(self, stream: Any, event: Any) -> None:
        self._consumer.processed(event.message)
        await stream.ack(event)

    def consumer_positions(self) -> dict[LogPartition, int]:
        """The next offset to fold of each source and stage partition this worker holds, as committed, for
        its consumer lag (which counts a partition with only transaction markers left as done); 0 where
        nothing was committed yet (the worker reads from the start)."""
        topics = {*self.config.source_topics, *(self.config.stage_topic(name) for name in self.stages)}
        consumer = self._consumer
        out: dict[LogPartition, int] = {}
        for tp in consumer.assignment():
            if tp.topic in topics:
                offset = consumer.committed_offset(tp)
                out[LogPartition(tp.topic, tp.partition)] = 0 if offset is None else offset
        return out

    def _owned(self) -> list[tuple[str, int]]:
        sources = set(self.config.source_topics)
        return [(tp.topic, tp.partition) for tp in self._consumer.assignment() if tp.topic in sources]

    def _next_offset(self, tp: tuple[str, int]) -> int | None:
        """The next offset the router would receive: after the last it received, else where faust reads
        from (its committed offset; or, once it handed a record on, that record's offset: not caught up)."""
        received = self._received.get(tp)
        if received is not None:
            return received
        return self._consumer.read_offset(tp)

    def _fetched_to(self, tp: tuple[str, int]) -> int | None:
        return self._consumer.fetch_position(tp)

    # -- stages ----------------------------------------------------------------------------------------

    def _stage_agent(self, stage: Stage[Any], table: Any) -> Any:
        async def agent(stream: Any) -> None:
            async for events in stream.noack_take(self.config.batch, within=self.config.linger_s):
                try:
                    await self.fold_batch(stage, table, events)
                except Exception as error:
                    # Half a batch must not be acknowledged, nor the agent restarted over a table that
                    # may be ahead of its changelog: stop the worker; a restart recovers consistently.
                    # The agent ends with the worker (raised, faust's supervisor would start it again).
                    log.exception("event=stage_failed stage=%s", stage.name)
                    await self.app.crash(error)
                    return
                for event in events:
                    await self._ack(stream, event)

        agent.__name__ = f"stage_{stage.name}"
        return agent

    async def fold_batch(self, stage: Stage[Any], table: Any, events: list[Any]) -> None:
        """Steps 1 to 4 of the module docstring for one batch (the agent acknowledges it after). A record
        that is not a readable pack goes to the dead letters (with the batch's deltas and outputs); an
        entity whose stored state cannot be read stops the worker (``adapters.StateUnreadable``)."""
        read = read_packs([e.message for e in events], self.config.source(DEAD_LETTERS.name), self.config.group)
        kept = [events[index] for index, _ in read.packs]  # the events of ``records`` (``folded.owner`` indexes both)
        records = [
            Record(e.message.topic, e.message.partition, e.message.offset, items)
            for e, (_, items) in zip(kept, read.packs, strict=True)
        ]
        by_partition = {e.message.partition: e for e in events}
        partitions = self.partitions[stage.name]
        name = stage.name

        def get(key: str) -> Any:
            # A store on disk reads the key's partition: the one its records arrive on.
            make_current(by_partition.get(partition_of(key, partitions), events[-1]))
            return readable(table.get(key), name, key)

        folded = fold(stage, records, get, self.partitions)
        out: list[OutRecord] = list(read.dead)
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
        owners = {key: kept[index] for key, index in folded.owner.items()}
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
            make_current(owners[key])  # a store on disk keeps each partition apart
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


def build_app(
    config: WorkerConfig, *, sink: Sink | None = None, outbox: Outbox | None = None
) -> ProjectionsApp[ProjectionsHost]:
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
    app: ProjectionsApp[ProjectionsHost] = ProjectionsApp(config.group, **settings)
    host = app.host = ProjectionsHost(app, config, sink=sink, outbox=outbox)
    app.internal_topics = frozenset(config.stage_topic(name) for name in host.stages)
    app.gated_topics = frozenset([*config.source_topics, *app.internal_topics])
    return app
