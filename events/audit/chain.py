"""The hash chain of the audit archive: canonical bytes of a record and the link to its predecessor.

Called by the archiver (to extend a chain) and by ``fedsched audit chain --verify`` (to check one).
Pure: hashlib only. Each partition of each topic has its own chain; a record's hash is
``SHA-256(previous hash || canonical bytes of the record)``, starting from ``GENESIS``.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

GENESIS = bytes(32)
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


def _field(data: bytes | None) -> bytes:
    # Length-prefixed so no two different records share canonical bytes; None differs from b"".
    if data is None:
        return b"\xff\xff\xff\xff"
    return _U32.pack(len(data)) + data


def canonical_bytes(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes,
    headers: bytes,
    timestamp_ms: int,
) -> bytes:
    """The bytes a record's hash covers: every field, in a fixed order, length-prefixed."""
    return b"".join(
        (
            _field(topic.encode()),
            _I64.pack(partition),
            _I64.pack(offset),
            _field(key),
            _field(value),
            _field(headers),
            _I64.pack(timestamp_ms),
        )
    )


def link(previous: bytes, canonical: bytes) -> bytes:
    return hashlib.sha256(previous + canonical).digest()


@dataclass(frozen=True, slots=True)
class ArchivedRecord:
    topic: str
    partition: int
    seq: int
    offset: int
    key: bytes | None
    value: bytes
    headers: bytes
    timestamp_ms: int
    prev_hash: bytes
    hash: bytes

    def recomputed_hash(self) -> bytes:
        canonical = canonical_bytes(
            self.topic, self.partition, self.offset, self.key, self.value, self.headers, self.timestamp_ms
        )
        return link(self.prev_hash, canonical)


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The last link of a partition's chain as the archiver recorded it."""

    topic: str
    partition: int
    seq: int
    offset: int
    hash: bytes


class Tamper(StrEnum):
    EDITED = "edited"
    DELETED = "deleted"
    REORDERED = "reordered"
    TRUNCATED = "truncated"


@dataclass(frozen=True, slots=True)
class ChainProblem:
    kind: Tamper
    topic: str
    partition: int
    seq: int
    offset: int | None
    detail: str

    def __str__(self) -> str:
        where = f"{self.topic}[{self.partition}] seq {self.seq}"
        if self.offset is not None:
            where += f" (log offset {self.offset})"
        return f"{self.kind.value}: {where}: {self.detail}"


def verify_partition(records: Iterable[ArchivedRecord], head: ChainHead | None) -> ChainProblem | None:
    """The first problem in one partition's chain (records in ``seq`` order), or None if it holds."""
    verifier = ChainVerifier()
    for record in records:
        problem = verifier.feed(record)
        if problem is not None:
            return problem
    return verifier.finish(head)


class ChainVerifier:
    """Checks one partition's chain a record at a time, so a years-long chain needs no memory."""

    def __init__(self) -> None:
        self.count = 0
        self._previous_hash = GENESIS
        self._previous_offset = -1
        self._last: ArchivedRecord | None = None

    def feed(self, record: ArchivedRecord) -> ChainProblem | None:
        where = (record.topic, record.partition)
        expected_seq = self.count
        if record.hash != record.recomputed_hash():
            return ChainProblem(Tamper.EDITED, *where, record.seq, record.offset, "content does not match its hash")
        if record.seq != expected_seq:
            return ChainProblem(
                Tamper.DELETED,
                *where,
                expected_seq,
                None,
                f"record missing: the chain jumps from seq {expected_seq - 1} to {record.seq}",
            )
        if record.prev_hash != self._previous_hash or record.offset <= self._previous_offset:
            return ChainProblem(
                Tamper.REORDERED,
                *where,
                record.seq,
                record.offset,
                "does not follow its predecessor (previous hash or offset order broken)",
            )
        self.count += 1
        self._previous_hash = record.hash
        self._previous_offset = record.offset
        self._last = record
        return None

    def finish(self, head: ChainHead | None) -> ChainProblem | None:
        return _check_head(self._last, head)


def _check_head(last: ArchivedRecord | None, head: ChainHead | None) -> ChainProblem | None:
    """The archiver moves the head in the same transaction as the records: they must agree."""
    if head is None:
        if last is None:
            return None
        return ChainProblem(
            Tamper.EDITED, last.topic, last.partition, last.seq, last.offset, "records exist but the chain head is gone"
        )
    have = -1 if last is None else last.seq
    if have < head.seq:
        return ChainProblem(
            Tamper.TRUNCATED,
            head.topic,
            head.partition,
            have + 1,
            None,
            f"the chain head says seq {head.seq} (log offset {head.offset}) but the archive ends at seq {have}",
        )
    assert last is not None
    if have > head.seq or last.hash != head.hash:
        return ChainProblem(
            Tamper.EDITED,
            head.topic,
            head.partition,
            head.seq,
            head.offset,
            "the archive's last record is not the chain head the archiver recorded",
        )
    return None


def extend(
    head: ChainHead | None, topic: str, partition: int, rows: Iterable[tuple[int, bytes | None, bytes, bytes, int]]
) -> Iterator[ArchivedRecord]:
    """Chain new log records (offset, key, value, packed headers, timestamp) onto a partition's head."""
    seq = -1 if head is None else head.seq
    previous = GENESIS if head is None else head.hash
    for offset, key, value, headers, timestamp_ms in rows:
        seq += 1
        digest = link(previous, canonical_bytes(topic, partition, offset, key, value, headers, timestamp_ms))
        yield ArchivedRecord(topic, partition, seq, offset, key, value, headers, timestamp_ms, previous, digest)
        previous = digest
