"""Helpers of the end-to-end tests on ``fedsched up``'s embedded stack: a free port for its API, the stack
with an API client for the length of a block, waiting for a condition with a timeout, the log's whole
history, and ``audit verify`` over it once the stack has stopped. Called by the ``tests/services/test_up_*``
modules; calls ``services.runtime.up``, the API client, the log adapters and the verifier."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from events.catalog.topics import AUDIT, TOPICS
from events.log.contract import EventLog, TopicPartition
from events.log.postgres import PostgresEventLog
from events.log.reading import read_to_end
from events.wire.codec import decode
from events.wire.envelope import Envelope
from services.api.client import Client, ClientConfig
from services.audit.verify import VerifyReport, verify
from services.runtime import up


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def one_cluster(dsn: str, tmp_path: Path, nodes: str, speed: float) -> up.UpConfig:
    """``fedsched up`` with one simulated cluster, ``sim-1``, of the YAML node list ``nodes``, at ``speed``
    times real time, its API on a free port and its data under ``tmp_path``."""
    listing = tmp_path / "nodes.yaml"
    listing.write_text(nodes)
    return up.UpConfig(
        data_dir=tmp_path / "data",
        dsn=dsn,
        metrics_listen="127.0.0.1:0",
        sim_clusters=("sim-1",),
        sim_nodes=listing,
        sim_speed=speed,
        api_listen=f"127.0.0.1:{free_port()}",
    )


@contextlib.asynccontextmanager
async def stack(config: up.UpConfig) -> AsyncIterator[tuple[up.Running, Client]]:
    """``fedsched up`` with ``config`` and a client of its API (as its operator, with the stack's token),
    both closed when the block ends however it ends."""
    running = await up.start(config)
    client = Client(ClientConfig(server=config.api_listen, token=running.api_token))
    try:
        yield running, client
    finally:
        await client.close()
        await up.stop(running)


async def wait_for(predicate: Any, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.2)


async def history(event_log: EventLog) -> list[Envelope]:
    reader = await event_log.reader()
    out: list[Envelope] = []
    try:
        for spec in TOPICS:
            if spec is AUDIT:  # the archiver's signed checkpoints: records, not catalogue events
                continue
            for partition in range(spec.partitions):
                async for batch in read_to_end(reader, TopicPartition(spec.name, partition)):
                    out += [decode(r.headers, r.value) for r in batch]
    finally:
        await reader.close()
    return out


async def verified_history(dsn: str) -> tuple[VerifyReport, list[Envelope]]:
    """``audit verify`` over the embedded log at ``dsn`` and every event in it."""
    log = PostgresEventLog(dsn)
    await log.start()
    try:
        return await verify(log), await history(log)
    finally:
        await log.close()
