"""What travels on the faust host's internal topics: batches of stage inputs, and where they go.

Called by ``projections.faust.router``, ``projections.faust.fold`` and the stage agents of
``projections.faust.app``. No I/O but a log line per record it dead-letters; the packs' format is the
stage codec's (``projections.stages.codec``).

An internal record carries a *pack*: the inputs for one stage's partition that one upstream batch
produced, in order. One record per (stage, partition) per batch instead of one per entity keeps
the per-record cost of Kafka and faust off the hot path; the partition is still the entity key's
(Kafka's murmur2, as ``events.catalog.topics.partition_for``), so every entity lives on exactly one
partition and its inputs arrive in the order they were sent.

A pack is written by the stage codec (``projections.stages.codec.encode_inputs``): typed, versioned,
checksummed, and read back by building only the stages' own delta types and validating the public
events against their catalogue classes. The stage topics are the app's own (``<app id>.stage.*``), but
anyone who can write to them could put anything there: a record that is not a readable pack
(``StateCodecError``, naming what is wrong) goes to the dead-letter topic with the reason
(``read_packs``) and the batch goes on without it.

Positions make every input idempotent at its target (see ``projections.stages.core.Applied``):
- an event read from the log keeps its source position and envelope id, so a record the router
  forwards twice (after a crash) or an event appended twice is recognised by the first stage;
- a delta gets a position derived from where its parent input was read: the internal topic and
  partition, and ``offset``, item index and emission index packed into one increasing integer. A
  redelivered parent record, or a parent folded again after a crash (reducers are pure, so it
  emits the same deltas in the same order), yields the same positions, which the target skips.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from events.catalog.topics import partition_for
from events.log.contract import LogRecord, OutRecord
from events.log.deadletter import dead_letter
from projections.stages.codec import StateCodecError, decode_inputs, encode_inputs
from projections.stages.core import Input, Position

log = logging.getLogger("fedsched.projections.faust")

ITEM_BITS = 16
EMIT_BITS = 12
MAX_ITEMS = 1 << ITEM_BITS
"""Inputs per pack (the router and stages split larger groups)."""
MAX_EMITTED = 1 << EMIT_BITS
"""Deltas one input may emit (a job with more replicas than this on one placement is refused)."""


Item = Input
"""A stage input as it travels: the core's ``Input`` (key, time, position, event or delta, envelope id)."""


def pack(items: list[Input]) -> bytes:
    """The inputs as one internal record; every one has a position (``ValueError`` otherwise)."""
    return encode_inputs(items)


def unpack(value: bytes) -> list[Input]:
    """The inputs of one internal record; ``StateCodecError`` naming what is wrong if it is not a pack."""
    return decode_inputs(value)


@dataclass(frozen=True, slots=True)
class Read:
    """The readable packs of a batch of internal records, and dead letters for the others."""

    packs: list[tuple[int, list[Input]]]
    """(index of the record in the batch, its inputs), in batch order."""
    dead: list[OutRecord]


def read_packs(messages: Sequence[Any], dead_letters: str, group: str) -> Read:
    """Each record's pack (``messages``: faust's, or anything with a record's topic, partition, offset,
    key, value and headers); one that cannot be read becomes a dead letter for ``dead_letters``, whole
    and with the reason, rather than stopping the stage (a record is no better for being read again)."""
    packs: list[tuple[int, list[Input]]] = []
    dead: list[OutRecord] = []
    for index, message in enumerate(messages):
        try:
            packs.append((index, decode_inputs(message.value)))
        except StateCodecError as error:
            headers = tuple(message.headers or ())
            value = message.value or b""
            record = LogRecord(message.topic, message.partition, message.offset, message.key, value, headers, 0)
            log.error(
                "event=dead_letter topic=%s partition=%d offset=%d reason=%r",
                record.topic,
                record.partition,
                record.offset,
                str(error),
            )
            letter = dead_letter(record, error, group)
            dead.append(OutRecord(dead_letters, letter.value, letter.key, letter.headers, 0))
    return Read(packs, dead)


def delta_position(topic: str, partition: int, offset: int, index: int, emitted: int) -> Position:
    """The position of the ``emitted``-th delta of the ``index``-th input of the record at ``offset``."""
    if index >= MAX_ITEMS or emitted >= MAX_EMITTED:
        raise ValueError(f"pack item {index} emitted {emitted} deltas: over the limits {MAX_ITEMS}/{MAX_EMITTED}")
    return tuple.__new__(Position, (topic, partition, (((offset << ITEM_BITS) | index) << EMIT_BITS) | emitted))


@lru_cache(maxsize=1 << 16)
def partition_of(key: str, partitions: int) -> int:
    """The key's partition (cached: murmur2 in Python, asked for every delta and entity read)."""
    return partition_for(key.encode(), partitions)


def split(items: list[Input], size: int) -> list[list[Input]]:
    size = min(size, MAX_ITEMS)
    return [items[start : start + size] for start in range(0, len(items), size)]
