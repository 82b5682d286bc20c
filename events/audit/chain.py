"""The hash chain of the audit archive: canonical bytes of a record, the link to its predecessor, and
the verifier that names the first bad position of a partition.

Called by the archiver (to extend a chain) and by ``fedsched audit chain --verify`` (to check one, with
the archiver's heads history and the signed checkpoints as witnesses). Pure: hashlib and the Merkle
tree (``events.audit.merkle``) only. Each partition of each topic has its own chain; a record's hash is
``SHA-256(previous hash || canonical bytes of the record)``, starting from ``GENESIS``.

The chain has no key: whoever can write the archive can also rewrite a tail and recompute its hashes.
That is why the archiver's heads are kept as an append-only history and signed in checkpoints outside
the database (``events.audit.checkpoint``); the verifier's ``signed`` heads are what make such a rewrite,
a rewound head or a dropped partition visible.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from events.audit.merkle import Frontier, leaf_hash

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
    """A link of a partition's chain as the archiver recorded it in its heads history (the newest row is
    where the archiver stands)."""

    topic: str
    partition: int
    seq: int
    offset: int
    hash: bytes


@dataclass(frozen=True, slots=True)
class SignedHead:
    """A partition's head as a signed checkpoint recorded it: the record at ``seq`` had this ``offset`` and
    chain ``hash``, and ``root`` was the RFC 6962 root over the hashes of records ``0..seq``."""

    checkpoint: int
    seq: int
    offset: int
    hash: bytes
    root: bytes


class Tamper(StrEnum):
    EDITED = "edited"
    """A record's content no longer matches its hash, or records stand past the archiver's head unsigned."""
    DELETED = "deleted"
    """A record is missing from its place: the seq jumps, or a record links to one that is not there."""
    INSERTED = "inserted"
    """A record was put between two others: the next one links past it."""
    REORDERED = "reordered"
    """Records are out of their order: offsets go backwards, or a record's predecessor comes after it."""
    TRUNCATED = "truncated"
    """The archive ends before the archiver's head or before a signed head."""
    REWOUND = "rewound"
    """The archiver's head was moved back below records that a signature shows were archived."""
    REWRITTEN = "rewritten"
    """The chain holds together, but not with what the archiver's head or a signed checkpoint recorded:
    records were rewritten with their hashes recomputed."""
    DROPPED = "dropped"
    """A signed partition has no record left in the archive."""


@dataclass(frozen=True, slots=True)
class ChainProblem:
    """The first bad position of one partition. ``through_seq``: when only a range can be proved (a rewrite
    whose hashes were recomputed is seen where a witness disagrees), the difference lies in
    ``seq..through_seq``."""

    kind: Tamper
    topic: str
    partition: int
    seq: int
    offset: int | None
    detail: str
    through_seq: int | None = None

    def __str__(self) -> str:
        where = f"{self.topic}[{self.partition}] seq {self.seq}"
        if self.offset is not None:
            where += f" (log offset {self.offset})"
        return f"{self.kind.value}: {where}: {self.detail}"


def verify_partition(
    records: Iterable[ArchivedRecord],
    head: ChainHead | None,
    *,
    heads: Iterable[ChainHead] = (),
    signed: Iterable[SignedHead] = (),
) -> ChainProblem | None:
    """The first problem in one partition's chain (records in ``seq`` order), or None if it holds.
    ``head``: the archiver's newest head; ``heads``: its older ones; ``signed``: every signed head."""
    verifier = ChainVerifier(heads=(*heads, *(() if head is None else (head,))), newest=head, signed=signed)
    for record in records:
        problem = verifier.feed(record)
        if problem is not None:
            return problem
    return verifier.finish()


Where = tuple[str, int]


def verify_archive(
    records: Mapping[Where, Iterable[ArchivedRecord]],
    heads: Mapping[Where, Iterable[ChainHead]],
    signed: Mapping[Where, Iterable[SignedHead]] = MappingProxyType({}),
) -> list[ChainProblem]:
    """Every partition's first problem, by topic and partition: the partitions are those with records,
    with a head or with a signed head (a partition dropped with its head is still named by a signature)."""
    problems: list[ChainProblem] = []
    for where in sorted({*records, *heads, *signed}):
        rows = list(heads.get(where, ()))
        newest = max(rows, key=lambda h: h.seq, default=None)
        verifier = ChainVerifier(*where, heads=rows, newest=newest, signed=signed.get(where, ()))
        problem = next((p for p in map(verifier.feed, records.get(where, ())) if p is not None), None)
        problem = problem or verifier.finish()
        if problem is not None:
            problems.append(problem)
    return problems


