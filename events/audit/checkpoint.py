"""Signed checkpoints of the audit archive, in the manner of a transparency log's signed tree heads.

Called by the archiver's checkpointer (``events.audit.checkpointer``: ``sign`` at a fixed cadence), by
the checkpoint files (``events.audit.checkpoint_files``: ``parse``), by ``fedsched audit chain --verify
--public-key`` (``signed_heads``, ``check_series``) and by inclusion proofs (``events.audit.proof``).
Pure: no I/O, clock or randomness (the time a checkpoint was made and the key are passed in);
``cryptography`` for Ed25519, which is computation only.

A checkpoint says, under the archiver's Ed25519 key: at ``made_at_ms``, every partition's chain stood at
this head (``topic``, ``partition``, ``seq``, log ``offset``, chain ``hash``), and ``root`` was the
RFC 6962 Merkle root over the chain hashes of records ``0..seq`` (``events.audit.merkle``). Checkpoints
are numbered (``seq`` from 0) and each names its predecessor's ``digest`` (``previous``), so a series
read from a directory shows a missing or substituted one. Kept outside the database (a directory the
operator names, and a record on the ``fedsched.audit`` topic), they let a verifier who holds only the
public key detect what the keyless hash chain cannot: a tail rewritten with recomputed hashes, a head
moved back, a partition dropped with its head.

The bytes, fixed here and nowhere else (any language can check them):

- the *body* is a JSON object with exactly the keys ``format`` (``"fedsched-audit-checkpoint/1"``),
  ``seq``, ``previous`` (64 lowercase hex digits, or ``""`` for seq 0), ``made_at_ms``, ``key_id`` (the
  first 8 bytes of SHA-256 of the raw 32-byte public key, as 16 lowercase hex digits) and
  ``partitions``: a list sorted by (topic, partition) of objects with exactly ``topic``, ``partition``,
  ``seq``, ``offset``, ``hash`` and ``root`` (hashes as 64 lowercase hex digits). Integers are below 2**53.
- the *canonical body* is its RFC 8785 (JCS) form: keys sorted, no whitespace, strings as JSON with
  only the mandatory escapes, UTF-8. For these integers and strings that is Python's
  ``json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()``.
- the *signed message* is ``b"fedsched-audit-checkpoint/1\\n"`` followed by the canonical body; the
  signature is Ed25519 (RFC 8032) over it; the checkpoint's ``digest`` is SHA-256 of it.
- the *file* (and the log record's value) is the canonical form of the body with one more key,
  ``signature`` (128 lowercase hex digits), and a newline.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from events.audit.chain import SignedHead

FORMAT = "fedsched-audit-checkpoint/1"
_MESSAGE_PREFIX = FORMAT.encode() + b"\n"
CONTENT_TYPE = b"application/vnd.fedsched.audit-checkpoint.v1+json"
"""The ``content-type`` header of a checkpoint's record on the log."""
MAX_INT = 2**53 - 1
MAX_PARTITIONS = 100_000
_HEX32 = re.compile(r"[0-9a-f]{64}\Z")
_HEX8 = re.compile(r"[0-9a-f]{16}\Z")
_HEX64 = re.compile(r"[0-9a-f]{128}\Z")
_BODY_KEYS = frozenset({"format", "seq", "previous", "made_at_ms", "key_id", "partitions"})
_HEAD_KEYS = frozenset({"topic", "partition", "seq", "offset", "hash", "root"})
_FILE_NAME = re.compile(r"checkpoint-([0-9]{1,16})\.json\Z")

Where = tuple[str, int]


class CheckpointError(ValueError):
    """A checkpoint's bytes are not a checkpoint: the message names the source, the field and the reason."""


