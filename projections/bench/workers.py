"""Running faust projection workers as processes, and knowing when they are done: for tests and the benchmark.

A worker is ``python -m services.cli.main projections worker ...`` in its own process (so SIGKILL is
a real crash), with its own app id, topic prefix and schema so runs never see each other. It is
*quiet* when its consumer group has committed, on every source and internal partition, the end of
that partition, read twice around the committed offsets (see ``wait_quiet``): everything read was
folded, sent on and written to PostgreSQL (a stage acknowledges only after both).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from events.log.contract import LogReader
from events.log.contract import TopicPartition as LogPartition
from projections.faust.config import WorkerConfig
from projections.stages.topology import default_stages

STAGES = tuple(stage.name for stage in default_stages())


@dataclass
class WorkerProcess:
    config: WorkerConfig
    log_path: Path
    extra: Sequence[str] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> None:
        c = self.config
        command = [
            sys.executable,
            "-m",
            "services.cli.main",
            "projections",
            "worker",
            "--log",
            f"kafka://{c.broker}",
            "--dsn",
            c.dsn,
            "--app-id",
            c.app_id,
            "--topic-prefix",
            c.topic_prefix,
            "--schema",
            c.schema,
            "--partitions",
            str(c.partitions),
            "--session-timeout-s",
            str(c.session_timeout_s),
            "--store",
            c.store,
            "--loglevel",
            "info",
            *(["--data-dir", str(c.data_dir)] if c.data_dir else []),
            *self.extra,
        ]
        handle = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=dict(os.environ))
        handle.close()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed or committed on the way out."""
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM: faust stops its agents, commits what they acknowledged and leaves the group."""
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
                raise

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def group_topics(config: WorkerConfig) -> list[str]:
    return [*config.source_topics, *(config.stage_topic(stage) for stage in STAGES)]


async def lag(config: WorkerConfig, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer) -> dict[str, int]:
    """Records not yet committed by the group, per topic, and the end offsets they were measured at."""
    tps = await _partitions(admin, group_topics(config))
    ends = await consumer.end_offsets(tps)
    committed = await admin.list_consumer_group_offsets(config.group)
    out: dict[str, int] = {}
    for tp in tps:
        done = committed[tp].offset if tp in committed and committed[tp].offset >= 0 else 0
        out[tp.topic] = out.get(tp.topic, 0) + max(0, ends[tp] - done)
    return out


async def wait_quiet(
    config: WorkerConfig,
    *,
    timeout_s: float,
    workers: Sequence[WorkerProcess] = (),
    topics: Sequence[str] | None = None,
) -> float:
    """Wait until the group has committed the end of every partition it reads (of ``topics`` only, if
    given); returns the seconds waited.

    The end offsets are read before and after the committed offsets and must agree with them: a record
    sent on after the first read shows in the second (its parent was acknowledged before the commit).
    A partition whose committed offset is short of the end by transaction markers only is done too."""
    from events.log.kafka import KafkaEventLog

    started = time.monotonic()
    admin = AIOKafkaAdminClient(bootstrap_servers=config.broker)
    consumer = AIOKafkaConsumer(bootstrap_servers=config.broker, isolation_level="read_committed")
    log = KafkaEventLog(config.broker)  # its reader tells a partition left with markers only
    await admin.start()
    await consumer.start()
    await log.start()
    reader = await log.reader()
    try:
        wanted = list(topics) if topics is not None else group_topics(config)
        while True:
            tps = await _partitions(admin, wanted)
            created = {tp.topic for tp in tps} == set(wanted)
            try:
                before = await consumer.end_offsets(tps)
                committed = await admin.list_consumer_group_offsets(config.group)
                after = await consumer.end_offsets(tps)
            except KafkaError:  # the group's coordinator may not be elected yet
                before, committed, after = {}, {}, {tp: -1 for tp in tps}
            short = {
                tp: committed[tp].offset
                for tp in tps
                if before.get(tp) == after[tp]
                and tp in committed
                and 0 < after[tp] - committed[tp].offset <= 2  # perhaps the markers of the last transactions
            }
            markers = {tp for tp, offset in short.items() if await _only_markers(reader, tp, offset)}
            done = all(
                before.get(tp) == after[tp]
                and (before[tp] == 0 or tp in markers or (tp in committed and committed[tp].offset == before[tp]))
                for tp in tps
            )
            if done and created:
                return time.monotonic() - started
            for worker in workers:
                if not worker.alive:
                    raise AssertionError(f"worker exited while waiting:\n{worker.tail()}")
            if time.monotonic() - started > timeout_s:
                missing = {str(tp): (committed.get(tp), after[tp]) for tp in tps if after[tp]}
                logs = "\n---\n".join(w.tail() for w in workers)
                raise TimeoutError(f"not quiet after {timeout_s} s: {missing}\n{logs}")
            await asyncio.sleep(0.2)
    finally:
        await reader.close()
        await log.close()
        await consumer.stop()
        await admin.close()


async def _only_markers(reader: LogReader, tp: TopicPartition, offset: int) -> bool:
    """Nothing but transaction markers from ``offset`` to the end (a group never commits past the marker
    of a transaction it has read to the end of)."""
    try:
        return await reader.caught_up(LogPartition(tp.topic, tp.partition), offset)
    except KafkaError:
        return False


async def wait_members(config: WorkerConfig, count: int, *, timeout_s: float) -> None:
    """Wait until ``count`` workers are members of the group and it is stable."""
    admin = AIOKafkaAdminClient(bootstrap_servers=config.broker)
    await admin.start()
    started = time.monotonic()
    try:
        while True:
            try:
                described = await admin.describe_consumer_groups([config.group])
            except KafkaError:  # the group's coordinator may not be elected yet (a fresh broker)
                described = []
            group = described[0].groups[0] if described and described[0].groups else None
            if group is not None and group[2] == "Stable" and len(group[5]) == count:
                return
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"group {config.group} did not reach {count} stable members: {group}")
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def _partitions(admin: AIOKafkaAdminClient, topics: list[str]) -> list[TopicPartition]:
    described = await admin.describe_topics(topics)
    return [TopicPartition(item["topic"], p["partition"]) for item in described for p in item.get("partitions", [])]
