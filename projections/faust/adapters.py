"""Where the faust host departs from faust-streaming (0.15.3): every subclass of a faust or faust-driver
class, and every use of a name faust keeps private.

Called by ``projections.faust.app``: ``build_app`` makes a ``ProjectionsApp``; the host subscribes the
router to ``source_topic``, reads offsets through ``ProjectionsApp.projections_consumer``, and its stage
agents call ``make_current`` before they touch a table. Calls faust, mode, faust's aiokafka driver
and, through it, aiokafka's consumer; of ours, only the stage codec (``projections.stages.codec``) and
the router's buffer (``projections.faust.source``). Each of these leans on faust's internals as
they are in 0.15.3: an upgrade of faust-streaming starts here.

What each one changes, and why (the details are at each definition):
- ``state_codec``: tables' values and their changelogs are our entities in the stage codec's format
  (``projections.stages.codec``: typed, versioned, never a pickle), one faust codec per stage so that a
  stage's table only ever holds its own entity type. A stored value that cannot be read is kept in the
  table as ``UnreadableState`` (faust would drop the record with a warning, leaving the entity's older
  state in place, and go on), and ``readable`` refuses it when an agent reaches it: see
  ``StateUnreadable``.
- ``ProjectionsApp``: starts and stops its host with the app, tells it of a revocation before faust
  waits for every record taken to be acknowledged (the router lets go of what it holds for
  alignment), and has faust use ``ProjectionsConsumer``.
- ``ProjectionsConsumer`` and its thread:
  - reads committed data only (faust reads uncommitted data outside its exactly-once mode, which we do
    not use): a decision the scheduler aborted never reaches a projection;
  - skips faust's livelock check of a partition whose position is being reset (aiokafka asserts it is set);
  - counts the acknowledgement of a source or stage record only when the router or an agent processed
    it: faust acknowledges what its streams skip around a rebalance, and would commit past it;
  - runs a record's callback at once when it need not wait: faust spent four tasks and an
    ``asyncio.wait`` per record, a tenth of a busy worker's time;
  - stops delivery while it seeks to the committed offsets after a rebalance, and starts a partition with
    nothing committed over: records fetched meanwhile were thrown away and committed past;
  - ends a transaction marker's gap before the record read after it (faust #606 counted that record
    twice, so each commit went past one transaction only);
  - never commits past a stage record that was not acknowledged (one lost on its way to an agent);
  - and tells the host what faust keeps to itself: committed and read offsets, the fetch position.
- ``SourceTopic``: the source topics' channel hands faust's ``Message`` to the router's buffer as it
  was fetched, with no ``Event``, no decoding and no stream per record (the router decodes and
  releases records in batches).
- ``make_current``: faust attributes a table's reads and writes to the current event of the stream
  (its partition: its changelog partition, its store on disk); our agents fold a batch and write the
  table themselves, so they say which event each key belongs to.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Coroutine, Generator
from types import CoroutineType
from typing import Any, Generic, Protocol, TypeVar, cast

import faust
from aiokafka import TopicPartition
from faust.serializers import codecs
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from mode.services import WaitResults

from projections.faust.source import SourceBuffer
from projections.stages.codec import ENTITY_TYPES, StateCodecError, dumps, loads

log = logging.getLogger("fedsched.projections.faust")

STATE_CODEC = "fedsched_state"


def state_codec(stage: str) -> str:
    """The name of the faust codec of ``stage``'s table values (and its changelog's)."""
    return f"{STATE_CODEC}.{stage}"


class UnreadableState:
    """What a stage's table holds for a key whose stored value the stage codec could not read."""

    __slots__ = ("error",)

    def __init__(self, error: StateCodecError) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"UnreadableState({str(self.error)!r})"


class StateUnreadable(Exception):
    """A stage reached an entity whose stored state cannot be read. The worker stops: folding onto an
    unknown state (or none) would write wrong read models and publish wrong events, and the state
    comes only from the changelog, which only a worker writes. The records of the batch are read again
    on restart; the cure is a rebuild from the source topics (a new ``--app-id``, or a new entity
    layout: ``projections.faust.config``) once whoever wrote the changelog is found."""

    def __init__(self, stage: str, key: str, error: StateCodecError) -> None:
        super().__init__(f"stage {stage}: the stored state of {key!r} cannot be read from its changelog: {error}")
        self.stage = stage
        self.key = key
        self.error = error


def readable(value: Any, stage: str, key: str) -> Any:
    """``value`` as a stage table gave it for ``key``; ``StateUnreadable`` if it could not be read."""
    if type(value) is UnreadableState:
        raise StateUnreadable(stage, key, value.error)
    return value


class _StateCodec(codecs.Codec):
    """A stage's entities in the stage codec's format (``projections.stages.codec``)."""

    def __init__(self, entity: type) -> None:
        super().__init__()
        self._entity = entity

    def _loads(self, s: bytes) -> Any:
        try:
            return loads(s, self._entity)
        except StateCodecError as error:
            log.error("event=state_unreadable entity=%s reason=%r", self._entity.__name__, str(error))
            return UnreadableState(error)

    def _dumps(self, obj: Any) -> bytes:
        return dumps(obj)


