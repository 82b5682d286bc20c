"""The faust host's parts without a broker: event-time alignment, positions of derived deltas, the router's
packs and dead letters, its intake from faust's conductor, and a stage agent in faust's agent test
context (a redelivered pack changes nothing)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest
from faust.transport.conductor import ConductorHandler
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import ConsumerMessage

from events.catalog.jobs import JobSubmitted
from events.catalog.topics import TOPICS
from events.catalog.types import JobId, Resources, TenantId
from events.log.contract import OutRecord
from events.log.deadletter import REASON
from events.log.publisher import to_record
from events.wire.envelope import Envelope
from projections.faust.align import Aligner
from projections.faust.app import build_app
from projections.faust.config import WorkerConfig
from projections.faust.fold import Record, fold
from projections.faust.router import Router
from projections.faust.source import SourceBuffer
from projections.faust.wire import Item, delta_position, pack, partition_of, unpack
from projections.stages.codec import dumps, loads
from projections.stages.core import Input, Position
from projections.stages.deltas import ShapeSeen
from projections.stages.jobs import JobView
from projections.stages.shapes import ShapeStage
from projections.stages.topology import default_stages

CONFIG = WorkerConfig(broker="127.0.0.1:1", dsn="postgresql://unused", app_id="unit", topic_prefix="u", align=False)
PARTITIONS = {stage.name: CONFIG.stage_partitions(stage.name) for stage in default_stages()}


def submitted(job: str, time_ms: int = 1_000) -> Envelope:
    resources = Resources(cpu_milli=1000, memory_mib=1024, gpus=1)
    event = JobSubmitted(job_id=JobId(job), name=job, tenant=TenantId("t0"), resources=resources)
    return Envelope(id=f"env-{job}", time_ms=time_ms, data=event)


class TestAligner:
    def test_releases_across_partitions_in_event_time_then_rank_order(self) -> None:
        aligner: Aligner[str] = Aligner({"jobs": 2, "decisions": 3}.__getitem__)
        aligner.add("decisions", 0, 0, 20, "placed")
        aligner.add("jobs", 0, 0, 10, "submitted")
        aligner.add("jobs", 1, 0, 20, "other submitted")
        owned = [("jobs", 0), ("jobs", 1), ("decisions", 0)]
        assert aligner.release(owned, lambda tp: True) == ["submitted", "other submitted", "placed"]

    def test_holds_everything_while_an_owned_partition_may_still_have_an_earlier_record(self) -> None:
        aligner: Aligner[str] = Aligner(lambda topic: 0)
        aligner.add("decisions", 0, 0, 20, "placed")
        owned = [("jobs", 0), ("decisions", 0)]
        assert aligner.release(owned, lambda tp: tp != ("jobs", 0)) == []
        aligner.add("jobs", 0, 0, 10, "submitted")
        assert aligner.release(owned, lambda tp: tp != ("jobs", 0)) == ["submitted"]  # then jobs may hold more
        assert aligner.release(owned, lambda tp: True) == ["placed"]

    def test_an_unreadable_record_keeps_its_place_in_its_partition(self) -> None:
        aligner: Aligner[str] = Aligner(lambda topic: 0)
        aligner.add("jobs", 0, 0, 50, "first")
        aligner.add("jobs", 0, 1, None, "junk")
        aligner.add("jobs", 1, 0, 60, "later")
        assert aligner.release([("jobs", 0), ("jobs", 1)], lambda tp: True) == ["first", "junk", "later"]

    def test_drop_forgets_what_is_held(self) -> None:
        aligner: Aligner[str] = Aligner(lambda topic: 0)
        aligner.add("jobs", 0, 0, 1, "a")
        assert aligner.drop() == ["a"] and aligner.held == 0


class TestPositions:
    def test_a_delta_position_grows_with_offset_item_and_emission(self) -> None:
        positions = [delta_position("t", 0, o, i, e) for o in (5, 6) for i in (0, 1) for e in (0, 1)]
        assert [p.offset for p in positions] == sorted(p.offset for p in positions)
        assert len({p.offset for p in positions}) == len(positions)

    def test_folding_a_record_again_emits_nothing_and_changes_nothing(self) -> None:
        stage = next(s for s in default_stages() if s.name == "jobs")
        envelope = submitted("job-1")
        item = Item("job-1", envelope.time_ms, Position("u.fedsched.jobs", 0, 7), envelope.data, envelope.id)
        record = Record("unit.stage.jobs", 0, 3, [item])
        table: dict[str, Any] = {}
        first = fold(stage, [record], table.get, PARTITIONS)
        assert set(first.entities) == {"job-1"} and first.packs
        table.update(first.entities)
        again = fold(stage, [record], table.get, PARTITIONS)
        assert again.entities == {} and again.packs == {} and again.outputs == []

    def test_a_parent_folded_again_from_scratch_derives_the_same_positions(self) -> None:
        stage = next(s for s in default_stages() if s.name == "jobs")
        envelope = submitted("job-1")
        item = Item("job-1", envelope.time_ms, Position("u.fedsched.jobs", 0, 7), envelope.data, envelope.id)
        record = Record("unit.stage.jobs", 0, 3, [item])
        once = fold(stage, [record], {}.get, PARTITIONS)
        twice = fold(stage, [record], {}.get, PARTITIONS)
        assert [(i.key, i.position) for items in once.packs.values() for i in items] == [
            (i.key, i.position) for items in twice.packs.values() for i in items
        ]

    def test_a_redelivered_shape_is_counted_once(self) -> None:
        seen = ShapeSeen("job-1", 1000, 1024, 1000, (), 1)
        delta = Input("1000:1024:1000:any", 1, Position("unit.stage.shapes", 0, 99), seen)
        shape, _ = ShapeStage().reduce(None, delta)
        again, _ = ShapeStage().reduce(shape, delta)
        assert again is shape and shape is not None and shape.count == 1


@dataclass(frozen=True, slots=True)
class _KeywordOnly:
    a: int
    b: tuple[int, ...] = field(default=(), kw_only=True)


@dataclass(frozen=True, slots=True)
class _InitOnly:
    a: int
    scale: InitVar[int] = 1


class TestWire:
    def test_a_pack_of_events_and_deltas_reads_back_equal(self) -> None:
        envelope = submitted("job-3")
        items = [
            Item("job-3", envelope.time_ms, Position("u.fedsched.jobs", 1, 9), envelope.data, envelope.id),
            Item("1:2:3:any", 7, Position("unit.stage.shapes", 0, 5), ShapeSeen("job-3", 1, 2, 3, ("V100",), 1)),
        ]
        assert unpack(pack(items)) == items

    def test_entities_read_back_equal_and_unregistered_dataclasses_are_refused(self) -> None:
        stage = next(s for s in default_stages() if s.name == "jobs")
        envelope = submitted("job-4")
        item = Item("job-4", envelope.time_ms, Position("u.fedsched.jobs", 0, 1), envelope.data, envelope.id)
        entity = fold(stage, [Record("unit.stage.jobs", 0, 0, [item])], {}.get, PARTITIONS).entities["job-4"]
        assert loads(dumps(entity), JobView) == entity
        for other in (_KeywordOnly(1, b=(2,)), _InitOnly(3)):
            with pytest.raises(TypeError, match="not registered"):
                dumps(other)


class Capture:
    def __init__(self) -> None:
        self.records: list[OutRecord] = []

    async def deliver(self, records: Sequence[OutRecord], *, tombstones: bool = False) -> None:
        self.records.extend(records)


class FakeSink:
    def __init__(self) -> None:
        self.writes: list[tuple[str, dict[str, Any]]] = []

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def write(self, stage: str, entities: Mapping[str, Any]) -> None:
        self.writes.append((stage, dict(entities)))


class TestRouter:
    def router(self, outbox: Capture) -> Router:
        return Router(
            default_stages(),
            stage_topics={name: CONFIG.stage_topic(name) for name in PARTITIONS},
            partitions=PARTITIONS,
            rank=CONFIG.rank,
            dead_letters=CONFIG.source("fedsched.deadletter"),
            group=CONFIG.app_id,
            outbox=outbox,
        )

    @pytest.mark.asyncio(loop_scope="session")
    async def test_an_event_goes_to_its_stage_partition_and_junk_to_the_dead_letters(self) -> None:
        outbox = Capture()
        router = self.router(outbox)
        good = to_record(submitted("job-7"))
        router.receive("e1", "u.fedsched.jobs", 0, 0, good.key, good.value, good.headers)
        router.receive("e2", "u.fedsched.jobs", 0, 1, b"k", b"{not json", (("ce_specversion", b"1.0"),))
        acked: list[object] = []

        async def ack(event: object) -> None:
            acked.append(event)

        assert await router.release([("u.fedsched.jobs", 0)], lambda tp: True, ack) == 2
        assert acked == ["e1", "e2"]
        by_topic = {record.topic: record for record in outbox.records}
        dead = by_topic["u.fedsched.deadletter"]
        assert dead.value == b"{not json" and b"ce_id" in dict(dead.headers)[REASON]
        jobs = by_topic[CONFIG.stage_topic("jobs")]
        assert jobs.partition == partition_of("job-7", PARTITIONS["jobs"])
        [item] = unpack(jobs.value)
        assert item.key == "job-7" and item.position == Position("u.fedsched.jobs", 0, 0)


@pytest.mark.timeout(30)
@pytest.mark.asyncio(loop_scope="session")
async def test_a_stage_agent_folds_a_pack_once_even_when_it_is_delivered_again() -> None:
    outbox, sink = Capture(), FakeSink()
    app = build_app(CONFIG, sink=sink, outbox=outbox)  # type: ignore[arg-type]
    app.finalize()
    app.conf.store = "memory://"
    app.flow_control.resume()
    envelope = submitted("job-9")
    value = pack([Item("job-9", envelope.time_ms, Position("u.fedsched.jobs", 0, 4), envelope.data, envelope.id)])
    async with app.host.agents["jobs"].test_context() as agent:
        await agent.put(value=value, key=None, wait=False)
        await _until(lambda: len(sink.writes) == 1)
        await agent.put(value=value, key=None, wait=False)  # redelivered: same positions inside
        await _until(lambda: agent.sent_offset == 2 and app.host.folded == 2)
    assert [stage for stage, _ in sink.writes] == ["jobs"]
    assert sink.writes[0][1]["job-9"].status == "submitted"
    topics = [record.topic for record in outbox.records]
    assert CONFIG.changelog_topic("jobs") in topics and CONFIG.stage_topic("shapes") in topics


def _message(offset: int, generation: int = 1, partition: int = 0) -> ConsumerMessage:
    record = to_record(submitted(f"job-{offset}"))
    message = ConsumerMessage(
        "u.fedsched.jobs", partition, offset, 0.0, 0, record.headers, record.key, record.value, None,
        generation_id=generation,
    )  # fmt: skip
    return message


class TestSourceIntake:
    """The router's intake (``faust_source``): what faust's conductor hands over, and what it keeps of
    faust's queues (back-pressure, emptied with them on a rebalance)."""

    @pytest.mark.timeout(30)
    @pytest.mark.asyncio(loop_scope="session")
    async def test_the_conductor_hands_a_record_to_the_router_as_it_was_fetched(self) -> None:
        app: Any = build_app(CONFIG)
        app.flow_control.resume()
        tp = TP("u.fedsched.jobs", 0)
        handler = ConductorHandler(app.topics, tp, {app.host._sources})
        message = _message(3)
        await handler(message)
        assert app.host._intake.take() == [message]  # faust's message itself: no event, nothing decoded

    def test_back_pressure_stops_fetching_a_partition_until_the_router_takes_the_buffer(self) -> None:
        buffer, calls = SourceBuffer(maxsize=5), []
        high, drop = (lambda: calls.append("high")), (lambda: calls.append("drop"))
        for offset in range(5):
            buffer.put_nowait_enhanced(offset, on_pressure_high=high, on_pressure_drop=drop)
        assert calls == ["high"] and buffer.full()  # from 5 / 1.25 = 4 held on, once
        assert buffer.take() == [0, 1, 2, 3, 4] and calls == ["high", "drop"] and not buffer.full()

    def test_a_rebalance_empties_it_without_resuming_a_partition(self) -> None:
        buffer, calls = SourceBuffer(maxsize=2), []
        for offset in range(2):
            buffer.put_nowait_enhanced(offset, on_pressure_high=lambda: None, on_pressure_drop=calls.append)
        buffer.clear()  # the assignment that follows decides what is fetched
        assert buffer.take() == [] and calls == []

    @pytest.mark.timeout(30)
    @pytest.mark.asyncio(loop_scope="session")
    async def test_a_full_buffer_holds_the_conductor_until_the_router_takes_it(self) -> None:
        buffer = SourceBuffer(maxsize=1)
        await buffer.put("first")
        waiting = asyncio.ensure_future(buffer.put("second"))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        assert buffer.take() == ["first"]
        await asyncio.wait_for(waiting, 5)
        assert buffer.take() == ["second"]

    @pytest.mark.timeout(30)
    @pytest.mark.asyncio(loop_scope="session")
    async def test_the_router_waits_for_a_batch_or_the_linger_after_the_first_record(self) -> None:
        buffer = SourceBuffer(maxsize=100)
        waiting = asyncio.ensure_future(buffer.ready(3, linger_s=60.0))
        await asyncio.sleep(0.01)
        for offset in range(3):
            assert not waiting.done()
            await buffer.put(offset)
        await asyncio.wait_for(waiting, 5)  # a batch: at once
        started = time.monotonic()
        await buffer.ready(10, linger_s=0.05)  # three held: the linger
        assert time.monotonic() - started >= 0.04 and len(buffer) == 3

    @pytest.mark.timeout(30)
    @pytest.mark.asyncio(loop_scope="session")
    async def test_the_router_skips_records_of_an_old_generation_or_taken_while_the_flow_is_stopped(self) -> None:
        app: Any = build_app(CONFIG)
        host, consumer = app.host, app.consumer
        app.consumer_generation_id = 2
        old, current = _message(0, generation=1), _message(1, generation=2)
        host._receive([old, current])  # the flow is suspended until faust resumes it
        assert not host.router.aligner.held and not consumer.unacked
        app.flow_control.resume()
        host._receive([old, current])
        assert [held.event for held in host.router.drop()] == [current] and set(consumer.unacked) == {current}
        await host.on_revoked()  # a rebalance begins: what still arrives of this generation is skipped
        host._receive([_message(2, generation=2)])
        assert not host.router.aligner.held


