"""The EventLog contract: every test here runs on real Kafka and on the embedded PostgreSQL log."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Awaitable, Callable

import pytest

from events.log import EventLog, GroupOffsets, LogRecord, OutRecord, ProducerFenced, TopicPartition
from events.log.postgres import PostgresEventLog
from events.log.reading import EndWatch, read_to_end

pytestmark = pytest.mark.asyncio(loop_scope="session")

MakeTopic = Callable[..., Awaitable[str]]
_txn_ids = itertools.count()


def txn_id(name: str) -> str:
    return f"contract-{name}-{next(_txn_ids)}-{id(object())}"


async def read_all(
    log: EventLog, topic: str, partitions: int, *, expect: int, timeout_s: float = 20.0
) -> list[LogRecord]:
    """Every committed record of a topic, following offset + 1, until ``expect`` were seen."""
    reader = await log.reader()
    out: list[LogRecord] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        positions = dict.fromkeys(range(partitions), 0)
        while len(out) < expect and loop.time() < deadline:
            for partition in range(partitions):
                tp = TopicPartition(topic, partition)
                batch = await reader.read(tp, positions[partition], max_records=1000, timeout_s=0.05)
                if batch:
                    positions[partition] = batch[-1].offset + 1
                    out.extend(batch)
    finally:
        await reader.close()
    return out


def dense(log: EventLog) -> bool:
    return isinstance(log, PostgresEventLog)


async def test_records_with_one_key_keep_their_order(event_log: EventLog, make_topic: MakeTopic) -> None:
    topic = await make_topic(3)
    producer = await event_log.producer()
    keys = [f"job-{k}".encode() for k in range(8)]
    records = [OutRecord(topic, value=f"{i}".encode(), key=keys[i % 8]) for i in range(400)]
    for start in range(0, 400, 50):
        await producer.append(records[start : start + 50])
    await producer.close()

    seen = await read_all(event_log, topic, 3, expect=400)
    by_key: dict[bytes, list[int]] = defaultdict(list)
    for record in seen:
        assert record.key is not None
        by_key[record.key].append(int(record.value))
    assert sorted(by_key) == sorted(keys)
    for key, values in by_key.items():
        assert values == sorted(values), f"order broken for {key!r}"
        assert len(values) == 50


async def test_offsets_increase_and_replay_from_zero_is_identical(event_log: EventLog, make_topic: MakeTopic) -> None:
    topic = await make_topic(1)
    producer = await event_log.producer(txn_id("offsets"))
    for batch in range(10):
        await producer.append([OutRecord(topic, value=f"{batch}-{i}".encode(), key=b"k") for i in range(7)])
    await producer.close()

    first = await read_all(event_log, topic, 1, expect=70)
    second = await read_all(event_log, topic, 1, expect=70)
    offsets = [record.offset for record in first]
    assert len(first) == 70
    assert all(a < b for a, b in itertools.pairwise(offsets))
    if dense(event_log):
        assert offsets == list(range(70))
    assert [(r.offset, r.key, r.value, r.headers) for r in first] == [
        (r.offset, r.key, r.value, r.headers) for r in second
    ]
    assert [r.value.decode() for r in first] == [f"{b}-{i}" for b in range(10) for i in range(7)]


async def test_headers_keys_and_values_round_trip_byte_for_byte(event_log: EventLog, make_topic: MakeTopic) -> None:
    topic = await make_topic(1)
    producer = await event_log.producer()
    headers = (("ce_type", b"io.fedsched.Test"), ("bin", bytes(range(256))), ("empty", b""))
    value = bytes(range(256)) * 4
    [position] = await producer.append([OutRecord(topic, value=value, key=b"\x00key", headers=headers)])
    [record] = await read_all(event_log, topic, 1, expect=1)
    assert (record.offset, record.key, record.value, record.headers) == (position.offset, b"\x00key", value, headers)
    assert record.header("bin") == bytes(range(256))


async def test_an_aborted_transaction_is_never_visible(event_log: EventLog, make_topic: MakeTopic) -> None:
    topic = await make_topic(2)
    producer = await event_log.producer(txn_id("abort"))

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        async with producer.transaction() as tx:
            await tx.append([OutRecord(topic, value=b"aborted", key=f"k{i}".encode()) for i in range(20)])
            raise Abort
    await producer.append([OutRecord(topic, value=b"committed", key=f"k{i}".encode()) for i in range(20)])
    await producer.close()

    seen = await read_all(event_log, topic, 2, expect=20)
    # Give a late aborted record every chance to show up before concluding it does not.
    seen += await read_all(event_log, topic, 2, expect=21, timeout_s=1.0)
    assert {record.value for record in seen} == {b"committed"}


async def test_records_and_group_offsets_commit_together(event_log: EventLog, make_topic: MakeTopic) -> None:
    source, out_a, out_b = await make_topic(1), await make_topic(1), await make_topic(2)
    producer = await event_log.producer(txn_id("offsets-with-records"))
    await producer.append([OutRecord(source, value=b"input")])
    group = f"group-{source}"
    tp = TopicPartition(source, 0)

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        async with producer.transaction() as tx:
            await tx.append([OutRecord(out_a, value=b"x")])
            await tx.commit_offsets(GroupOffsets(group, {tp: 1}))
            raise Abort
    consumer = await event_log.group_consumer(group, [source])
    try:
        assert await consumer.committed(tp) is None
    finally:
        await consumer.close()

    appended = await producer.append(
        [OutRecord(out_a, value=b"a"), OutRecord(out_b, value=b"b", key=b"kb")],
        offsets=GroupOffsets(group, {tp: 1}),
    )
    await producer.close()
    assert [a.topic for a in appended] == [out_a, out_b]
    consumer = await event_log.group_consumer(group, [source])
    try:
        assert await consumer.committed(tp) == 1
    finally:
        await consumer.close()
    assert [r.value for r in await read_all(event_log, out_a, 1, expect=1)] == [b"a"]
    assert [r.value for r in await read_all(event_log, out_b, 2, expect=1)] == [b"b"]


async def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    topic = await make_topic(1)
    shared_id = txn_id("fence")
    first = await event_log.producer(shared_id)
    await first.append([OutRecord(topic, value=b"first-before")])
    second = await event_log.producer(shared_id)
    with pytest.raises(ProducerFenced):
        await first.append([OutRecord(topic, value=b"first-after")])
    with pytest.raises(ProducerFenced):  # and it stays fenced
        await first.append([OutRecord(topic, value=b"first-again")])
    await second.append([OutRecord(topic, value=b"second")])
    await first.close()
    await second.close()
    seen = await read_all(event_log, topic, 1, expect=2)
    seen += await read_all(event_log, topic, 1, expect=3, timeout_s=1.0)
    assert sorted({r.value for r in seen}) == [b"first-before", b"second"]


async def test_two_concurrent_writers_leave_no_gap_for_a_tailing_reader(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    topic = await make_topic(1)
    per_writer = 1000
    tp = TopicPartition(topic, 0)
    reader = await event_log.reader()
    seen: list[LogRecord] = []

    async def tail() -> None:
        position = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while len(seen) < 2 * per_writer and loop.time() < deadline:
            batch = await reader.read(tp, position, max_records=500, timeout_s=0.2)
            if batch:
                position = batch[-1].offset + 1
                seen.extend(batch)

    async def write(name: str) -> None:
        producer = await event_log.producer()
        try:
            for i in range(per_writer):
                await producer.append([OutRecord(topic, value=f"{name}-{i}".encode())])
        finally:
            await producer.close()

    await asyncio.gather(tail(), write("a"), write("b"))
    await reader.close()
    values = [r.value.decode() for r in seen]
    assert len(values) == 2 * per_writer
    assert len(set(values)) == 2 * per_writer
    for name in ("a", "b"):
        mine = [int(v.split("-")[1]) for v in values if v.startswith(name)]
        assert mine == list(range(per_writer))
    offsets = [r.offset for r in seen]
    assert all(a < b for a, b in itertools.pairwise(offsets))
    if dense(event_log):
        assert offsets == list(range(2 * per_writer))


async def test_group_members_share_partitions_and_resume_from_committed_offsets(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    topic = await make_topic(4)
    group = f"group-{topic}"
    producer = await event_log.producer()
    await producer.append([OutRecord(topic, value=f"{i}".encode(), key=f"k{i}".encode()) for i in range(100)])

    first = await event_log.group_consumer(group, [topic])
    got: list[LogRecord] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while len(got) < 100 and loop.time() < deadline:
        got += await first.poll(max_records=30, timeout_s=0.5)
    assert sorted(int(r.value) for r in got) == list(range(100))
    assert first.assignment() == frozenset(TopicPartition(topic, p) for p in range(4))
    ends: dict[TopicPartition, int] = {}
    for record in got:
        ends[record.tp] = max(ends.get(record.tp, 0), record.offset + 1)
    await first.commit(ends)
    await first.close()

    # Two new members settle on disjoint shares first; then they see only what comes after the
    # commit, each record once.
    members = [await event_log.group_consumer(group, [topic]) for _ in range(2)]
    later: list[LogRecord] = []
    deadline = loop.time() + 30
    while loop.time() < deadline:
        for member in members:
            later += await member.poll(max_records=50, timeout_s=0.1)
        assignments = [m.assignment() for m in members]
        if all(assignments) and not (assignments[0] & assignments[1]) and len(assignments[0] | assignments[1]) == 4:
            break
    assert later == [], "records before the committed offsets were delivered again"
    await producer.append([OutRecord(topic, value=f"{i}".encode(), key=f"k{i}".encode()) for i in range(100, 140)])
    await producer.close()
    deadline = loop.time() + 30
    while len(later) < 40 and loop.time() < deadline:
        for member in members:
            later += await member.poll(max_records=50, timeout_s=0.1)
    assert sorted(int(r.value) for r in later) == list(range(100, 140))
    assert members[0].assignment() | members[1].assignment() == frozenset(TopicPartition(topic, p) for p in range(4))
    assert not members[0].assignment() & members[1].assignment()
    for member in members:
        await member.close()


async def test_a_tail_follows_many_partitions_from_given_offsets_and_wakes_on_a_commit(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    first, second = await make_topic(3), await make_topic(1)
    producer = await event_log.producer(txn_id("tail"))
    written = await producer.append(
        [OutRecord(first, value=f"a{i}".encode(), key=f"k{i}".encode()) for i in range(60)]
        + [OutRecord(second, value=f"b{i}".encode()) for i in range(10)]
    )
    by_tp: dict[TopicPartition, list[int]] = defaultdict(list)
    for position in written:
        by_tp[TopicPartition(position.topic, position.partition)].append(position.offset)
    # Start each partition after its first two records: those must never come back.
    start = {tp: sorted(offsets)[2] for tp, offsets in by_tp.items()}
    tail = await event_log.tail(start)
    loop = asyncio.get_running_loop()
    got: list[LogRecord] = []
    try:
        deadline = loop.time() + 20
        while len(got) < 70 - 2 * len(start) and loop.time() < deadline:
            got += await tail.poll(max_records=7, timeout_s=0.5)
        expected = {(tp, o) for tp, offsets in by_tp.items() for o in sorted(offsets)[2:]}
        assert {(r.tp, r.offset) for r in got} == expected
        for tp in by_tp:
            mine = [r.offset for r in got if r.tp == tp]
            assert mine == sorted(mine)
            assert tail.position(tp) == max(by_tp[tp]) + 1

        class Abort(Exception):
            pass

        with pytest.raises(Abort):
            async with producer.transaction() as tx:
                await tx.append([OutRecord(second, value=b"aborted")])
                raise Abort
        # A poll that waits returns as soon as a commit lands on any partition of the tail.
        waiting = asyncio.ensure_future(tail.poll(timeout_s=20))
        await producer.append([OutRecord(first, value=b"late", key=b"k-late")])
        late: list[LogRecord] = await waiting
        deadline = loop.time() + 20
        while not any(r.value == b"late" for r in late) and loop.time() < deadline:
            late += await tail.poll(timeout_s=0.5)
        assert [r.value for r in late] == [b"late"]
    finally:
        await tail.close()
        await producer.close()


async def test_a_tail_with_snapshot_reads_never_returns_a_commit_before_an_earlier_one(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    """``snapshot_reads`` (the embedded log): every poll reads all the tail's partitions in one snapshot,
    so what the polls have returned is always the first commits, whatever partitions they went to.
    Kafka fetches partition by partition and does not claim it."""
    assert event_log.snapshot_reads is dense(event_log)
    if not event_log.snapshot_reads:
        return
    topic = await make_topic(2)
    producer = await event_log.producer()
    tail = await event_log.tail({TopicPartition(topic, 0): 0, TopicPartition(topic, 1): 0})
    commits = 200

    async def write() -> None:
        for i in range(commits):  # one commit after the other, alternating partitions
            await producer.append([OutRecord(topic, value=str(i).encode(), partition=i % 2)])

    writer = asyncio.ensure_future(write())
    seen: list[int] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while len(seen) < commits and loop.time() < deadline:
            seen += [int(r.value) for r in await tail.poll(max_records=1000, timeout_s=0.05)]
            assert sorted(seen) == list(range(len(seen)))
        assert len(seen) == commits
        await writer
    finally:
        writer.cancel()
        await tail.close()
        await producer.close()


async def test_a_membership_only_member_holds_its_partitions_and_reads_nothing(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    topic = await make_topic(1)
    producer = await event_log.producer()
    await producer.append([OutRecord(topic, value=f"{i}".encode(), key=b"k") for i in range(20)])
    await producer.close()
    group = f"leader-{topic}"
    member = await event_log.group_consumer(group, [topic], records=False)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    seen: list[LogRecord] = []
    while not member.assignment() and loop.time() < deadline:
        seen += await member.poll(timeout_s=0.2)
    assert member.assignment() == frozenset({TopicPartition(topic, 0)})
    for _ in range(5):
        seen += await member.poll(timeout_s=0.1)
    assert seen == []
    # A reading member of another group still gets every record: the topic was not consumed.
    reader = await event_log.group_consumer(f"reader-{topic}", [topic])
    got: list[LogRecord] = []
    deadline = loop.time() + 30
    while len(got) < 20 and loop.time() < deadline:
        got += await reader.poll(timeout_s=0.2)
    assert [int(r.value) for r in got] == list(range(20))
    await reader.close()
    await member.close()


async def test_end_offsets_of_several_partitions_at_once_equal_each_partitions_own(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    topic = await make_topic(3)
    other = await make_topic(1)
    producer = await event_log.producer(txn_id("ends"))
    await producer.append([OutRecord(topic, value=f"{i}".encode(), key=f"k{i}".encode()) for i in range(20)])
    await producer.append([OutRecord(other, value=b"x", key=b"k")])
    await producer.close()
    tps = [TopicPartition(topic, p) for p in range(3)] + [TopicPartition(other, 0)]
    reader = await event_log.reader()
    try:
        records = await read_all(event_log, topic, 3, expect=20)  # readable (Kafka: a moment after the commit)
        await read_all(event_log, other, 1, expect=1)
        ends = await reader.end_offsets(tps)
        assert ends == {tp: await reader.end_offset(tp) for tp in tps}
        assert sum(ends[TopicPartition(topic, p)] for p in range(3)) >= len(records) == 20
        assert ends[TopicPartition(other, 0)] >= 1
        assert await reader.end_offsets([]) == {}
    finally:
        await reader.close()


async def test_an_end_watch_reads_a_partition_again_only_when_something_came_past_its_markers(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    topic = await make_topic(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    producer = await event_log.producer(txn_id("watch"))  # transactional: on Kafka each ends on a marker
    await producer.append([OutRecord(topic, value=f"{i}".encode(), key=f"k{i}".encode()) for i in range(12)])
    reader = await event_log.reader()
    watch = EndWatch()
    positions = dict.fromkeys(tps, 0)
    try:

        async def follow() -> int:
            read = 0
            for tp, end in (await watch.ahead(reader, positions)).items():
                async for batch in read_to_end(reader, tp, positions[tp], end=end):
                    read += len(batch)
                    positions[tp] = batch[-1].offset + 1
                watch.reached(tp, positions[tp], end)
            return read

        await read_all(event_log, topic, 2, expect=12)  # readable (Kafka: a moment after the commit)
        assert await follow() == 12
        assert await watch.ahead(reader, positions) == {}  # only markers past the positions, if anything
        await producer.append([OutRecord(topic, value=b"late", key=b"k0")])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not (ahead := await watch.ahead(reader, positions)):  # Kafka: readable a moment after the commit
            assert loop.time() < deadline, "the late record never showed past the markers"
            await asyncio.sleep(0.02)
        assert len(ahead) == 1 and await follow() == 1
        assert await watch.ahead(reader, positions) == {}
    finally:
        await producer.close()
        await reader.close()