class ChainVerifier:
    """Checks one partition's chain a record at a time, so a years-long chain needs no memory: each record
    against its own hash, its seq, its predecessor's hash and offset; then, where one was recorded, against
    the archiver's head row at that seq and every signed head at that seq (hash, offset and the Merkle root
    over the records so far); at the end, that the archive reaches the newest head and every signed one
    and goes no further than the archiver's head.

    What each witness proves: the chain alone, that no record was changed, removed, added or moved
    *without recomputing the hashes after it*. The heads history, that the tail was not rewritten unless
    its head rows were rewritten too (they are in the same database). A signed head, kept outside the
    database, that records ``0..seq`` are exactly what was archived when it was signed: a rewrite with
    recomputed hashes is found between the last signed head that still matches and the first that does
    not, and a rewound head or a dropped partition is seen at all."""

    def __init__(
        self,
        topic: str = "",
        partition: int = -1,
        *,
        heads: Iterable[ChainHead] = (),
        newest: ChainHead | None = None,
        signed: Iterable[SignedHead] = (),
    ) -> None:
        self._where = (topic, partition)
        self._heads = {h.seq: h for h in heads}
        self._newest = newest if newest is not None else self._heads.get(max(self._heads, default=-1))
        """Where the archiver stands (None: it has no head here, so any record is past it)."""
        self._signed = sorted(signed, key=lambda s: (s.seq, s.checkpoint))
        self._next_signed = 0
        self.count = 0
        self._previous: ArchivedRecord | None = None
        self._previous_hash = GENESIS
        self._before_previous_hash: bytes | None = None
        self._unlinked: ArchivedRecord | None = None
        self._held: ChainProblem | None = None  # a witness's disagreement, named once the next record is seen
        self._merkle = Frontier()
        self.signed_through = -1
        """The highest seq a signed head confirmed (records after it are not yet covered by a signature)."""
        self._confirmed = -1  # by a signed head or a head row
        self._after_signed: int | None = None  # log offset of the record after ``signed_through``
        self._after_confirmed: int | None = None

    def feed(self, record: ArchivedRecord, head: ChainHead | None = None) -> ChainProblem | None:
        """The first problem this record shows (or the record before it, which needed this one to be
        named), else None. ``head``: the archiver's head row at this seq, if the caller streams them."""
        if self._where == ("", -1):
            self._where = (record.topic, record.partition)
        held, self._held = self._held, None
        problem = self._check(record, head)
        if held is None:
            return problem
        # A witness disagreed with the record before this one, which proves a range. If this record shows
        # that one was put in or moved, that names the very position: say that instead.
        exact = problem is not None and problem.kind in (Tamper.INSERTED, Tamper.REORDERED)
        if exact and problem is not None and problem.seq <= (held.through_seq or held.seq):
            return problem
        return held

    def _check(self, record: ArchivedRecord, head: ChainHead | None) -> ChainProblem | None:
        if self._unlinked is not None:
            return self._name_unlinked(record)
        expected = self.count
        if record.seq > expected:
            return self._problem(
                Tamper.DELETED,
                expected,
                None,
                f"record missing: the chain jumps from seq {expected - 1} to {record.seq}",
            )
        if record.seq < expected:
            return self._problem(Tamper.REORDERED, record.seq, record.offset, f"seq {record.seq} comes twice")
        if record.hash != record.recomputed_hash():
            return self._problem(Tamper.EDITED, record.seq, record.offset, "content does not match its hash")
        if record.prev_hash != self._previous_hash:
            if record.prev_hash == self._before_previous_hash and self._previous is not None:
                inserted = self._previous
                return self._problem(
                    Tamper.INSERTED,
                    inserted.seq,
                    inserted.offset,
                    f"put in: seq {record.seq} links to seq {inserted.seq - 1}, past it",
                )
            self._unlinked = record  # moved or missing predecessor: the next record tells which
            return None
        if self._previous is not None and record.offset <= self._previous.offset:
            # The two are out of log order; the first of them is the first out of place.
            return self._problem(
                Tamper.REORDERED,
                self._previous.seq,
                self._previous.offset,
                f"seq {record.seq} (log offset {record.offset}) comes after it in the chain but not in the log",
            )
        if self._newest is None or record.seq == self._newest.seq + 1:
            return self._past_head(record)
        self._accept(record)
        self._held = self._witnessed(record, head if head is not None else self._heads.get(record.seq))
        return None

    def finish(self) -> ChainProblem | None:
        """The problem at the end of the chain, if any: records missing before a head, or none left."""
        if self._held is not None:
            return self._held
        if self._unlinked is not None:
            return self._name_unlinked(None)
        last = self.count - 1
        newest = self._newest
        beyond = [s for s in self._signed[self._next_signed :] if s.seq > last]
        if self.count == 0:
            if beyond:
                top = beyond[-1]
                return self._problem(
                    Tamper.DROPPED,
                    0,
                    None,
                    f"checkpoint #{top.checkpoint} signed seq {top.seq} (log offset {top.offset}),"
                    " but the archive holds no record of this partition",
                    through_seq=top.seq,
                )
            if newest is not None:
                return self._problem(
                    Tamper.TRUNCATED,
                    0,
                    None,
                    f"the chain head says seq {newest.seq} (log offset {newest.offset})"
                    " but the archive holds no record",
                )
            return None
        claims = []
        if newest is not None and newest.seq > last:
            claims.append(f"the chain head says seq {newest.seq} (log offset {newest.offset})")
        if beyond:
            top = beyond[-1]
            claims.append(f"checkpoint #{top.checkpoint} signed seq {top.seq} (log offset {top.offset})")
        if claims:
            through = max([s.seq for s in beyond] + [newest.seq if newest is not None else -1])
            return self._problem(
                Tamper.TRUNCATED,
                last + 1,
                None,
                f"{' and '.join(claims)} but the archive ends at seq {last}",
                through_seq=through,
            )
        assert self._previous is not None
        if newest is not None and self._previous.hash != newest.hash:
            return self._problem(
                Tamper.EDITED,
                newest.seq,
                newest.offset,
                "the archive's last record is not the chain head the archiver recorded",
            )
        return None

    def _accept(self, record: ArchivedRecord) -> None:
        self.count += 1
        self._before_previous_hash, self._previous_hash = self._previous_hash, record.hash
        self._previous = record
        self._merkle.append(leaf_hash(record.hash))
        if self._after_signed is None:
            self._after_signed = record.offset
        if self._after_confirmed is None:
            self._after_confirmed = record.offset

    def _witnessed(self, record: ArchivedRecord, head: ChainHead | None) -> ChainProblem | None:
        seq = record.seq
        while self._next_signed < len(self._signed) and self._signed[self._next_signed].seq == seq:
            signed = self._signed[self._next_signed]
            self._next_signed += 1
            differs = _signed_difference(signed, record, self._merkle)
            if differs:
                return self._rewritten(
                    self.signed_through,
                    self._after_signed,
                    seq,
                    f"checkpoint #{signed.checkpoint} signed seq {seq} (log offset {signed.offset}) {differs}",
                )
            self.signed_through = self._confirmed = seq
            self._after_signed = self._after_confirmed = None
        if head is not None:
            if head.hash != record.hash or head.offset != record.offset:
                return self._rewritten(
                    self._confirmed,
                    self._after_confirmed,
                    seq,
                    f"the archiver's head row at seq {seq} recorded log offset {head.offset} and hash"
                    f" {head.hash.hex()[:16]}, the archive has log offset {record.offset}"
                    f" and hash {record.hash.hex()[:16]}",
                )
            self._confirmed = seq
            self._after_confirmed = None
        return None

    def _rewritten(self, good: int, offset: int | None, seq: int, detail: str) -> ChainProblem:
        return self._problem(
            Tamper.REWRITTEN,
            good + 1,
            offset,
            f"{detail}: records were rewritten with recomputed hashes somewhere in seq {good + 1}..{seq}",
            through_seq=seq,
        )

    def _past_head(self, record: ArchivedRecord) -> ChainProblem:
        newest = self._newest
        head = "is gone" if newest is None else f"stops at seq {newest.seq}"
        signed = [s for s in self._signed if newest is None or s.seq > newest.seq]
        if signed:
            top = signed[-1]
            return self._problem(
                Tamper.REWOUND,
                record.seq,
                record.offset,
                f"the archiver's head {head}, but checkpoint #{top.checkpoint} signed seq {top.seq}:"
                " the head was moved back",
            )
        return self._problem(
            Tamper.EDITED,
            record.seq,
            record.offset,
            f"records exist after the archiver's head, which {head}: added behind its back, or the head was"
            " rewound (no signature covers them)",
        )

    def _name_unlinked(self, following: ArchivedRecord | None) -> ChainProblem:
        unlinked = self._unlinked
        assert unlinked is not None
        if following is not None and (following.hash == unlinked.prev_hash or following.offset <= unlinked.offset):
            return self._problem(
                Tamper.REORDERED, unlinked.seq, unlinked.offset, "does not follow its predecessor, which comes after it"
            )
        return self._problem(
            Tamper.DELETED,
            unlinked.seq,
            unlinked.offset,
            f"links to a record that is not before it: a record between seq {unlinked.seq - 1} and {unlinked.seq}"
            f" is missing (or seq {unlinked.seq - 1} was rewritten with a recomputed hash)",
        )

    def _problem(
        self, kind: Tamper, seq: int, offset: int | None, detail: str, *, through_seq: int | None = None
    ) -> ChainProblem:
        return ChainProblem(kind, *self._where, seq, offset, detail, through_seq)


def _signed_difference(signed: SignedHead, record: ArchivedRecord, merkle: Frontier) -> str:
    if signed.hash != record.hash:
        return f"with hash {signed.hash.hex()[:16]}, the archive's record there has hash {record.hash.hex()[:16]}"
    if signed.offset != record.offset:
        return f"but the archive's record there has log offset {record.offset}"
    if signed.root != merkle.root():
        return "but the Merkle root over the archive's records up to it differs"
    return ""


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