async def _until(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("timed out")
        await asyncio.sleep(0.01)


def test_the_catalogue_topics_are_all_created_under_the_prefix() -> None:
    assert [spec.name for spec in CONFIG.public_specs()] == [f"u.{spec.name}" for spec in TOPICS]


class TestConsumer:
    """The worker's consumer around a rebalance (faust's recovery and commit bookkeeping, no broker)."""

    @pytest.mark.timeout(30)
    @pytest.mark.asyncio(loop_scope="session")
    async def test_seeking_to_the_committed_offsets_stops_delivery_until_faust_resumes_the_flow(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # faust empties the agents' queues only after this seek: nothing may be delivered in between.
        consumer: Any = build_app(CONFIG).consumer
        seen: list[bool] = []

        async def seek(self: Any) -> None:
            seen.append(self.flow_active)

        monkeypatch.setattr(faust_aiokafka.Consumer, "perform_seek", seek)
        monkeypatch.setattr(type(consumer), "assignment", lambda self: set())
        consumer.resume_flow()
        await consumer.perform_seek()
        assert seen == [False] and not consumer.flow_active
        consumer.resume_flow()  # what faust's recovery does once the queues are empty
        assert consumer.flow_active

    @pytest.mark.timeout(30)
    @pytest.mark.asyncio(loop_scope="session")
    async def test_a_record_callback_that_need_not_wait_runs_at_once_and_one_that_waits_still_races_the_flow(
        self,
    ) -> None:
        consumer: Any = build_app(CONFIG).consumer
        consumer.resume_flow()
        ran: list[str] = []

        async def at_once() -> str:
            ran.append("at once")
            return "done"

        result = await consumer.wait_first(at_once(), consumer.suspend_flow.wait())
        assert ran == ["at once"] and result.done and result.results == ["done"] and not result.stopped

        # One that waits, and then gets what it waited for.
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[str] = loop.create_future()

        async def waits() -> str:
            got = await gate
            ran.append(got)
            return got

        waiting = asyncio.ensure_future(consumer.wait_first(waits(), consumer.suspend_flow.wait()))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        gate.set_result("later")
        assert (await waiting).results == ["later"] and ran[-1] == "later"

        # One that waits while the flow stops (a rebalance): the wait ends and the callback is cancelled.
        stuck: asyncio.Future[str] = loop.create_future()
        cancelled: list[bool] = []

        async def blocked() -> None:
            try:
                await stuck
            except asyncio.CancelledError:
                cancelled.append(True)
                raise

        waiting = asyncio.ensure_future(consumer.wait_first(blocked(), consumer.suspend_flow.wait()))
        await asyncio.sleep(0.01)
        consumer.stop_flow()
        await asyncio.wait_for(waiting, 5)
        await asyncio.sleep(0.01)
        assert cancelled == [True] and stuck.cancelled()

        # With the flow stopped, faust's own wait is used (the callback runs as a task, raced by the flow).
        async def never() -> None:
            await loop.create_future()

        flow_stopped = consumer.suspend_flow.wait()
        assert (await consumer.wait_first(never(), flow_stopped)).done == [flow_stopped]
        consumer.resume_flow()

    @pytest.mark.parametrize(
        ("topic", "expected"),
        [(CONFIG.stage_topic("jobs"), None), ("u.fedsched.jobs", 8)],
        ids=["an internal record never acknowledged holds the commit", "a source topic may skip a marker"],
    )
    def test_a_commit_never_passes_an_unacknowledged_internal_record(self, topic: str, expected: int | None) -> None:
        consumer: Any = build_app(CONFIG).consumer
        tp = TP(topic, 0)
        consumer._committed_offset[tp] = 5
        consumer._acked[tp] = [6, 7]  # offset 5 never acknowledged
        assert consumer._new_offset(tp) == expected
