"""The scheduler service on the real logs: cycles, recorded offsets, leadership, and audit verify."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest
from aiokafka.errors import KafkaConnectionError

from events.catalog.decisions import JobPlaced, JobQueued, SchedulingCycleCompleted
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobSucceeded
from events.catalog.topics import TOPICS, Cleanup, TopicSpec
from events.log import EventLog, TopicPartition
from events.log.publisher import Publisher
from events.log.reading import SKEW_VARIABLE, read_to_end
from events.wire.codec import decode
from services.audit.verify import verify
from services.scheduler.host import SchedulerHost
from tests.unit.projections.builders import a_job, a_node, placed

pytestmark = pytest.mark.asyncio(loop_scope="session")
_ticks = itertools.count()


@pytest.fixture(autouse=True)
def _stories_run_ahead_of_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stories' clock is set in 2027, weeks ahead of the log's own time: the hosts' default check of
    event times against it (``events.log.reading``) would refuse every event, so it is off here."""
    monkeypatch.setenv(SKEW_VARIABLE, "off")


class TopicSet:
    """Private copies of the catalogue's topics for one test."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def name(self, topic: str) -> str:
        return f"{self.prefix}.{topic}"


async def private_topics(event_log: EventLog, make_topic: Callable[..., Awaitable[str]]) -> TopicSet:
    prefix = (await make_topic(1)).replace(".", "-")
    await event_log.create_topics(
        [TopicSpec(f"{prefix}.{s.name}", s.partitions, s.key, Cleanup.DELETE, -1, s.purpose) for s in TOPICS]
    )
    return TopicSet(prefix)


class Renaming(Publisher):
    def __init__(self, event_log: EventLog, topics: TopicSet) -> None:
        super().__init__(event_log, "urn:test", clock=lambda: 1_800_000_000_000 + next(_ticks))
        self._topics = topics

    async def send(self, *events) -> None:  # type: ignore[no-untyped-def]
        from events.log.publisher import to_record

        records = [to_record(self.envelope(e)) for e in events]
        assert self._producer is not None
        await self._producer.append(
            [type(r)(self._topics.name(r.topic), value=r.value, key=r.key, headers=r.headers) for r in records]
        )


def host_for(event_log: EventLog, topics: TopicSet, txn: str) -> SchedulerHost:
    return SchedulerHost(event_log, namespace=topics.prefix, transactional_id=txn, clock=lambda: 1_800_000_100_000)


async def decisions(event_log: EventLog, topics: TopicSet) -> list:  # type: ignore[type-arg]
    reader = await event_log.reader()
    out = []
    async for batch in read_to_end(reader, TopicPartition(topics.name("fedsched.decisions"), 0)):
        out += [decode(r.headers, r.value).data for r in batch]
    await reader.close()
    return out


async def cluster_c1(event_log: EventLog, make_topic: Callable[..., Awaitable[str]]) -> tuple[TopicSet, Renaming]:
    """Private topics with cluster c1 registered, and a started publisher onto them."""
    topics = await private_topics(event_log, make_topic)
    pub = Renaming(event_log, topics)
    await pub.start()
    await pub.send(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s1", region="eu", currency="EUR"))
    return topics, pub


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout_s: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_a_cycle_places_what_fits_explains_what_waits_and_verifies_identically(
    event_log: EventLog, make_topic: Callable[..., Awaitable[str]]
) -> None:
    topics, pub = await cluster_c1(event_log, make_topic)
    await pub.send(a_node(node="n1", gpus=8), a_node(node="n2", gpus=4))
    await pub.send(a_job("j1", gpus=4), a_job("j2", gpus=8), a_job("j3", gpus=16))

    host = host_for(event_log, topics, f"{topics.prefix}-sched")
    await host.start()
    stop = asyncio.Event()
    task = asyncio.create_task(host.run(stop))

    async def all_decided() -> bool:
        kinds = [type(e).__name__ for e in await decisions(event_log, topics)]
        return kinds.count("JobPlaced") == 2 and kinds.count("JobQueued") == 1

    await wait_for(all_decided)

    # A job ends: its GPUs free up and the waiting job... still does not fit (16 > 12): no new JobQueued.
    placed = {e.job_id: e for e in await decisions(event_log, topics) if isinstance(e, JobPlaced)}
    await pub.send(JobSucceeded(job_id="j2", cluster=placed["j2"].cluster))
    await pub.send(a_job("j4", gpus=8))

    async def j4_placed() -> bool:
        return any(isinstance(e, JobPlaced) and e.job_id == "j4" for e in await decisions(event_log, topics))

    await wait_for(j4_placed)
    stop.set()
    await task
    await host.close()
    await pub.close()

    events = await decisions(event_log, topics)
    queued = [e for e in events if isinstance(e, JobQueued)]
    assert [q.job_id for q in queued] == ["j3"]
    assert queued[0].why_not and queued[0].message
    cycles = [e for e in events if isinstance(e, SchedulingCycleCompleted)]
    assert [c.sequence for c in cycles] == list(range(len(cycles)))
    assert all(c.input_offsets and c.decisions_digest for c in cycles)

    report = await verify(event_log, topics=tuple(topics.name(t) for t in host_topics()))
    assert report.cycles == len(cycles) >= 2
    assert report.identical_pct == 100.0, report.differences


async def test_the_leader_folds_its_own_output_as_appended_and_never_places_a_job_twice(
    event_log: EventLog, make_topic: Callable[..., Awaitable[str]]
) -> None:
    topics, pub = await cluster_c1(event_log, make_topic)
    await pub.send(*(a_node(node=f"n{i}", gpus=8) for i in range(4)))
    host = host_for(event_log, topics, f"{topics.prefix}-sched")
    await host.start()
    stop = asyncio.Event()
    task = asyncio.create_task(host.run(stop))
    for batch in range(8):
        await pub.send(*(a_job(f"j{batch}-{k}", gpus=1) for k in range(3)))

        async def batch_placed(batch: int = batch) -> bool:
            placed = {e.job_id for e in await decisions(event_log, topics) if isinstance(e, JobPlaced)}
            return all(f"j{batch}-{k}" in placed for k in range(3))

        await wait_for(batch_placed)
    stop.set()
    await task
    await host.close()
    await pub.close()

    placements = [e.job_id for e in await decisions(event_log, topics) if isinstance(e, JobPlaced)]
    assert sorted(placements) == sorted(f"j{b}-{k}" for b in range(8) for k in range(3))
    # Cycles after the first follow their predecessor directly on the decisions partition.
    assert host.metrics.own_direct >= 1, (host.metrics.own_direct, host.metrics.own_read_back)
    report = await verify(event_log, topics=tuple(topics.name(t) for t in host_topics()))
    assert report.cycles >= 2
    assert report.identical_pct == 100.0, report.differences


def host_topics() -> tuple[str, ...]:
    from services.scheduler.core.decide import INPUT_TOPICS

    return INPUT_TOPICS


async def test_a_standby_takes_over_and_fences_the_old_leader(
    event_log: EventLog, make_topic: Callable[..., Awaitable[str]]
) -> None:
    topics, pub = await cluster_c1(event_log, make_topic)
    await pub.send(a_node(node="n1", gpus=8))
    txn = f"{topics.prefix}-sched"
    first, second = host_for(event_log, topics, txn), host_for(event_log, topics, txn)
    await first.start()
    await wait_for(first.is_leader)
    await second.start()
    assert not await second.is_leader()
    await first.close()  # the leader goes away; its group membership ends
    await wait_for(second.is_leader, timeout_s=60)
    await pub.send(a_job("j1", gpus=2))
    await second.follow()
    assert await second.cycle() == 1
    await second.close()
    await pub.close()
    placed = [e for e in await decisions(event_log, topics) if isinstance(e, JobPlaced)]
    assert [p.job_id for p in placed] == ["j1"]


async def test_a_follower_keeps_only_open_jobs(event_log: EventLog, make_topic: Callable[..., Awaitable[str]]) -> None:
    """A standby takes no snapshot; it still drops the jobs that ended for good as it folds them."""
    topics, pub = await cluster_c1(event_log, make_topic)
    await pub.send(a_node(node="n1", gpus=8), a_job("done", gpus=1), a_job("open", gpus=1))
    await pub.send(placed("done"), placed("open", gpus=(1,)), JobSucceeded(job_id="done", cluster="c1", run=1))
    host = host_for(event_log, topics, f"{topics.prefix}-sched")
    await host.start()
    try:
        await host.follow()
        assert set(host.state.jobs) == {"open"}
        assert host.state.settled == {"done"}
        assert host.state.running_count() == 1
    finally:
        await host.close()
        await pub.close()


class FlakyAppends:
    """The log, but the first ``failures`` transactional appends fail as Kafka's do when the broker is
    away (each also leaves its transaction unfinished, as a real outage may)."""

    def __init__(self, inner: EventLog, failures: int) -> None:
        self._inner = inner
        self.failures = failures

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def producer(self, transactional_id: str | None = None):  # type: ignore[no-untyped-def]
        real = await self._inner.producer(transactional_id)
        outer = self

        class Producer:
            def __getattr__(self, name: str) -> object:
                return getattr(real, name)

            async def append(self, records, offsets=None):  # type: ignore[no-untyped-def]
                if outer.failures > 0:
                    outer.failures -= 1
                    raise KafkaConnectionError("the broker went away")
                return await real.append(records, offsets=offsets)

        return Producer()


async def test_an_outage_of_the_log_makes_the_leader_start_over_not_exit(
    event_log: EventLog, make_topic: Callable[..., Awaitable[str]]
) -> None:
    topics, pub = await cluster_c1(event_log, make_topic)
    await pub.send(a_node(node="n1", gpus=8), a_job("j1", gpus=2))
    flaky = FlakyAppends(event_log, failures=2)
    host = SchedulerHost(flaky, namespace=topics.prefix, transactional_id=f"{topics.prefix}-sched")  # type: ignore[arg-type]
    await host.start()
    stop = asyncio.Event()
    task = asyncio.create_task(host.run(stop))

    async def placed() -> bool:
        assert not task.done(), task  # an outage must not end it
        return any(isinstance(e, JobPlaced) for e in await decisions(event_log, topics))

    await wait_for(placed, timeout_s=60)
    stop.set()
    await task
    await host.close()
    await pub.close()
    # Two streaks: the log answered the re-read between the two failed appends; health is ok again.
    assert flaky.failures == 0 and host.outage.streaks == 2 and host.outage.failing is None
    events = await decisions(event_log, topics)
    assert [e.job_id for e in events if isinstance(e, JobPlaced)] == ["j1"]  # once, though tried three times
    report = await verify(event_log, topics=tuple(topics.name(t) for t in host_topics()))
    assert report.identical_pct == 100.0, report.differences