@dataclass(frozen=True, slots=True)
class PartitionHead:
    """One partition's chain as a checkpoint signs it."""

    topic: str
    partition: int
    seq: int
    offset: int
    hash: bytes
    root: bytes

    @property
    def where(self) -> Where:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    seq: int
    previous: bytes | None
    made_at_ms: int
    key_id: str
    partitions: tuple[PartitionHead, ...]
    signature: bytes

    def body(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "seq": self.seq,
            "previous": "" if self.previous is None else self.previous.hex(),
            "made_at_ms": self.made_at_ms,
            "key_id": self.key_id,
            "partitions": [
                {
                    "topic": h.topic,
                    "partition": h.partition,
                    "seq": h.seq,
                    "offset": h.offset,
                    "hash": h.hash.hex(),
                    "root": h.root.hex(),
                }
                for h in self.partitions
            ],
        }

    def message(self) -> bytes:
        """The bytes the signature covers."""
        return _MESSAGE_PREFIX + canonical_json(self.body())

    def digest(self) -> bytes:
        """What the next checkpoint names as its ``previous``."""
        return hashlib.sha256(self.message()).digest()

    def to_bytes(self) -> bytes:
        """The file's bytes (and the log record's value)."""
        return canonical_json({**self.body(), "signature": self.signature.hex()}) + b"\n"

    def head(self, where: Where) -> PartitionHead | None:
        return next((h for h in self.partitions if h.where == where), None)

    def signature_problem(self, keys: Mapping[str, Ed25519PublicKey]) -> str | None:
        """Why the signature does not hold under the trusted ``keys`` (by key id), or None if it does."""
        key = keys.get(self.key_id)
        if key is None:
            return f"signed by key id {self.key_id}, which is not a trusted key ({', '.join(sorted(keys)) or 'none'})"
        try:
            key.verify(self.signature, self.message())
        except InvalidSignature:
            return f"its Ed25519 signature does not verify under key id {self.key_id}"
        return None


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def key_id(public: Ed25519PublicKey) -> str:
    return hashlib.sha256(public.public_bytes(Encoding.Raw, PublicFormat.Raw)).hexdigest()[:16]


def file_name(seq: int) -> str:
    """``checkpoint-<seq>.json``, the seq zero-padded so names sort as numbers."""
    return f"checkpoint-{seq:012d}.json"


def seq_of_file_name(name: str) -> int | None:
    match = _FILE_NAME.match(name)
    return None if match is None else int(match.group(1))


def sign(
    previous: Checkpoint | None, heads: Iterable[PartitionHead], made_at_ms: int, key: Ed25519PrivateKey
) -> Checkpoint:
    """The checkpoint after ``previous`` (the first if None) over ``heads``, signed with ``key``."""
    partitions = tuple(sorted(heads, key=lambda h: h.where))
    unsigned = Checkpoint(
        seq=0 if previous is None else previous.seq + 1,
        previous=None if previous is None else previous.digest(),
        made_at_ms=made_at_ms,
        key_id=key_id(key.public_key()),
        partitions=partitions,
        signature=b"",
    )
    _check_body(unsigned.body(), "new checkpoint")  # the same rules a reader applies
    return Checkpoint(
        unsigned.seq,
        unsigned.previous,
        made_at_ms,
        unsigned.key_id,
        partitions,
        key.sign(unsigned.message()),
    )


def parse(data: bytes, *, source: str) -> Checkpoint:
    """A checkpoint from a file's (or a log record's) bytes; ``CheckpointError`` naming ``source`` and the
    field when they are not one. The signature is not checked here (``Checkpoint.signature_problem``)."""
    try:
        document = json.loads(data, object_pairs_hook=_unique_keys, parse_float=_no_float, parse_constant=_no_float)
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{source}: not JSON: {error}") from None
    if not isinstance(document, dict):
        raise CheckpointError(f"{source}: a checkpoint is a JSON object")
    signature = document.pop("signature", None)
    if not isinstance(signature, str) or not _HEX64.match(signature):
        raise CheckpointError(f"{source}: field 'signature': not 128 lowercase hex digits")
    body = _check_body(document, source)
    return Checkpoint(
        seq=body["seq"],
        previous=bytes.fromhex(body["previous"]) if body["previous"] else None,
        made_at_ms=body["made_at_ms"],
        key_id=body["key_id"],
        partitions=tuple(
            PartitionHead(
                h["topic"], h["partition"], h["seq"], h["offset"], bytes.fromhex(h["hash"]), bytes.fromhex(h["root"])
            )
            for h in body["partitions"]
        ),
        signature=bytes.fromhex(signature),
    )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    duplicated = sorted({k for k in keys if keys.count(k) > 1})
    if duplicated:
        raise ValueError(f"key {duplicated[0]!r} appears twice")
    return dict(pairs)


