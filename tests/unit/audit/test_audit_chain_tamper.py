"""Tampering with the audit archive, as an intruder who can write its database would: every mutation is
detected and its first bad position named, on the pure layer (the chain, the heads history and signed
checkpoints), over many random archives.

An archive here is built as the archiver builds it: batches of records chained onto one partition's head,
a head row appended after each batch, and a checkpoint signed after some batches and always after the
last one (as ``catch_up`` does), so every record is covered by a signature. The intruder may disable the
append-only triggers, so any row can change; the chain has no key, so it can also recompute hashes and
head rows. It cannot sign.

What each mutation must be reported as, and where (``seq`` of the first bad position):

- byte flip of one record's field, hashes left alone: ``edited`` at that record;
- a record deleted (its seq left as a gap, or the later ones renumbered): ``deleted`` there, or
  ``truncated`` when it was the last;
- a forged record inserted (chained onto its predecessor, later ones renumbered): ``inserted`` there, or
  ``edited`` (records past the archiver's head) when put at the end;
- two records swapped (renumbered): ``reordered`` at the first;
- the tail truncated (records only, or with the head rows and a forged head at the new end): ``truncated``
  at the first missing record (``dropped`` when none is left and a signature names the partition);
- the head rewound (newest head rows deleted): ``rewound`` just past the remaining head;
- the tail rewritten from a record on, hashes recomputed, head rows rewritten too (or left): ``rewritten``,
  naming the range between the last witness that still matches and the first that does not, which
  contains the first changed record; a rewrite that swaps two records is ``reordered`` exactly;
- a partition dropped with its head rows: ``dropped`` at seq 0;
- a byte of a checkpoint file flipped: the checkpoint is unreadable or its signature fails.

Offsets step by 1 (the embedded log's) to 4 (Kafka's, around transaction markers); a forged record takes
the offset after its predecessor's, which may be its successor's too (an intruder who drops the unique
constraint can do that).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.audit.chain import GENESIS, ArchivedRecord, ChainHead, ChainProblem, Tamper, extend, verify_archive
from events.audit.checkpoint import (
    Checkpoint,
    CheckpointError,
    PartitionHead,
    check_series,
    key_id,
    parse,
    sign,
    signed_heads,
)
from events.audit.merkle import Frontier, leaf_hash

pytestmark = [pytest.mark.property, pytest.mark.timeout(300)]

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
KEYS = {key_id(KEY.public_key()): KEY.public_key()}
Where = tuple[str, int]


@dataclass
class Archive:
    records: dict[Where, list[ArchivedRecord]] = field(default_factory=dict)
    heads: dict[Where, list[ChainHead]] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)

    def problems(self) -> list[ChainProblem]:
        return verify_archive(self.records, self.heads, signed_heads(self.checkpoints))

    def signed_seqs(self, where: Where) -> list[int]:
        return sorted({h.seq for c in self.checkpoints for h in c.partitions if h.where == where})


def build(batches: list[tuple[int, list[tuple[int, bytes, int]]]], signs: list[bool], partitions: int) -> Archive:
    """Archive ``batches`` of (partition, [(offset step, value, timestamp)]) as the archiver does, signing
    a checkpoint after each batch marked in ``signs`` and after the last."""
    archive = Archive()
    frontiers: dict[Where, Frontier] = {}
    offsets: dict[Where, int] = {}
    previous: Checkpoint | None = None
    for number, (partition, rows) in enumerate(batches):
        where = ("t" if partition % 2 == 0 else "u", partition)
        chain = archive.records.setdefault(where, [])
        head = archive.heads[where][-1] if where in archive.heads else None
        fresh = []
        for step, value, timestamp in rows:
            offsets[where] = offsets.get(where, -1) + step
            key = None if len(value) % 3 == 0 else value[:2]
            fresh.append((offsets[where], key, value, b"\x00\x01h" + value[:1], timestamp))
        chained = list(extend(head, *where, fresh))
        chain.extend(chained)
        frontier = frontiers.setdefault(where, Frontier())
        for record in chained:
            frontier.append(leaf_hash(record.hash))
        last = chained[-1]
        archive.heads.setdefault(where, []).append(ChainHead(*where, last.seq, last.offset, last.hash))
        if signs[number] or number == len(batches) - 1:
            heads = [
                PartitionHead(*w, h[-1].seq, h[-1].offset, h[-1].hash, frontiers[w].root())
                for w, h in archive.heads.items()
            ]
            previous = sign(previous, heads, 1_000 + number, KEY)
            archive.checkpoints.append(previous)
    assert partitions >= 1
    return archive


row = st.tuples(st.integers(1, 4), st.binary(min_size=0, max_size=6), st.integers(0, 2**40))
batch = st.tuples(st.integers(0, 2), st.lists(row, min_size=1, max_size=6))


@st.composite
def archives(draw: st.DrawFn) -> Archive:
    batches = draw(st.lists(batch, min_size=1, max_size=10))
    signs = draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    return build(batches, signs, 3)


def rehash_from(chain: list[ArchivedRecord], start: int) -> list[ArchivedRecord]:
    """The chain with records from ``start`` on re-linked and re-hashed, as an intruder recomputes them."""
    out = chain[:start]
    previous = GENESIS if start == 0 else chain[start - 1].hash
    for seq, record in enumerate(chain[start:], start):
        relinked = dataclasses.replace(record, seq=seq, prev_hash=previous, hash=b"")
        relinked = dataclasses.replace(relinked, hash=relinked.recomputed_hash())
        out.append(relinked)
        previous = relinked.hash
    return out


def renumber(chain: list[ArchivedRecord]) -> list[ArchivedRecord]:
    return [dataclasses.replace(r, seq=seq) for seq, r in enumerate(chain)]


def heads_matching(chain: list[ArchivedRecord], heads: list[ChainHead], start: int) -> list[ChainHead]:
    """The head rows an intruder rewrites to match a rewritten chain (rows at or after ``start``)."""
    by_seq = {r.seq: r for r in chain}
    return [
        h
        if h.seq < start or h.seq not in by_seq
        else dataclasses.replace(h, hash=by_seq[h.seq].hash, offset=by_seq[h.seq].offset)
        for h in heads
    ]


@dataclass(frozen=True)
class Expected:
    """Where the first problem must be named: one of ``kinds`` at ``seq`` (and, for a proved range, the
    first changed record inside ``seq..through``)."""

    kinds: frozenset[Tamper]
    seq: int
    changed: int | None = None


Draw = Callable[[st.SearchStrategy[Any]], Any]
Mutation = Callable[[Archive, Where, Draw], Expected]


def flip_byte(archive: Archive, where: Where, draw: Draw) -> Expected:
    chain = archive.records[where]
    j = draw(st.integers(0, len(chain) - 1))
    name = draw(st.sampled_from(["key", "value", "headers", "timestamp_ms", "offset", "prev_hash", "hash"]))
    old = getattr(chain[j], name)
    if isinstance(old, int):
        new: Any = old ^ (1 << draw(st.integers(0, 40)))
    elif not old:
        new = b"\x00" if old is not None else b""
    else:
        i = draw(st.integers(0, len(old) - 1))
        new = old[:i] + bytes([old[i] ^ (1 << draw(st.integers(0, 7)))]) + old[i + 1 :]
    chain[j] = dataclasses.replace(chain[j], **{name: new})
    return Expected(frozenset({Tamper.EDITED}), j)


def delete(archive: Archive, where: Where, draw: Draw) -> Expected:
    chain = archive.records[where]
    j = draw(st.integers(0, len(chain) - 1))
    last = j == len(chain) - 1
    del chain[j]
    if draw(st.booleans()):
        archive.records[where] = renumber(chain)
    if not chain:
        return Expected(frozenset({Tamper.TRUNCATED, Tamper.DROPPED}), 0)
    return Expected(frozenset({Tamper.TRUNCATED if last else Tamper.DELETED}), j)


def insert(archive: Archive, where: Where, draw: Draw) -> Expected:
    chain = archive.records[where]
    j = draw(st.integers(0, len(chain)))
    previous = chain[j - 1] if j else None
    offset = (previous.offset if previous else -1) + 1
    head = None if previous is None else ChainHead(*where, previous.seq, previous.offset, previous.hash)
    (forged,) = extend(head, *where, [(offset, b"k", b"forged", b"", 7)])
    archive.records[where] = renumber([*chain[:j], forged, *chain[j:]])
    return Expected(frozenset({Tamper.INSERTED if j < len(chain) else Tamper.EDITED}), j)


def swap(archive: Archive, where: Where, draw: Draw) -> Expected:
    chain = archive.records[where]
    if len(chain) < 2:
        return flip_byte(archive, where, draw)
    i = draw(st.integers(0, len(chain) - 2))
    m = draw(st.integers(i + 1, len(chain) - 1))
    chain[i], chain[m] = chain[m], chain[i]
    archive.records[where] = renumber(chain)
    return Expected(frozenset({Tamper.REORDERED}), i)


def truncate(archive: Archive, where: Where, draw: Draw) -> Expected:
    chain = archive.records[where]
    k = draw(st.integers(0, len(chain) - 1))
    archive.records[where] = chain[:k]
    if draw(st.booleans()):
        # The head rows too, and a head forged at the new end: the database agrees with itself.
        kept = [h for h in archive.heads[where] if h.seq < k]
        if k:
            last = chain[k - 1]
            kept = [h for h in kept if h.seq < k - 1] + [ChainHead(*where, last.seq, last.offset, last.hash)]
        archive.heads[where] = kept
    return Expected(frozenset({Tamper.TRUNCATED, Tamper.DROPPED} if k == 0 else {Tamper.TRUNCATED}), k)


def rewind(archive: Archive, where: Where, draw: Draw) -> Expected:
    heads = archive.heads[where]
    keep = draw(st.integers(0, len(heads) - 1))
    archive.heads[where] = heads[:keep]
    return Expected(frozenset({Tamper.REWOUND}), heads[keep - 1].seq + 1 if keep else 0)


def rewrite(archive: Archive, where: Where, draw: Draw) -> Expected:
    chain = archive.records[where]
    j = draw(st.integers(0, len(chain) - 1))
    if len(chain) >= 2 and j < len(chain) - 1 and draw(st.booleans()):
        chain[j], chain[j + 1] = chain[j + 1], chain[j]
        archive.records[where] = rehash_from(chain, j)
        archive.heads[where] = heads_matching(archive.records[where], archive.heads[where], j)
        return Expected(frozenset({Tamper.REORDERED}), j)
    chain[j] = dataclasses.replace(chain[j], value=chain[j].value + b"!")
    archive.records[where] = rehash_from(chain, j)
    rewrite_heads = draw(st.booleans())
    if rewrite_heads:
        archive.heads[where] = heads_matching(archive.records[where], archive.heads[where], j)
    # The first witness at or after the change disagrees. A signed one proves the range from the last
    # signed head that matches; a head row (left alone by the intruder), from the last witness of
    # either kind that matches.
    signed = set(archive.signed_seqs(where))
    witnesses = signed | (set() if rewrite_heads else {h.seq for h in archive.heads[where]})
    first = min(s for s in witnesses if s >= j)
    trusted = signed if first in signed else witnesses
    good = max((s for s in trusted if s < j), default=-1)
    return Expected(frozenset({Tamper.REWRITTEN}), good + 1, changed=j)


def drop(archive: Archive, where: Where, draw: Draw) -> Expected:
    del archive.records[where]
    del archive.heads[where]
    return Expected(frozenset({Tamper.DROPPED}), 0)


MUTATIONS: dict[str, Mutation] = {
    "byte flip": flip_byte,
    "delete": delete,
    "insert": insert,
    "reorder": swap,
    "truncate": truncate,
    "rewound head": rewind,
    "tail rewritten with recomputed hashes": rewrite,
    "dropped partition with its head": drop,
}


@pytest.mark.parametrize("name", list(MUTATIONS))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(archive=archives(), data=st.data())
def test_every_mutation_of_the_archive_is_detected_at_its_first_bad_position(
    name: str, archive: Archive, data: st.DataObject
) -> None:
    # 100 random archives for each of the 8 mutations: 800 examples in all.
    assert archive.problems() == []  # untouched, everything holds
    where = data.draw(st.sampled_from(sorted(archive.records)))
    expected = MUTATIONS[name](archive, where, data.draw)

    problems = archive.problems()
    assert len(problems) == 1, (name, problems)  # found, in that partition and nowhere else
    problem = problems[0]
    assert (problem.topic, problem.partition) == where
    assert problem.kind in expected.kinds, (name, problem)
    assert problem.seq == expected.seq, (name, problem)
    if expected.changed is not None:
        assert problem.through_seq is not None
        assert problem.seq <= expected.changed <= problem.through_seq, (name, problem)


@settings(max_examples=300, deadline=None)
@given(archive=archives(), data=st.data())
def test_a_flipped_byte_of_any_checkpoint_file_is_refused(archive: Archive, data: st.DataObject) -> None:
    files = [c.to_bytes() for c in archive.checkpoints]
    number = data.draw(st.integers(0, len(files) - 1))
    body = files[number]
    i = data.draw(st.integers(0, len(body) - 2))  # the JSON (the closing newline is whitespace)
    files[number] = body[:i] + bytes([body[i] ^ (1 << data.draw(st.integers(0, 7)))]) + body[i + 1 :]

    refused = 0
    valid = []
    for n, raw in enumerate(files):
        try:
            checkpoint = parse(raw, source=f"checkpoint-{n}.json")
        except CheckpointError:
            refused += 1
            continue
        if checkpoint.signature_problem(KEYS) is not None:
            refused += 1
            continue
        valid.append((f"checkpoint-{n}.json", checkpoint))
    assert refused == 1
    assert len(valid) == len(files) - 1
    # Without the refused one the series shows a hole (unless it was the first, as if older checkpoints
    # were pruned, or the newest).
    if 0 < number < len(files) - 1:
        assert check_series(valid), "a missing checkpoint in the middle of the series is reported"
