"""A writer SIGKILLed in the middle of a transactional append leaves nothing partial behind."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

from events.log import EventLog, OutRecord, TopicPartition
from tests.contract.test_log_contract import MakeTopic, txn_id

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.chaos]

ROOT = Path(__file__).resolve().parents[2]
BATCH = 1500
PARTITIONS = 3


async def test_a_writer_killed_mid_transaction_leaves_nothing_partial(
    event_log: EventLog, make_topic: MakeTopic, log_url: str
) -> None:
    topic = await make_topic(PARTITIONS)
    writer_id = txn_id("killed")
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.contract.killed_writer",
        log_url,
        topic,
        writer_id,
        str(BATCH),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    committed = -1
    try:
        while committed < 2:
            line = await asyncio.wait_for(child.stdout.readline(), timeout=60)
            assert line, "the writer exited before committing three batches"
            committed = int(line.split()[1])
        # The writer has already begun the next batch: kill it in the middle of that transaction.
        child.send_signal(signal.SIGKILL)
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()

    # A successor with the same transactional id recovers (Kafka aborts the open transaction).
    successor = await event_log.producer(writer_id)
    await successor.append([OutRecord(topic, value=b"marker", key=b"marker")])
    await successor.close()

    reader = await event_log.reader()
    values: list[bytes] = []
    try:
        for partition in range(PARTITIONS):
            tp = TopicPartition(topic, partition)
            end = await reader.end_offset(tp)
            position = 0
            while position < end:
                batch = await reader.read(tp, position, max_records=2000, timeout_s=1.0)
                if not batch:
                    break
                position = batch[-1].offset + 1
                values += [r.value for r in batch]
    finally:
        await reader.close()

    assert b"marker" in values
    per_batch = Counter(int(v.split(b":")[0]) for v in values if v != b"marker")
    assert set(range(committed + 1)) <= set(per_batch), "a committed batch is missing"
    partial = {batch: count for batch, count in per_batch.items() if count != BATCH}
    assert partial == {}, f"partial batches visible after the kill: {partial}"