for _stage, _entity in ENTITY_TYPES.items():
    codecs.register(state_codec(_stage), _StateCodec(_entity))


# -- the consumer ------------------------------------------------------------------------------------


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


class ProjectionsConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer, reading committed data only, and committing only what we processed."""

    def _new_consumer_thread(self) -> Any:
        return _ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)

    async def on_task_error(self, exc: BaseException) -> None:
        """faust commits when an agent fails: not ours (see ``_commit``)."""

    async def _commit(self, offsets: Any) -> bool:
        """Nothing is committed once the worker has crashed (``app.crash``: a stage that cannot fold, a
        state it cannot read): what it processed but did not commit is read again after the restart.
        faust's stop commits, through the consumer's thread, which the crash has stopped: the commit
        never finished, and the worker never exited."""
        if self.app.crashed:
            return False
        return bool(await super()._commit(offsets))

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

    # -- what the host reads of faust's bookkeeping ----------------------------------------------------

    def committed_offset(self, tp: tuple[str, int]) -> int | None:
        """The offset faust last committed for ``tp`` (the next to read after a rebalance); None before any."""
        offset = self._committed_offset.get(TP(*tp))
        return offset if isinstance(offset, int) else None

    def read_offset(self, tp: tuple[str, int]) -> int | None:
        """Where faust reads ``tp`` from: its committed offset or, once it handed a record on, that
        record's offset; None if it does not know yet."""
        offset = self._read_offset.get(TP(*tp))
        return offset if isinstance(offset, int) else None

    def fetch_position(self, tp: tuple[str, int]) -> int | None:
        """aiokafka's fetch position of ``tp`` (the next offset it fetches), or None (not assigned, being
        reset, or the consumer not started)."""
        try:
            consumer: Any = self._thread._consumer
            state = consumer._subscription.subscription.assignment.state_value(TopicPartition(*tp))
        except Exception:
            return None
        return state.position if state is not None and state.has_valid_position else None


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
    Consumer = ProjectionsConsumer


# -- the app ---------------------------------------------------------------------------------------------


class AppHost(Protocol):
    """What the app asks of its host (``projections.faust.app.ProjectionsHost``)."""

    async def start(self) -> None: ...

    async def on_revoked(self) -> None: ...

    async def close(self) -> None: ...


HostT = TypeVar("HostT", bound=AppHost)


class ProjectionsApp(faust.App, Generic[HostT]):
    """A faust app that knows its host (started and stopped with it, told of rebalances first)."""

    host: HostT
    internal_topics: frozenset[str] = frozenset()
    """The stage topics: a commit never passes a record of theirs that was not acknowledged."""
    gated_topics: frozenset[str] = frozenset()
    """The source and stage topics: a record of theirs counts as acknowledged once processed only."""

    @property
    def projections_consumer(self) -> ProjectionsConsumer:
        """faust's consumer, which is ours (``_new_transport``)."""
        return cast(ProjectionsConsumer, self.consumer)

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


# -- the router's intake -----------------------------------------------------------------------------


class SourceTopic(faust.Topic):
    """The source topics as the conductor sees them: each record goes, as it came, into the buffer
    given as the channel's ``queue`` (faust takes a channel's queue as given, see ``Channel.queue``).

    faust hands every fetched record to the channels of its topic: the conductor decodes it into an
    ``Event`` and puts that on the channel's queue, and an agent's ``Stream`` takes it off again, one
    record per turn of the event loop, with sensors, a context variable and an acknowledgement per
    event. The stage agents receive packs of inputs, so that cost is spread over thousands of inputs;
    the router would pay it for every source record. It needs none of it: it decodes records itself
    and releases them in batches. So the conductor's decode passes the record on as it came (faust's
    ``Message``: key and value raw bytes, its offset and its consumer generation), and the channel's
    queue is a list the router takes whole (``projections.faust.source.SourceBuffer``)."""

    def _compile_decode(self) -> None:
        self.decode = _as_it_came  # type: ignore[method-assign]

    async def put(self, event: Any) -> None:
        await self.queue.put(event)


async def _as_it_came(message: Any, *, propagate: bool = False) -> Any:
    return message


def source_topic(app: faust.App, topics: tuple[str, ...], buffer: SourceBuffer) -> SourceTopic:
    """The channel of ``topics`` that fills ``buffer``; it is emptied with the agents' queues."""
    app.flow_control.manage_queue(buffer)  # type: ignore[arg-type]
    return SourceTopic(app, topics=list(topics), queue=buffer, acks=True)  # type: ignore[arg-type]


# -- tables ------------------------------------------------------------------------------------------


def make_current(event: Any) -> None:
    """Make ``event`` faust's current event: the one it attributes table writes to (their changelog
    partition is its) and, with a store on disk, reads (a store keeps each partition apart)."""
    faust.streams._current_event.set(weakref.ref(event))
