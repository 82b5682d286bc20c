"""Signed checkpoints of the audit archive, their Merkle trees, files, keys and inclusion proofs, and the
redaction of credentials: the pure parts against independent computations, the file parts in a
temporary directory."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import logging
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from events.audit import merkle
from events.audit.chain import ArchivedRecord, extend
from events.audit.checkpoint import (
    CheckpointError,
    Fault,
    PartitionHead,
    behind,
    check_series,
    file_name,
    key_id,
    moved,
    parse,
    seq_of_file_name,
    sign,
    signed_heads,
)
from events.audit.checkpoint_files import (
    CheckpointDir,
    KeyFileError,
    load_checkpoints,
    load_public_key,
    load_signing_key,
    trusted,
    write_key_pair,
)
from events.audit.checkpointer import Checkpointer
from events.audit.proof import InclusionProof, parse_proof, problems
from events.audit.redact import REDACTED, redact_headers
from events.plumbing.outage import Unreachable

pytestmark = pytest.mark.timeout(120)

KEY = Ed25519PrivateKey.from_private_bytes(bytes(32))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes([7]) * 32)
KEYS = trusted([KEY.public_key()])


# --- RFC 6962 Merkle trees, against the RFC's recursive definitions ---------------------------------


def mth(data: list[bytes]) -> bytes:
    """RFC 6962 section 2.1 MTH, as written there."""
    if not data:
        return hashlib.sha256(b"").digest()
    if len(data) == 1:
        return hashlib.sha256(b"\x00" + data[0]).digest()
    k = 1
    while k * 2 < len(data):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(data[:k]) + mth(data[k:])).digest()


def rfc_path(m: int, data: list[bytes]) -> list[bytes]:
    """RFC 6962 section 2.1.1 PATH, as written there."""
    if len(data) <= 1:
        return []
    k = 1
    while k * 2 < len(data):
        k *= 2
    if m < k:
        return [*rfc_path(m, data[:k]), mth(data[k:])]
    return [*rfc_path(m - k, data[k:]), mth(data[:k])]


def test_the_empty_tree_and_one_leaf_are_as_rfc_6962_defines_them() -> None:
    assert merkle.root_of([]) == hashlib.sha256(b"").digest()
    # RFC 6962 section 2.1: a leaf is hashed with a 0x00 prefix, so a one-leaf tree is not the data's hash.
    assert merkle.root_of([merkle.leaf_hash(b"x")]) == hashlib.sha256(b"\x00x").digest()


@settings(max_examples=120, deadline=None)
@given(size=st.integers(0, 70), data=st.data())
def test_roots_frontiers_and_audit_paths_agree_with_the_rfc(size: int, data: st.DataObject) -> None:
    leaves_data = [hashlib.sha256(str(i).encode()).digest() for i in range(size)]
    leaves = [merkle.leaf_hash(d) for d in leaves_data]
    frontier = merkle.Frontier.of(leaves)
    assert frontier.root() == mth(leaves_data)
    again = merkle.Frontier.from_bytes(size, frontier.to_bytes())
    assert again.root() == frontier.root()
    if size == 0:
        return
    m = data.draw(st.integers(0, size - 1))
    path = merkle.inclusion_path(leaves, m, size)
    assert path == rfc_path(m, leaves_data)
    assert merkle.root_from_path(leaves[m], m, size, path) == mth(leaves_data)
    # A path for another leaf, or one hash short, or against a larger tree, proves nothing.
    wrong = merkle.leaf_hash(b"not a leaf")
    assert merkle.root_from_path(wrong, m, size, path) != mth(leaves_data)
    if path:
        assert merkle.root_from_path(leaves[m], m, size, path[:-1]) != mth(leaves_data)
    assert merkle.root_from_path(leaves[m], m, size + 1, path) != mth([*leaves_data, b"one more"])


def test_a_frontier_of_the_wrong_shape_is_refused_naming_why() -> None:
    with pytest.raises(ValueError, match="perfect subtrees"):
        merkle.Frontier(3, [bytes(32)])
    with pytest.raises(ValueError, match="whole number"):
        merkle.Frontier.from_bytes(1, bytes(31))
    with pytest.raises(ValueError, match="outside a tree"):
        merkle.path_ranges(5, 5)


# --- checkpoints: bytes, signature, parsing ----------------------------------------------------------


def head(topic: str, partition: int, seq: int, fill: int = 1) -> PartitionHead:
    return PartitionHead(topic, partition, seq, seq * 2, bytes([fill]) * 32, bytes([fill + 1]) * 32)


def test_the_signed_message_is_the_documented_canonical_json_and_verifies_with_the_raw_public_key() -> None:
    checkpoint = sign(None, [head("t", 1, 4), head("a", 0, 0, 9)], 1_700_000_000_000, KEY)
    raw_public = bytes.fromhex("3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29")
    assert key_id(KEY.public_key()) == hashlib.sha256(raw_public).hexdigest()[:16] == checkpoint.key_id
    expected_body = (
        '{"format":"fedsched-audit-checkpoint/1","key_id":"' + checkpoint.key_id + '","made_at_ms":1700000000000,'
        '"partitions":[{"hash":"' + "09" * 32 + '","offset":0,"partition":0,"root":"' + "0a" * 32 + '","seq":0,'
        '"topic":"a"},{"hash":"' + "01" * 32 + '","offset":8,"partition":1,"root":"' + "02" * 32 + '","seq":4,'
        '"topic":"t"}],"previous":"","seq":0}'
    )
    assert checkpoint.message() == b"fedsched-audit-checkpoint/1\n" + expected_body.encode()
    Ed25519PublicKey.from_public_bytes(raw_public).verify(checkpoint.signature, checkpoint.message())
    assert checkpoint.digest() == hashlib.sha256(checkpoint.message()).digest()
    file = checkpoint.to_bytes()
    assert file.endswith(b"}\n")
    assert json.loads(file)["signature"] == checkpoint.signature.hex()
    assert parse(file, source="f") == checkpoint
    # Whitespace does not matter to a reader: the signature is over the canonical form of the fields.
    spaced = json.dumps(json.loads(file), indent=2).encode()
    assert parse(spaced, source="f").signature_problem(KEYS) is None


def test_checkpoints_chain_by_digest_and_number() -> None:
    first = sign(None, [head("t", 0, 1)], 1, KEY)
    second = sign(first, [head("t", 0, 3)], 2, KEY)
    assert (second.seq, second.previous) == (1, first.digest())
    assert check_series([("a", first), ("b", second)]) == []


def test_a_changed_field_or_another_key_breaks_the_signature() -> None:
    checkpoint = sign(None, [head("t", 0, 1)], 1, KEY)
    forged = json.loads(checkpoint.to_bytes())
    forged["partitions"][0]["seq"] = 2
    assert "does not verify" in str(parse(json.dumps(forged).encode(), source="f").signature_problem(KEYS))
    by_other = sign(None, [head("t", 0, 1)], 1, OTHER)
    assert "not a trusted key" in str(by_other.signature_problem(KEYS))
    assert by_other.signature_problem(trusted([KEY.public_key(), OTHER.public_key()])) is None


def _good() -> dict[str, object]:
    document: dict[str, object] = json.loads(sign(None, [head("t", 0, 1), head("u", 0, 1)], 1, KEY).to_bytes())
    return document


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("made_at_ms"), "'made_at_ms': missing"),
        (lambda d: d.update(extra=1), "'extra': not a field"),
        (lambda d: d.update(seq=True), "'seq': an integer"),
        (lambda d: d.update(seq=-1), "'seq': an integer"),
        (lambda d: d.update(seq=2**53), "'seq': an integer"),
        (lambda d: d.update(previous="00" * 32), "'previous': empty exactly when seq is 0"),
        (lambda d: d.update(key_id="XYZ"), "'key_id'"),
        (lambda d: d.update(format="other/1"), "'format'"),
        (lambda d: d.update(signature="00"), "'signature'"),
        (lambda d: d["partitions"].reverse(), "sorted by topic and partition"),
        (lambda d: d["partitions"][0].update(hash="AB" * 32), "'partitions[0].hash'"),
        (lambda d: d["partitions"][1].pop("root"), "'partitions[1].root': missing"),
        (lambda d: d["partitions"][0].update(topic=""), "'partitions[0].topic'"),
        (lambda d: d.update(partitions={}), "'partitions'"),
    ],
)
def test_a_malformed_checkpoint_is_refused_naming_the_field(change: object, field: str) -> None:
    document = _good()
    change(document)  # type: ignore[operator]
    with pytest.raises(CheckpointError, match=r"^somewhere: ") as raised:
        parse(json.dumps(document).encode(), source="somewhere")
    assert field in str(raised.value)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"not json", "not JSON"),
        (b"[]", "JSON object"),
        (b'{"seq": 1.5}', "not an integer"),
        (b'{"seq": 1, "seq": 2}', "appears twice"),
        (b'{"seq": NaN}', "not an integer"),
    ],
)
def test_bytes_that_are_not_a_checkpoint_are_refused(raw: bytes, why: str) -> None:
    with pytest.raises(CheckpointError, match=why):
        parse(raw, source="x")


def test_a_series_names_gaps_forks_and_partitions_signed_behind() -> None:
    c0 = sign(None, [head("t", 0, 5), head("u", 0, 1)], 1, KEY)
    c1 = sign(c0, [head("t", 0, 6), head("u", 0, 1)], 2, KEY)
    c2 = sign(c1, [head("t", 0, 7), head("u", 0, 1)], 3, KEY)
    assert [p.kind for p in check_series([("0", c0), ("2", c2)])] == [Fault.GAP]
    stranger = sign(None, [head("t", 0, 9)], 9, KEY)
    fork = sign(stranger, [head("t", 0, 9), head("u", 0, 1)], 9, KEY)  # number 1, but not after c0
    assert [p.kind for p in check_series([("0", c0), ("1", fork)])] == [Fault.FORK]
    behind_c1 = sign(c1, [head("t", 0, 2)], 3, KEY)  # t[0] back to seq 2, u[0] gone
    kinds = [p.kind for p in check_series([("0", c0), ("1", c1), ("2", behind_c1)])]
    assert kinds == [Fault.REWOUND, Fault.REWOUND]
    assert behind(c1, [head("t", 0, 6, fill=3), head("u", 0, 1)]) == [
        f"t[0] at seq 6 differs from what checkpoint #{c1.seq} signed"
    ]


def test_heads_moved_only_when_a_partition_other_than_the_checkpoints_own_moved() -> None:
    c0 = sign(None, [head("t", 0, 5), head("fedsched.audit", 0, 0)], 1, KEY)
    assert not moved(c0, [head("t", 0, 5), head("fedsched.audit", 0, 1)], ignore_topics=["fedsched.audit"])
    assert moved(c0, [head("t", 0, 6), head("fedsched.audit", 0, 0)], ignore_topics=["fedsched.audit"])
    assert moved(c0, [head("t", 0, 5), head("v", 0, 0)], ignore_topics=["fedsched.audit"])
    assert moved(None, [head("t", 0, 0)]) and not moved(None, [])


def test_signed_heads_keep_each_distinct_head_once_with_the_first_checkpoint_that_signed_it() -> None:
    c0 = sign(None, [head("t", 0, 5), head("u", 0, 1)], 1, KEY)
    c1 = sign(c0, [head("t", 0, 6), head("u", 0, 1)], 2, KEY)
    heads = signed_heads([c1, c0])
    assert [(s.checkpoint, s.seq) for s in heads[("t", 0)]] == [(0, 5), (1, 6)]
    assert [(s.checkpoint, s.seq) for s in heads[("u", 0)]] == [(0, 1)]


def test_file_names_sort_as_numbers_and_say_their_number() -> None:
    assert file_name(42) == "checkpoint-000000000042.json"
    assert seq_of_file_name(file_name(42)) == 42
    assert seq_of_file_name("checkpoint-7.json") == 7
    assert seq_of_file_name(".checkpoint-000000000042.json.1.tmp") is None
    assert sorted(file_name(n) for n in (10, 9, 100)) == [file_name(9), file_name(10), file_name(100)]


# --- redaction ----------------------------------------------------------------------------------------


def test_credentials_are_redacted_in_any_case_and_nothing_else_changes() -> None:
    headers = (
        ("ce_type", b"io.fedsched.JobSubmitted"),
        ("ce_authorization", b"Bearer eyJ.secret"),
        ("Authorization", b"Bearer other"),
        ("CE_Authorization", b"x"),
        ("ce_authorizationx", b"kept"),
    )
    assert redact_headers(headers) == (
        ("ce_type", b"io.fedsched.JobSubmitted"),
        ("ce_authorization", REDACTED),
        ("Authorization", REDACTED),
        ("CE_Authorization", REDACTED),
        ("ce_authorizationx", b"kept"),
    )
    plain = (("ce_type", b"t"),)
    assert redact_headers(plain) is plain


# --- inclusion proofs ---------------------------------------------------------------------------------


def a_proof(size: int = 11, index: int = 6) -> tuple[list[ArchivedRecord], InclusionProof]:
    rows = [(3 * i, f"k{i}".encode(), f"value {i}".encode(), b"", 1_000 + i) for i in range(size)]
    records = list(extend(None, "fedsched.decisions", 0, rows))
    leaves = [merkle.leaf_hash(r.hash) for r in records]
    last = records[-1]
    checkpoint = sign(
        None,
        [PartitionHead("fedsched.decisions", 0, last.seq, last.offset, last.hash, merkle.root_of(leaves))],
        5,
        KEY,
    )
    path = merkle.inclusion_path(leaves, index, size)
    return records, InclusionProof.for_record(checkpoint, records[index], path)


def test_an_inclusion_proof_holds_offline_and_survives_its_file() -> None:
    _, proof = a_proof()
    assert problems(proof, KEYS) == []
    again = parse_proof(proof.to_bytes(), source="p")
    assert again == proof
    assert problems(again, KEYS) == []


@pytest.mark.parametrize("size, index", [(1, 0), (2, 1), (7, 0), (7, 6), (64, 33)])
def test_proofs_hold_at_every_shape_of_tree(size: int, index: int) -> None:
    _, proof = a_proof(size, index)
    assert problems(proof, KEYS) == []


def test_a_changed_record_path_or_key_makes_the_proof_fail() -> None:
    _, proof = a_proof()
    import dataclasses

    assert "was changed" in problems(dataclasses.replace(proof, value=b"value 7"), KEYS)[0]
    assert "was changed" in problems(dataclasses.replace(proof, offset=proof.offset + 1), KEYS)[0]
    bent = (proof.path[0][::-1], *proof.path[1:])
    assert "was changed" in problems(dataclasses.replace(proof, path=bent), KEYS)[0]
    assert "not what seq" in problems(dataclasses.replace(proof, path=proof.path[:-1]), KEYS)[0]
    assert "not a trusted key" in problems(proof, trusted([OTHER.public_key()]))[0]
    assert "not among" in problems(dataclasses.replace(proof, seq=11), KEYS)[0]


def test_a_malformed_proof_file_is_refused_naming_the_field() -> None:
    _, proof = a_proof()
    document = json.loads(proof.to_bytes())
    document["path"][0] = "zz"
    with pytest.raises(CheckpointError, match=r"'path\[0\]'"):
        parse_proof(json.dumps(document).encode(), source="p")
    document = json.loads(proof.to_bytes())
    document["checkpoint"]["seq"] = "one"
    with pytest.raises(CheckpointError, match=r"field 'checkpoint'.*'seq'"):
        parse_proof(json.dumps(document).encode(), source="p")
    document = json.loads(proof.to_bytes())
    del document["value"]
    with pytest.raises(CheckpointError, match="'value': missing"):
        parse_proof(json.dumps(document).encode(), source="p")


# --- files and keys -----------------------------------------------------------------------------------


def test_a_checkpoint_file_is_written_once_whole_and_never_replaced(tmp_path: Path) -> None:
    directory = CheckpointDir(tmp_path / "cp")
    directory.ensure()
    first = sign(None, [head("t", 0, 1)], 1, KEY)
    path = directory.write(first)
    assert path.name == "checkpoint-000000000000.json"
    assert path.read_bytes() == first.to_bytes()
    rival = sign(None, [head("t", 0, 2)], 2, KEY)
    with pytest.raises(FileExistsError):
        directory.write(rival)
    assert path.read_bytes() == first.to_bytes()
    assert sorted(p.name for p in directory.path.iterdir()) == [path.name]  # no temporary file left
    assert directory.newest() == (str(path), first)


def test_reading_a_directory_reports_unreadable_and_misnamed_checkpoints(tmp_path: Path) -> None:
    c0 = sign(None, [head("t", 0, 1)], 1, KEY)
    c1 = sign(c0, [head("t", 0, 2)], 2, KEY)
    c2 = sign(c1, [head("t", 0, 3)], 3, KEY)
    directory = CheckpointDir(tmp_path)
    for c in (c0, c1, c2):
        directory.write(c)
    (tmp_path / file_name(1)).write_bytes(b"{garbage")
    (tmp_path / "checkpoint-000000000009.json").write_bytes(c2.to_bytes())  # c2's body under #9's name
    (tmp_path / "notes.txt").write_text("ignored")
    valid, found = load_checkpoints(KEYS, directory=tmp_path)
    assert [c.seq for c in valid] == [0, 2]
    assert [(p.kind, p.checkpoint) for p in found] == [(Fault.UNREADABLE, 1), (Fault.GAP, 2), (Fault.UNREADABLE, 9)]
    assert "the file's name says 9" in str(found[2])


def test_a_key_pair_is_made_with_a_private_file_only_its_owner_reads(tmp_path: Path) -> None:
    private, public = tmp_path / "archiver.key", tmp_path / "archiver.key.pub"
    made = write_key_pair(private, public)
    assert private.stat().st_mode & 0o777 == 0o600
    key = load_signing_key(private)
    assert key_id(key.public_key()) == key_id(made) == key_id(load_public_key(str(public)))
    raw = made.public_bytes_raw().hex()
    assert key_id(load_public_key(raw)) == key_id(made)
    with pytest.raises(FileExistsError):
        write_key_pair(private, tmp_path / "other.pub")
    assert not (tmp_path / "other.pub").exists()


def test_a_signing_key_others_may_read_is_refused_and_a_group_readable_one_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    private = tmp_path / "k"
    write_key_pair(private, tmp_path / "k.pub")
    os.chmod(private, 0o644)
    with pytest.raises(KeyFileError, match="other users may read"):
        load_signing_key(private)
    os.chmod(private, 0o640)
    with caplog.at_level(logging.WARNING, logger="fedsched.audit"):
        load_signing_key(private)
    assert "group_readable" in caplog.text
    with pytest.raises(KeyFileError, match=r"not an Ed25519 key|not an unencrypted PEM private key"):
        os.chmod(tmp_path / "k.pub", 0o600)
        load_signing_key(tmp_path / "k.pub")
    with pytest.raises(KeyFileError, match="neither a readable file"):
        load_public_key(str(tmp_path / "missing.pem"))


# --- the checkpointer (no log, a clock of our own) ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def checkpointer(directory: Path, clock: Clock, key: Ed25519PrivateKey = KEY) -> Checkpointer:
    cp = CheckpointDir(directory)
    cp.ensure()
    return Checkpointer(key, cp, every_s=60, clock_ms=lambda: int(clock.now * 1000), monotonic=clock)


@pytest.mark.asyncio
async def test_the_checkpointer_signs_when_the_heads_moved_at_its_cadence(tmp_path: Path) -> None:
    clock = Clock()
    signer = checkpointer(tmp_path, clock)
    assert signer.due()
    first = await signer.offer([head("t", 0, 1)])
    assert first is not None and first.seq == 0
    clock.now += 30
    assert not signer.due()
    assert await signer.offer([head("t", 0, 2)]) is None  # too soon at the cadence
    assert await signer.offer([head("t", 0, 2)], at_cadence=False) is not None  # a catch-up signs now
    clock.now += 60
    assert await signer.offer([head("t", 0, 2), head("fedsched.audit", 0, 0)]) is None  # only its own topic
    assert [seq for seq, _ in CheckpointDir(tmp_path).files()] == [0, 1]
    valid, found = load_checkpoints(KEYS, directory=tmp_path)
    assert ([c.seq for c in valid], found) == ([0, 1], [])
    assert valid[1].made_at_ms == 130_000


@pytest.mark.asyncio
async def test_a_restarted_checkpointer_continues_the_series_and_refuses_heads_behind_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    await checkpointer(tmp_path, clock).offer([head("t", 0, 5)])
    again = checkpointer(tmp_path, clock)
    made = await again.offer([head("t", 0, 6)])
    assert made is not None and made.seq == 1
    clock.now += 60
    with caplog.at_level(logging.ERROR, logger="fedsched.audit"):
        assert await again.offer([head("t", 0, 3)]) is None  # the archive was rewound under it
    assert again.refused_total == 1
    assert "behind seq 6" in caplog.text


@pytest.mark.asyncio
async def test_two_checkpointers_on_one_directory_never_sign_one_number_twice(tmp_path: Path) -> None:
    clock = Clock()
    one, two = checkpointer(tmp_path, clock), checkpointer(tmp_path, clock)
    assert (await one.offer([head("t", 0, 1)])) is not None
    assert await two.offer([head("t", 0, 1)], at_cadence=False) is None  # it read #0: nothing moved
    assert (await one.offer([head("t", 0, 2)], at_cadence=False)) is not None  # #1
    # ``two`` still believes #0 is the newest: its #1 is refused by the directory, then it signs #2.
    assert await two.offer([head("t", 0, 3)], at_cadence=False) is None
    made = await two.offer([head("t", 0, 3)], at_cadence=False)
    assert made is not None and made.seq == 2
    valid, found = load_checkpoints(KEYS, directory=tmp_path)
    assert ([c.seq for c in valid], found) == ([0, 1, 2], [])


@pytest.mark.asyncio
async def test_a_checkpointer_whose_newest_checkpoint_is_unreadable_signs_nothing(tmp_path: Path) -> None:
    clock = Clock()
    await checkpointer(tmp_path, clock).offer([head("t", 0, 1)])
    (tmp_path / file_name(0)).write_bytes(b"{}")
    signer = checkpointer(tmp_path, clock)
    assert await signer.offer([head("t", 0, 2)]) is None
    assert signer.refused_total == 1
    assert [seq for seq, _ in CheckpointDir(tmp_path).files()] == [0]


@pytest.mark.asyncio
async def test_a_new_key_continues_the_series_of_the_old_one(tmp_path: Path) -> None:
    clock = Clock()
    await checkpointer(tmp_path, clock).offer([head("t", 0, 1)])
    made = await checkpointer(tmp_path, clock, key=OTHER).offer([head("t", 0, 2)])
    assert made is not None and made.seq == 1
    both = trusted([KEY.public_key(), OTHER.public_key()])
    valid, found = await asyncio.to_thread(load_checkpoints, both, directory=tmp_path)
    assert ([c.seq for c in valid], found) == ([0, 1], [])


# --- purity --------------------------------------------------------------------------------------------

PURE = ["chain", "merkle", "checkpoint", "proof", "redact"]
ALLOWED = {"__future__", "hashlib", "struct", "json", "re", "base64", "binascii", "itertools", "collections"}
ALLOWED |= {"dataclasses", "enum", "types", "typing", "cryptography", "events"}
IMPURE: tuple[str, ...] = ("events.log", "events.hosting", "events.plumbing", "events.audit.archive")
IMPURE += ("events.audit.checkpoint_files", "events.audit.checkpointer", "events.audit.reader")


@pytest.mark.parametrize("module", PURE)
def test_the_pure_audit_modules_import_no_io_clock_or_randomness(module: str) -> None:
    source = Path(__file__).parents[3] / "events" / "audit" / f"{module}.py"
    names = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    assert names
    for name in names:
        assert name.split(".")[0] in ALLOWED, name
        assert not name.startswith(IMPURE), name
        assert name.startswith(("events.audit", "cryptography")) or "." not in name or name.startswith("collections")


@pytest.mark.asyncio
async def test_a_checkpoint_directory_out_of_reach_is_an_outage_of_its_own(tmp_path: Path) -> None:
    clock = Clock()
    signer = checkpointer(tmp_path / "cp", clock)
    (tmp_path / "cp").rmdir()
    (tmp_path / "cp").write_text("a file where the directory was")
    with pytest.raises(Unreachable) as raised:
        await signer.offer([head("t", 0, 1)])
    assert raised.value.dependency == "checkpoint-dir"
    assert signer.made_total == 0