def _no_float(text: str) -> Any:
    raise ValueError(f"{text} is not an integer (checkpoints hold integers only)")


def _check_body(body: dict[str, Any], source: str) -> dict[str, Any]:
    _exact_keys(body, _BODY_KEYS, source, "")
    if body["format"] != FORMAT:
        raise CheckpointError(f"{source}: field 'format': {body['format']!r} is not {FORMAT!r}")
    seq = _integer(body, "seq", source, "")
    _integer(body, "made_at_ms", source, "")
    previous = body["previous"]
    if not isinstance(previous, str) or (previous and not _HEX32.match(previous)):
        raise CheckpointError(f"{source}: field 'previous': not 64 lowercase hex digits or empty")
    if (seq == 0) != (previous == ""):
        raise CheckpointError(f"{source}: field 'previous': empty exactly when seq is 0 (the first checkpoint)")
    if not isinstance(body["key_id"], str) or not _HEX8.match(body["key_id"]):
        raise CheckpointError(f"{source}: field 'key_id': not 16 lowercase hex digits")
    heads = body["partitions"]
    if not isinstance(heads, list) or len(heads) > MAX_PARTITIONS:
        raise CheckpointError(f"{source}: field 'partitions': a list of at most {MAX_PARTITIONS} partition heads")
    previous_where: tuple[str, int] | None = None
    for i, head in enumerate(heads):
        at = f"partitions[{i}]."
        if not isinstance(head, dict):
            raise CheckpointError(f"{source}: field 'partitions[{i}]': a partition head is a JSON object")
        _exact_keys(head, _HEAD_KEYS, source, at)
        topic = head["topic"]
        if not isinstance(topic, str) or not 0 < len(topic) <= 249:
            raise CheckpointError(f"{source}: field '{at}topic': a topic name of 1 to 249 characters")
        for name in ("partition", "seq", "offset"):
            _integer(head, name, source, at)
        for name in ("hash", "root"):
            if not isinstance(head[name], str) or not _HEX32.match(head[name]):
                raise CheckpointError(f"{source}: field '{at}{name}': not 64 lowercase hex digits")
        where = (topic, head["partition"])
        if previous_where is not None and where <= previous_where:
            raise CheckpointError(
                f"{source}: field '{at}topic': partitions must be sorted by topic and partition, once each"
            )
        previous_where = where
    return body


def _exact_keys(obj: dict[str, Any], expected: frozenset[str], source: str, at: str) -> None:
    missing = sorted(expected - obj.keys())
    if missing:
        raise CheckpointError(f"{source}: field '{at}{missing[0]}': missing")
    unknown = sorted(obj.keys() - expected)
    if unknown:
        raise CheckpointError(f"{source}: field '{at}{unknown[0]}': not a field of a checkpoint")


def _integer(obj: dict[str, Any], name: str, source: str, at: str) -> int:
    value = obj[name]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INT:
        raise CheckpointError(f"{source}: field '{at}{name}': an integer from 0 to 2**53-1")
    return value


