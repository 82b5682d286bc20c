"""Watches share one reader per partition (``services.api.watch_tails``) and each still sees exactly its
own job's events, in order, whatever offset it starts from. On a log in memory whose reads wait for
appends as the real ones do, with offsets left unused as transaction markers leave them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

import pytest

from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
from events.catalog.jobs import JobStarted, JobSucceeded
from events.catalog.topics import DECISIONS, JOBS, partition_for
from events.log.contract import LogRecord, TopicPartition
from events.wire.codec import encode
from events.wire.envelope import Envelope
from services.api import watch, watch_tails
from services.api.pb import jobs_pb2
from services.api.watch_tails import WatchTails

PARTITIONS = 4
DECISIONS_TP = TopicPartition(DECISIONS.name, 0)


class GrowingLog:
    """Partitions in memory; a read waits up to its timeout for a record; counts the readers opened."""

    commit_markers = True

    def __init__(self) -> None:
        self.records: dict[TopicPartition, list[LogRecord]] = {}
        self.ends: dict[TopicPartition, int] = {}
        self.opened = 0
        self.open = 0
        self.failing: set[TopicPartition] = set()
        self._grown = asyncio.Event()
        self._ids = itertools.count()

    async def partitions(self, topic: str) -> int:
        return PARTITIONS if topic == JOBS.name else 1

    async def reader(self) -> Reader:
        self.opened += 1
        self.open += 1
        return Reader(self)

    def append(self, event: object, *, markers: int = 0) -> LogRecord:
        """One record, after ``markers`` unused offsets (the commit markers of earlier transactions)."""
        wire = encode(Envelope(id=f"e-{next(self._ids)}", time_ms=1_767_225_600_000, data=event))  # type: ignore[arg-type]
        partitions = PARTITIONS if wire.topic == JOBS.name else 1
        tp = TopicPartition(wire.topic, partition_for(wire.key, partitions))
        offset = self.ends.get(tp, 0) + markers
        record = LogRecord(tp.topic, tp.partition, offset, wire.key, wire.value, wire.headers, 0)
        self.records.setdefault(tp, []).append(record)
        self.ends[tp] = offset + 1
        grown, self._grown = self._grown, asyncio.Event()
        grown.set()
        return record

    def after(self, tp: TopicPartition, offset: int) -> list[LogRecord]:
        return [r for r in self.records.get(tp, []) if r.offset >= offset]


class Reader:
    def __init__(self, log: GrowingLog) -> None:
        self._log = log
        self.reads = 0

    async def read(
        self, tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0
    ) -> list[LogRecord]:
        self.reads += 1
        if tp in self._log.failing:
            raise ConnectionError(f"{tp} is unreachable")
        found = self._log.after(tp, offset)
        if not found and timeout_s > 0:
            grown = self._log._grown
            try:
                await asyncio.wait_for(grown.wait(), timeout_s)
            except TimeoutError:
                return []
            found = self._log.after(tp, offset)
        return found[:max_records]

    async def end_offset(self, tp: TopicPartition) -> int:
        return self._log.ends.get(tp, 0) + 1  # past a last marker, as on Kafka

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: await self.end_offset(tp) for tp in tps}

    async def caught_up(self, tp: TopicPartition, offset: int) -> bool:
        return not self._log.after(tp, offset)

    async def close(self) -> None:
        self._log.open -= 1


def jobs_tp(job_id: str) -> TopicPartition:
    return TopicPartition(JOBS.name, partition_for(job_id.encode(), PARTITIONS))


def placed(job_id: str) -> JobPlaced:
    replica = ReplicaPlacement(replica=0, node="n1", gpu_indices=(0,), gpu_milli_each=1000)
    chosen = CandidateScore(cluster="east", total=1)
    return JobPlaced(job_id=job_id, cycle_id="c", cluster="east", replicas=(replica,), chosen=chosen, explanation="x")


async def watch_to_end(tails: WatchTails, job_id: str, starts: dict[TopicPartition, int]) -> list[str]:
    reader = tails.reader()
    try:
        seen: list[jobs_pb2.JobEvent] = []
        async for event in watch.live(reader, job_id, list(starts.items()), "queued", False):  # type: ignore[arg-type]
            seen.append(event)
        return [f"{e.event}:{e.event_id}" for e in seen]
    finally:
        await reader.close()


def expected(log: GrowingLog, job_id: str, starts: dict[TopicPartition, int]) -> list[str]:
    """The job's events from ``starts``, jobs partition then decisions, as the records say."""
    out = []
    for tp, offset in starts.items():
        for record in log.after(tp, offset):
            if record.key == job_id.encode():
                envelope = watch._event(record, watch._Job(job_id, spread=False))
                assert envelope is not None
                out.append(f"{envelope.event}:{envelope.event_id}")
    return out


