"""Inclusion proofs: one archived record shown to be in a signed checkpoint, checkable with no database.

Called by ``fedsched audit proof`` (the archive builds a proof, ``events.audit.archive.inclusion_proof``;
``--check`` reads one back and checks it offline). Pure: the Merkle tree, the chain's record hash and the
checkpoint's signature.

A proof carries the record as archived (key, value, packed headers, timestamp, log offset, its
predecessor's chain hash), its place (``seq``) and the RFC 6962 audit path from its leaf to the Merkle
root that the embedded checkpoint signs for its partition over ``head.seq + 1`` records. Checking it:
the checkpoint's signature under a trusted key; the record's chain hash recomputed from its content;
the path from ``SHA-256(0x00 || hash)`` at ``seq`` reaching the signed root. Whoever holds the proof and
the public key can then show that this record, byte for byte, was archived at that place by the time
the checkpoint was made.

The file is a JSON object: ``format`` (``"fedsched-audit-inclusion-proof/1"``), ``checkpoint`` (the
checkpoint's own JSON object, signature included, as in its file), ``topic``, ``partition``, ``seq``,
``offset``, ``timestamp_ms``, ``key`` (base64, or null), ``value`` and ``headers`` (base64),
``prev_hash`` (hex) and ``path`` (hex hashes, from the leaf's sibling up).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from events.audit.chain import ArchivedRecord, canonical_bytes, link
from events.audit.checkpoint import Checkpoint, CheckpointError, canonical_json, parse
from events.audit.merkle import leaf_hash, root_from_path

FORMAT = "fedsched-audit-inclusion-proof/1"
_KEYS = frozenset(
    {"format", "checkpoint", "topic", "partition", "seq", "offset", "timestamp_ms", "key", "value", "headers"}
    | {"prev_hash", "path"}
)


@dataclass(frozen=True, slots=True)
class InclusionProof:
    checkpoint: Checkpoint
    topic: str
    partition: int
    seq: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: bytes
    prev_hash: bytes
    path: tuple[bytes, ...]

    def record_hash(self) -> bytes:
        canonical = canonical_bytes(
            self.topic, self.partition, self.offset, self.key, self.value, self.headers, self.timestamp_ms
        )
        return link(self.prev_hash, canonical)

    def to_bytes(self) -> bytes:
        return (
            canonical_json(
                {
                    "format": FORMAT,
                    "checkpoint": json.loads(self.checkpoint.to_bytes()),
                    "topic": self.topic,
                    "partition": self.partition,
                    "seq": self.seq,
                    "offset": self.offset,
                    "timestamp_ms": self.timestamp_ms,
                    "key": None if self.key is None else base64.b64encode(self.key).decode(),
                    "value": base64.b64encode(self.value).decode(),
                    "headers": base64.b64encode(self.headers).decode(),
                    "prev_hash": self.prev_hash.hex(),
                    "path": [node.hex() for node in self.path],
                }
            )
            + b"\n"
        )

    @classmethod
    def for_record(cls, checkpoint: Checkpoint, record: ArchivedRecord, path: list[bytes]) -> InclusionProof:
        return cls(
            checkpoint,
            record.topic,
            record.partition,
            record.seq,
            record.offset,
            record.timestamp_ms,
            record.key,
            record.value,
            record.headers,
            record.prev_hash,
            tuple(path),
        )


def problems(proof: InclusionProof, keys: Mapping[str, Ed25519PublicKey]) -> list[str]:
    """Why ``proof`` does not hold under the trusted ``keys`` (empty: it holds)."""
    checkpoint = proof.checkpoint
    bad = checkpoint.signature_problem(keys)
    if bad is not None:
        return [f"checkpoint #{checkpoint.seq}: {bad}"]
    head = checkpoint.head((proof.topic, proof.partition))
    if head is None:
        return [f"checkpoint #{checkpoint.seq} signs no head of {proof.topic}[{proof.partition}]"]
    if not 0 <= proof.seq <= head.seq:
        return [f"seq {proof.seq} is not among the {head.seq + 1} records checkpoint #{checkpoint.seq} signs"]
    digest = proof.record_hash()
    root = root_from_path(leaf_hash(digest), proof.seq, head.seq + 1, proof.path)
    if root is None:
        return [f"the path has {len(proof.path)} hashes, not what seq {proof.seq} of {head.seq + 1} records needs"]
    if root != head.root:
        return [
            f"the record's leaf and path lead to root {root.hex()[:16]}, not the root {head.root.hex()[:16]} that"
            f" checkpoint #{checkpoint.seq} signs for {proof.topic}[{proof.partition}]: the record or the path"
            " was changed"
        ]
    return []


def parse_proof(data: bytes, *, source: str) -> InclusionProof:
    """A proof from its file's bytes; ``CheckpointError`` naming ``source`` and the field when it is not one."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{source}: not JSON: {error}") from None
    if not isinstance(document, dict):
        raise CheckpointError(f"{source}: a proof is a JSON object")
    missing = sorted(_KEYS - document.keys())
    unknown = sorted(document.keys() - _KEYS)
    if missing or unknown:
        name, why = (missing[0], "missing") if missing else (unknown[0], "not a field of a proof")
        raise CheckpointError(f"{source}: field {name!r}: {why}")
    if document["format"] != FORMAT:
        raise CheckpointError(f"{source}: field 'format': {document['format']!r} is not {FORMAT!r}")
    checkpoint = parse(canonical_json(document["checkpoint"]), source=f"{source}: field 'checkpoint'")
    if not isinstance(document["topic"], str) or not document["topic"]:
        raise CheckpointError(f"{source}: field 'topic': a topic name")
    path = document["path"]
    if not isinstance(path, list) or len(path) > 64:
        raise CheckpointError(f"{source}: field 'path': a list of at most 64 hashes")
    return InclusionProof(
        checkpoint=checkpoint,
        topic=document["topic"],
        partition=_integer(document, "partition", source),
        seq=_integer(document, "seq", source),
        offset=_integer(document, "offset", source),
        timestamp_ms=_integer(document, "timestamp_ms", source, low=-(2**63)),
        key=None if document["key"] is None else _base64(document, "key", source),
        value=_base64(document, "value", source),
        headers=_base64(document, "headers", source),
        prev_hash=_hash(document["prev_hash"], "prev_hash", source),
        path=tuple(_hash(node, f"path[{i}]", source) for i, node in enumerate(path)),
    )


def _integer(document: dict[str, Any], name: str, source: str, *, low: int = 0) -> int:
    value = document[name]
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value < 2**63:
        raise CheckpointError(f"{source}: field {name!r}: an integer from {low} to 2**63-1")
    return value


def _base64(document: dict[str, Any], name: str, source: str) -> bytes:
    value = document[name]
    try:
        if not isinstance(value, str):
            raise ValueError("not a string")
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raise CheckpointError(f"{source}: field {name!r}: not base64") from None


def _hash(value: object, name: str, source: str) -> bytes:
    if not isinstance(value, str) or len(value) != 64:
        raise CheckpointError(f"{source}: field {name!r}: not 64 hex digits")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise CheckpointError(f"{source}: field {name!r}: not 64 hex digits") from None