def signed_heads(checkpoints: Iterable[Checkpoint]) -> dict[Where, list[SignedHead]]:
    """Every partition's signed heads over a series, each distinct head once (an idle partition is signed
    unchanged by many checkpoints: the earliest is kept)."""
    out: dict[Where, dict[tuple[int, int, bytes, bytes], SignedHead]] = {}
    for checkpoint in sorted(checkpoints, key=lambda c: c.seq):
        for h in checkpoint.partitions:
            seen = out.setdefault(h.where, {})
            seen.setdefault(
                (h.seq, h.offset, h.hash, h.root), SignedHead(checkpoint.seq, h.seq, h.offset, h.hash, h.root)
            )
    return {where: sorted(heads.values(), key=lambda s: (s.seq, s.checkpoint)) for where, heads in out.items()}


class Fault(StrEnum):
    UNREADABLE = "unreadable"
    BAD_SIGNATURE = "bad-signature"
    GAP = "gap"
    FORK = "fork"
    REWOUND = "rewound"


@dataclass(frozen=True, slots=True)
class CheckpointProblem:
    kind: Fault
    checkpoint: int | None
    source: str
    detail: str

    def __str__(self) -> str:
        which = "checkpoint" if self.checkpoint is None else f"checkpoint #{self.checkpoint}"
        return f"{self.kind.value}: {which} ({self.source}): {self.detail}"


def check_series(checkpoints: Sequence[tuple[str, Checkpoint]]) -> list[CheckpointProblem]:
    """What is wrong with a series of (source, checkpoint) whose signatures hold: a missing number, a
    checkpoint that does not name its predecessor, or a partition signed behind where the previous
    checkpoint signed it (or not at all)."""
    problems: list[CheckpointProblem] = []
    ordered = sorted(checkpoints, key=lambda c: c[1].seq)
    for (_, before), (source, after) in itertools.pairwise(ordered):
        if after.seq == before.seq:
            problems.append(CheckpointProblem(Fault.FORK, after.seq, source, "two checkpoints carry this number"))
            continue
        if after.seq != before.seq + 1:
            problems.append(
                CheckpointProblem(
                    Fault.GAP, after.seq, source, f"checkpoints #{before.seq + 1}..#{after.seq - 1} are missing"
                )
            )
            continue
        if after.previous != before.digest():
            problems.append(
                CheckpointProblem(
                    Fault.FORK, after.seq, source, f"it does not name checkpoint #{before.seq} as its previous"
                )
            )
        problems += [
            CheckpointProblem(Fault.REWOUND, after.seq, source, why) for why in behind(before, after.partitions)
        ]
    return problems


def behind(previous: Checkpoint, heads: Iterable[PartitionHead]) -> list[str]:
    """Each partition that ``heads`` show behind where ``previous`` signed it, missing, or different at the
    same seq: the archiver must not sign such heads, and a verifier reports a series that does."""
    now = {h.where: h for h in heads}
    out = []
    for old in previous.partitions:
        new = now.get(old.where)
        name = f"{old.topic}[{old.partition}]"
        if new is None:
            out.append(f"{name} was signed at seq {old.seq} by checkpoint #{previous.seq} and is gone")
        elif new.seq < old.seq:
            out.append(f"{name} is at seq {new.seq}, behind seq {old.seq} signed by checkpoint #{previous.seq}")
        elif new.seq == old.seq and (new.hash, new.offset, new.root) != (old.hash, old.offset, old.root):
            out.append(f"{name} at seq {old.seq} differs from what checkpoint #{previous.seq} signed")
    return out


def moved(previous: Checkpoint | None, heads: Iterable[PartitionHead], *, ignore_topics: Iterable[str] = ()) -> bool:
    """Whether any partition's head moved since ``previous`` (the checkpoints' own topic left out: each
    checkpoint's record moves it, and signing for that alone would never stop)."""
    ignored = frozenset(ignore_topics)
    now = {h.where: h.seq for h in heads if h.topic not in ignored}
    if previous is None:
        return bool(now)
    return now != {h.where: h.seq for h in previous.partitions if h.topic not in ignored}
