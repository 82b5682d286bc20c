"""Bounded work per event in the projections: an event time far from the log's is dead-lettered by both
hosts' read paths, and a run whose times span years costs a bounded number of usage buckets, with its GPU
time and cost whole."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from events.catalog.errors import InvalidEvent
from events.catalog.inventory import ClusterKind, ClusterRegistered, GpuRate
from events.catalog.jobs import JobStarted, JobSucceeded
from events.catalog.topics import DEAD_LETTERS
from events.log.contract import LogRecord, OutRecord
from events.log.deadletter import REASON
from events.log.publisher import to_record
from events.wire.codec import DEFAULT_SKEW
from events.wire.envelope import MAX_TIME_MS, Envelope
from projections.faust.router import Router
from projections.faust.source import log_time_ms
from projections.inprocess.follower import TimeOrderedFollower
from projections.stages.clusters import HOUR_MS, MAX_HOURS_PER_RUN, ClusterView, _price_interval
from projections.stages.deltas import UsageInterval
from projections.stages.topology import default_stages
from projections.stages.usage import UsageBucket
from tests.unit.projections.builders import Fold, a_job, a_node, placed

pytestmark = pytest.mark.timeout(60)

NOW = 1_764_680_400_000
RATE = 3_600_000  # micro-currency per GPU-hour: one per millisecond of a whole GPU


def record_at(event_ms: int, offset: int) -> LogRecord:
    wire = to_record(Envelope(id=f"e-{offset}", time_ms=event_ms, data=JobStarted(job_id="j1", cluster="c1")))
    return LogRecord(wire.topic, 0, offset, wire.key, wire.value, wire.headers, NOW)


def test_the_in_process_follower_hands_a_far_future_event_on_as_unreadable_in_its_place() -> None:
    records = [record_at(NOW, 0), record_at(MAX_TIME_MS, 1), record_at(NOW + 5, 2)]
    items = TimeOrderedFollower._decoded(records, DEFAULT_SKEW)
    assert [isinstance(item[3], Envelope) for item in items] == [True, False, True]
    bad = items[1]
    assert isinstance(bad[3], InvalidEvent) and bad[3].field == "time"
    assert bad[0] == NOW  # sorted after the last readable record, not in the year 9999


class Capture:
    def __init__(self) -> None:
        self.records: list[OutRecord] = []

    async def deliver(self, records: Sequence[OutRecord], *, tombstones: bool = False) -> None:
        self.records.extend(records)


def test_the_faust_router_dead_letters_a_far_future_event_with_the_reason() -> None:
    stages = default_stages()
    router = Router(
        stages,
        stage_topics={stage.name: f"g.stage.{stage.name}" for stage in stages},
        partitions={stage.name: 1 for stage in stages},
        rank=lambda topic: 0,
        dead_letters=DEAD_LETTERS.name,
        group="g",
        outbox=Capture(),
        skew=DEFAULT_SKEW,
    )
    good, far = record_at(NOW, 0), record_at(MAX_TIME_MS, 1)
    router.receive("m0", good.topic, 0, 0, good.key, good.value, good.headers, NOW)
    router.receive("m1", far.topic, 0, 1, far.key, far.value, far.headers, NOW)
    held = router.drop()
    out = router.route(held)
    dead = [r for r in out if r.topic == DEAD_LETTERS.name]
    assert len(dead) == 1 and dead[0].value == far.value
    reason = dict(dead[0].headers)[REASON].decode()
    assert "field 'time'" in reason and "s ahead of the log's time, more than the allowed skew of 86400 s" in reason
    assert router.counts.dead_lettered == 1 and router.counts.routed == 1


def test_faust_messages_give_their_time_in_the_log_in_milliseconds() -> None:
    class Message:
        def __init__(self, timestamp: object) -> None:
            self.timestamp = timestamp

    assert log_time_ms(Message(1_764_680_400.123)) == 1_764_680_400_123
    assert log_time_ms(Message(None)) == 0
    assert log_time_ms(Message(-1.0)) == 0
    assert log_time_ms(object()) == 0


def pieces(start_ms: int, end_ms: int, milli: int = 1000) -> list[tuple[str, int, int]]:
    view = ClusterView("c1", currency="EUR", rates=(("A100", RATE),))
    interval = UsageInterval("j1", 1, "t", "p", "c1", "A100", milli, start_ms, end_ms)
    out = []
    for routed in _price_interval(view, interval):
        piece = routed.delta  # type: ignore[union-attr]
        out.append((routed.key, piece.allocated_milli_ms, piece.cost_micro))  # type: ignore[union-attr]
    return out


def test_a_run_of_a_few_hours_is_split_at_every_hour_boundary_as_before() -> None:
    start = NOW + 30 * 60_000
    split = pieces(start, start + 3 * HOUR_MS)
    assert [key.rsplit("|", 1)[1] for key, _, _ in split] == [str(NOW + h * HOUR_MS) for h in range(4)]
    assert [alloc for _, alloc, _ in split] == [1000 * 30 * 60_000, *[1000 * HOUR_MS] * 2, 1000 * 30 * 60_000]


def test_a_run_reported_ended_in_the_year_9999_costs_at_most_a_year_of_buckets_with_its_time_whole() -> None:
    started = time.monotonic()
    split = pieces(NOW, MAX_TIME_MS)
    assert time.monotonic() - started < 5.0
    assert len(split) == MAX_HOURS_PER_RUN
    assert sum(alloc for _, alloc, _ in split) == 1000 * (MAX_TIME_MS - NOW)
    first_key, first_alloc, _ = split[0]
    assert first_key.endswith(f"|{NOW}")  # the time before the last year is in the run's first hour
    assert first_alloc > 1000 * HOUR_MS
    hours = [int(key.rsplit("|", 1)[1]) for key, _, _ in split[1:]]
    assert hours == list(range(hours[0], hours[0] + (MAX_HOURS_PER_RUN - 1) * HOUR_MS, HOUR_MS))
    assert hours[-1] == MAX_TIME_MS - MAX_TIME_MS % HOUR_MS


def test_a_run_placed_in_1970_and_ended_now_costs_at_most_a_year_of_buckets() -> None:
    split = pieces(0, NOW)
    assert len(split) == MAX_HOURS_PER_RUN
    assert sum(alloc for _, alloc, _ in split) == 1000 * NOW


def test_through_the_stages_a_far_future_end_gives_bounded_usage_buckets_and_the_whole_cost() -> None:
    fold = Fold()
    fold.feed(
        ClusterRegistered(
            cluster="c1",
            kind=ClusterKind.SIMULATED,
            site="s",
            region="r",
            currency="EUR",
            gpu_rates=(GpuRate(model="A100", micro_per_gpu_hour=RATE),),
        )
    )
    fold.feed(a_node())
    fold.feed(a_job(gpus=1), at_s=1)
    fold.feed(placed(), at_s=2)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=3)
    started = time.monotonic()
    end_s = (MAX_TIME_MS - 1_000_000) // 1000
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=end_s)
    assert time.monotonic() - started < 20.0
    buckets: dict[str, UsageBucket] = fold.store.tables["usage"]
    assert len(buckets) == MAX_HOURS_PER_RUN
    held_ms = (1_000_000 + end_s * 1000) - (1_000_000 + 2 * 1000)
    assert sum(b.allocated_milli_ms for b in buckets.values()) == 1000 * held_ms
    # The cost of each piece is rounded down on its own: within a micro per piece of the whole.
    whole = RATE * 1000 * held_ms // (1000 * HOUR_MS)
    assert whole - MAX_HOURS_PER_RUN <= sum(b.cost_micro for b in buckets.values()) <= whole