async def until(condition: object, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_twenty_watches_share_one_reader_per_partition_and_each_sees_exactly_its_job() -> None:
    log = GrowingLog()
    tails = WatchTails(log)  # type: ignore[arg-type]
    jobs = [f"job-{i:02d}" for i in range(20)]
    starts = {job: {jobs_tp(job): 0, DECISIONS_TP: 0} for job in jobs}
    watches = [asyncio.create_task(watch_to_end(tails, job, starts[job])) for job in jobs]
    await until(lambda: tails.watching == 2 * len(jobs))
    for round_ in range(3):  # placed, started, then succeeded: interleaved across jobs, with markers
        for i, job in enumerate(jobs):
            markers = (i + round_) % 3
            if round_ == 0:
                log.append(placed(job), markers=markers)
            elif round_ == 1:
                log.append(JobStarted(job_id=job, cluster="east"), markers=markers)
            else:
                log.append(JobSucceeded(job_id=job, cluster="east"), markers=markers)
        await asyncio.sleep(0)
    results = await asyncio.wait_for(asyncio.gather(*watches), 30)

    for job, seen in zip(jobs, results, strict=True):
        # Jobs partition first, then decisions: live() delivers what each partition holds on the final event.
        assert sorted(seen) == sorted(expected(log, job, starts[job])), job
        assert [s.split(":")[0] for s in seen if not s.startswith("JobPlaced")] == ["JobStarted", "JobSucceeded"]
        assert sum(s.startswith("JobPlaced") for s in seen) == 1
    # One reader per partition read (at most 4 job partitions and the decisions one) and one for end
    # offsets, where each watch used to open its own.
    assert log.opened <= PARTITIONS + 2
    assert tails.partitions == 0 and tails.watching == 0  # every tail stopped with its last watch
    await tails.close()
    assert log.open == 0


@pytest.mark.asyncio
async def test_a_watch_that_starts_behind_the_window_reads_on_its_own_until_it_reaches_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watch_tails, "WINDOW", 4)
    log = GrowingLog()
    tails = WatchTails(log)  # type: ignore[arg-type]
    first, late = "job-a", "job-late"
    tp = jobs_tp(first)
    while jobs_tp(late) != tp:  # both jobs on one partition
        late += "x"
    ahead = tails.reader()
    log.append(JobStarted(job_id=late, cluster="east"))
    for i in range(30):
        log.append(JobStarted(job_id=first, cluster="east", run=i + 1), markers=i % 2)
    log.append(JobSucceeded(job_id=late, cluster="east"), markers=1)
    # A watch reading as far as the log goes makes the window drop what every watch has read.
    offset = 0
    while offset < log.ends[tp]:
        records = await ahead.read(tp, offset, max_records=3, timeout_s=1)
        offset = records[-1].offset + 1
    tail = tails._tails[tp]
    assert tail.first > 0 and len(tail.records) <= 2 * watch_tails.WINDOW
    opened = log.opened

    seen = await asyncio.wait_for(watch_to_end(tails, late, {tp: 0}), 30)

    assert seen == expected(log, late, {tp: 0}) and len(seen) == 2
    # A reader of its own for the part behind the window, and the one for end offsets (asked once its
    # job ended): the shared tail was not restarted from the watch's old position.
    assert log.opened == opened + 2 and tails.partitions == 1
    await ahead.close()
    await tails.close()
    assert log.open == 0


@pytest.mark.asyncio
async def test_a_failing_partition_ends_its_watches_with_the_error_and_a_later_watch_starts_afresh() -> None:
    log = GrowingLog()
    tails = WatchTails(log)  # type: ignore[arg-type]
    job = "job-f"
    tp = jobs_tp(job)
    log.failing.add(tp)
    with pytest.raises(ConnectionError, match="unreachable"):
        await asyncio.wait_for(watch_to_end(tails, job, {tp: 0}), 10)
    log.failing.clear()
    log.append(JobSucceeded(job_id=job, cluster="east"))
    seen = await asyncio.wait_for(watch_to_end(tails, job, {tp: 0}), 10)
    assert [s.split(":")[0] for s in seen] == ["JobSucceeded"]
    await tails.close()
    assert log.open == 0
