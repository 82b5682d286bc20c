"""Bad records go to the dead-letter topic with the reason; good ones are handled; nothing is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from events.catalog.jobs import JobStarted
from events.catalog.topics import DEAD_LETTERS, TOPICS
from events.hosting.consumer import EventConsumer
from events.log import EventLog, LogRecord, OutRecord, TopicPartition
from events.log.deadletter import CODE, GROUP, REASON, SOURCE
from events.wire import codec
from events.wire.envelope import Envelope

pytestmark = pytest.mark.asyncio(loop_scope="session")

MakeTopic = Callable[..., Awaitable[str]]


def good(i: int, topic: str) -> OutRecord:
    wire = codec.encode(
        Envelope(id=f"e-{i}", time_ms=1_700_000_000_000 + i, data=JobStarted(job_id=f"job-{i}", cluster="c1"))
    )
    return OutRecord(topic, value=wire.value, key=wire.key, headers=wire.headers)


async def poll_until(consumer: EventConsumer, done: Callable[[int], bool], timeout_s: float = 30.0) -> int:
    """Poll until ``done(dead-lettered so far)``; returns how many were dead-lettered."""
    dead = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not done(dead) and loop.time() < deadline:
        dead += (await consumer.poll_once(timeout_s=0.5)).dead_lettered
    return dead


def with_headers(record: OutRecord, **changes: bytes) -> OutRecord:
    headers = tuple((k, changes.get(k, v)) for k, v in record.headers)
    return OutRecord(record.topic, value=record.value, key=record.key, headers=headers)


async def test_bad_records_are_dead_lettered_with_the_reason_and_processing_goes_on(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    await event_log.create_topics(TOPICS)
    topic = await make_topic(1)
    dlq_start = await (await event_log.reader()).end_offset(TopicPartition(DEAD_LETTERS.name, 0))
    bad_payload = good(1, topic)
    records = [
        good(0, topic),
        OutRecord(
            topic,
            value=bad_payload.value.replace(b'"cluster":"c1"', b'"cluster":"C 1!"'),
            key=b"job-1",
            headers=bad_payload.headers,
        ),
        with_headers(good(2, topic), ce_type=b"io.fedsched.NoSuchEvent"),
        with_headers(good(3, topic), ce_schemaversion=b"99"),
        OutRecord(topic, value=b"\xff not json", key=b"job-4", headers=good(4, topic).headers),
        OutRecord(topic, value=b"{}", key=b"job-5"),
        good(6, topic),
    ]
    producer = await event_log.producer()
    await producer.append(records)
    await producer.close()

    handled: list[str] = []

    async def handler(record: LogRecord, envelope: Envelope) -> None:
        handled.append(envelope.id)

    group = f"dlq-test-{topic}"
    consumer = EventConsumer(event_log, group, [topic], handler)
    await consumer.start()
    dead = await poll_until(consumer, lambda dead: len(handled) + dead >= 7)
    await consumer.close()
    assert handled == ["e-0", "e-6"]
    assert dead == 5

    reader = await event_log.reader()
    letters = [
        r
        for r in await reader.read(TopicPartition(DEAD_LETTERS.name, 0), dlq_start, max_records=1000, timeout_s=5)
        if r.header(GROUP) == group.encode()
    ]
    await reader.close()
    reasons = {
        int(r.header(SOURCE).split(b"/")[-1]): (r.header(CODE).decode(), r.header(REASON).decode()) for r in letters
    }
    assert sorted(reasons) == [1, 2, 3, 4, 5]
    assert reasons[1][0] == "InvalidEvent" and "'cluster'" in reasons[1][1]
    assert reasons[2][0] == "UnknownEventType" and "io.fedsched.NoSuchEvent" in reasons[2][1]
    assert reasons[3][0] == "UnsupportedSchemaVersion" and "99" in reasons[3][1]
    assert reasons[4][0] in ("MalformedRecord", "InvalidEvent") and "data" in reasons[4][1]
    assert reasons[5][0] == "MalformedRecord" and "ce_id" in reasons[5][1]
    # The original bytes are kept whole, so the record can be replayed after a fix.
    by_offset = {int(r.header(SOURCE).split(b"/")[-1]): r for r in letters}
    assert by_offset[4].value == b"\xff not json"

    # The group's position moved past everything: a restart handles nothing again.
    again = EventConsumer(event_log, group, [topic], handler)
    await again.start()
    assert (await again.poll_once(timeout_s=0.5)).handled == 0
    await again.close()


async def test_types_a_consumer_skips_are_passed_over_undecoded_and_the_rest_handled(
    event_log: EventLog, make_topic: MakeTopic
) -> None:
    await event_log.create_topics(TOPICS)
    topic = await make_topic(1)
    skipped = "io.fedsched.JobQueued"
    records = [
        good(0, topic),
        # Named as a skipped type, with a body no decoder would take: never decoded, never dead-lettered.
        with_headers(OutRecord(topic, b"\xff not json", b"job-1", good(1, topic).headers), ce_type=skipped.encode()),
        OutRecord(topic, value=b"{}", key=b"job-2"),  # no ce_type header: decoded, and dead-lettered
        good(3, topic),
    ]
    producer = await event_log.producer()
    await producer.append(records)
    await producer.close()
    handled: list[str] = []

    async def handler(record: LogRecord, envelope: Envelope) -> None:
        handled.append(envelope.id)

    consumer = EventConsumer(event_log, f"skip-test-{topic}", [topic], handler, skip_types=frozenset({skipped}))
    await consumer.start()
    dead = await poll_until(consumer, lambda dead: len(handled) + dead >= 3)
    # The group moved past the skipped one too: nothing comes again.
    assert (await consumer.poll_once(timeout_s=0.5)).handled == 0
    await consumer.close()
    assert handled == ["e-0", "e-3"] and dead == 1
