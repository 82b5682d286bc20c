"""The host shape (``events.hosting``): what a follower hands out and where it then stands, and which
failures the hosts' loop rides out. No service needed: the follower reads a log written in memory, the
loop runs steps that fail on cue."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from aiokafka.errors import KafkaConnectionError

from events.hosting.follower import Follower, after
from events.hosting.loop import ride_out
from events.log.contract import LogRecord, ProducerFenced, TopicPartition, UnknownTopic
from events.log.memory import MemoryLog
from events.plumbing.outage import Outage, Unreachable

pytestmark = [pytest.mark.timeout(30), pytest.mark.asyncio(loop_scope="session")]

TOPIC = "fedsched.jobs"


def a_log(per_partition: int) -> MemoryLog:
    log = MemoryLog()
    for partition in range(len(log.parts[TOPIC])):
        for n in range(per_partition):
            log.parts[TOPIC][partition].append(LogRecord(TOPIC, partition, n, b"k", b"v%d" % n, (), 0))
    return log


async def everything(follower: Follower) -> list[LogRecord]:
    return [record async for batch in follower.committed() for record in batch]


async def test_a_follower_hands_out_each_committed_record_once_and_stands_past_it() -> None:
    log = a_log(3)
    follower = Follower(log, [TOPIC], batch=2)  # batches smaller than a partition
    await follower.start()
    first = await everything(follower)
    assert len(first) == 3 * len(log.parts[TOPIC])
    assert follower.positions == {TopicPartition(TOPIC, p): 3 for p in range(len(log.parts[TOPIC]))}
    assert await everything(follower) == []  # nothing new: nothing again
    log.parts[TOPIC][1].append(LogRecord(TOPIC, 1, 3, b"k", b"late", (), 0))
    assert [r.value for r in await everything(follower)] == [b"late"]


async def test_a_follower_starts_where_its_sink_stood_and_skips_what_it_was_given_another_way() -> None:
    log = a_log(4)
    follower = Follower(log, [TOPIC])
    tp = TopicPartition(TOPIC, 0)
    await follower.start({tp: 2})
    assert follower.positions[tp] == 2 and follower.positions[TopicPartition(TOPIC, 1)] == 0
    follower.moved([LogRecord(TOPIC, 1, 0, b"k", b"mine", (), 0), LogRecord(TOPIC, 1, 1, b"k", b"mine", (), 0)])
    handed = await everything(follower)
    assert [(r.partition, r.offset) for r in handed if r.partition in (0, 1)] == [(0, 2), (0, 3), (1, 2), (1, 3)]


async def test_a_group_commits_the_positions_past_what_it_handled() -> None:
    records = [LogRecord("t", 0, 5, None, b"", (), 0), LogRecord("t", 1, 9, None, b"", (), 0)]
    records.append(LogRecord("t", 0, 6, None, b"", (), 0))
    assert after(records) == {TopicPartition("t", 0): 7, TopicPartition("t", 1): 10}


class Steps:
    """A step that raises the given errors in turn, then succeeds until told to stop."""

    def __init__(self, stop: asyncio.Event, errors: Sequence[BaseException], succeed: int = 1) -> None:
        self.stop, self.errors, self.succeed = stop, list(errors), succeed
        self.calls = self.starts_over = 0

    async def step(self) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        self.succeed -= 1
        if self.succeed <= 0:
            self.stop.set()

    async def start_over(self) -> None:
        self.starts_over += 1


def quick(component: str) -> Outage:
    return Outage(component, initial_s=0.001, maximum_s=0.002)


async def test_the_loop_starts_over_after_an_outage_and_names_what_was_away() -> None:
    stop = asyncio.Event()
    outage = quick("test-host")
    blamed: list[str] = []
    failed = outage.failed
    outage.failed = lambda dependency, error: (blamed.append(dependency), failed(dependency, error))[1]  # type: ignore[method-assign]
    steps = Steps(stop, [KafkaConnectionError(), Unreachable("postgres", ConnectionRefusedError())])
    await ride_out(steps.step, stop, outage, start_over=steps.start_over)
    assert steps.starts_over == 2 and steps.calls == 3
    assert blamed == ["log", "postgres"]
    assert outage.failing is None  # recovered, then forgotten when the loop ended


@pytest.mark.parametrize("error", [ValueError("a bug"), ProducerFenced("another instance took over")])
async def test_the_loop_ends_on_what_is_not_an_outage(error: Exception) -> None:
    stop = asyncio.Event()
    steps = Steps(stop, [error])
    with pytest.raises(type(error)):
        await ride_out(steps.step, stop, quick("test-host"), start_over=steps.start_over)
    assert steps.starts_over == 0


async def test_a_host_may_ride_out_more_than_outages_but_never_a_fence() -> None:
    from connectors.kubernetes.connector import _log_trouble

    assert _log_trouble(KafkaConnectionError()) and _log_trouble(UnknownTopic("t")) and _log_trouble(OSError())
    assert not _log_trouble(ProducerFenced("taken over")) and not _log_trouble(ValueError("a bug"))
    stop = asyncio.Event()
    steps = Steps(stop, [UnknownTopic("fedsched.decisions")])
    await ride_out(steps.step, stop, quick("test-host"), start_over=steps.start_over, retry=_log_trouble)
    assert steps.starts_over == 1


async def _cancelled_elsewhere() -> None:
    """Raise the CancelledError of a task that is not the caller's (what aiokafka's consumer ``stop()``
    does with its fetcher's tasks, aiokafka#647)."""
    other = asyncio.ensure_future(asyncio.Event().wait())
    await asyncio.sleep(0)
    other.cancel()
    await other


class StrayCancels(Steps):
    """Steps whose first call, and whose first start-over, raise a cancellation aimed at another task."""

    def __init__(self, stop: asyncio.Event) -> None:
        super().__init__(stop, [])
        self.strays = 2

    async def step(self) -> None:
        if self.calls == 0:
            self.calls += 1
            await _cancelled_elsewhere()
        await super().step()

    async def start_over(self) -> None:
        await super().start_over()
        if self.starts_over == 1:
            await _cancelled_elsewhere()


async def test_a_cancellation_aimed_at_another_task_is_ridden_out_like_a_failure() -> None:
    stop = asyncio.Event()
    steps = StrayCancels(stop)
    await asyncio.wait_for(ride_out(steps.step, stop, quick("test-host"), start_over=steps.start_over), 10)
    assert steps.starts_over == 1 and steps.calls == 2 and stop.is_set()


async def test_cancelling_the_loop_itself_still_ends_it() -> None:
    stop = asyncio.Event()
    running = asyncio.Event()

    async def step() -> None:
        running.set()
        await asyncio.Event().wait()

    async def start_over() -> None:
        raise AssertionError("a cancellation of the loop is not a failure to start over from")

    loop = asyncio.create_task(ride_out(step, stop, quick("test-host"), start_over=start_over))
    await asyncio.wait_for(running.wait(), 10)
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop
