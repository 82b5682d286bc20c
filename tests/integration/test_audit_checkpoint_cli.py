"""``fedsched audit keygen``, ``archive --signing-key``, ``chain --verify --public-key`` and ``proof`` as an
operator and an auditor run them, on the embedded log and archive in a real PostgreSQL."""

from __future__ import annotations

import json
import os
from pathlib import Path

import asyncpg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.audit.archive import iter_archive
from events.audit.chain import GENESIS, canonical_bytes, link
from events.audit.checkpoint import CONTENT_TYPE, parse
from events.catalog.jobs import JobStarted
from events.catalog.topics import AUDIT, INTAKE, JOBS, TOPICS
from events.catalog.types import ClusterId, JobId
from events.log import OutRecord, TopicPartition, open_log
from events.log.headers import unpack_headers
from events.wire import codec
from events.wire.envelope import Envelope
from tests.cli import fedsched

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(300)]


async def publish(dsn: str, start: int, count: int) -> None:
    log = open_log(dsn)
    await log.start()
    await log.create_topics(TOPICS)
    producer = await log.producer()
    records = []
    for i in range(start, start + count):
        wire = codec.encode(
            Envelope(id=f"e{i}", time_ms=1_000 + i, data=JobStarted(job_id=JobId(f"job-{i}"), cluster=ClusterId("c1")))
        )
        records.append(OutRecord(wire.topic, value=wire.value, key=wire.key, headers=wire.headers))
    # A request on the intake topic as an MLOps client sends it, with the caller's token.
    records.append(
        OutRecord(
            INTAKE.name,
            value=b"{}",
            key=f"req-{start}".encode(),
            headers=(("ce_type", b"io.fedsched.JobSubmitted"), ("ce_authorization", b"Bearer eyJhbGciOi.secret")),
        )
    )
    await producer.append(records)
    await producer.close()
    await log.close()


async def test_an_operator_signs_the_archive_and_an_auditor_verifies_it_and_proves_a_record(
    fresh_database: str, tmp_path: Path
) -> None:
    key, public, checkpoints = tmp_path / "archiver.key", tmp_path / "archiver.key.pub", tmp_path / "checkpoints"
    code, out = await fedsched("audit", "keygen", "--out", str(key), dsn=fresh_database)
    assert code == 0, out
    assert key.stat().st_mode & 0o777 == 0o600 and public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert "key id" in out and "-----BEGIN PUBLIC KEY-----" in out and "PRIVATE" not in out
    code, out = await fedsched("audit", "keygen", "--out", str(key), dsn=fresh_database)
    assert code == 2 and "never replaced" in out

    await publish(fresh_database, 0, 25)
    sign = ("--signing-key", str(key), "--checkpoint-dir", str(checkpoints))
    code, out = await fedsched("audit", "archive", "--once", *sign, dsn=fresh_database)
    assert code == 0, out
    assert "archived 26 records" in out and "signed checkpoint #0" in out
    (first,) = sorted(checkpoints.iterdir())
    checkpoint = parse(first.read_bytes(), source=str(first))

    # The checkpoint is on the log too, byte for byte; archived by the next pass, which signs nothing new
    # (only the checkpoints' own topic moved).
    code, out = await fedsched("audit", "archive", "--once", *sign, dsn=fresh_database)
    assert code == 0 and "archived 1 records" in out and "signed" not in out, out
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    try:
        (on_log,) = [r async for r in iter_archive(pool, TopicPartition(AUDIT.name, 0))]
        assert on_log.value == first.read_bytes()
        assert dict(unpack_headers(on_log.headers))["content-type"] == CONTENT_TYPE
        intake = [r for p in range(INTAKE.partitions) async for r in iter_archive(pool, TopicPartition(INTAKE.name, p))]
        assert [dict(unpack_headers(r.headers))["ce_authorization"] for r in intake] == [b"redacted"]
        target = next(h for h in checkpoint.partitions if h.topic == JOBS.name)
    finally:
        await pool.close()

    verify = ("audit", "chain", "--verify", "--public-key", str(public), "--checkpoint-dir", str(checkpoints))
    code, out = await fedsched(*verify, "--json", dsn=fresh_database)
    assert code == 0, out
    report = json.loads(out)
    assert (report["ok"], report["records"], report["checkpoints"], report["problems"]) == (True, 27, 1, [])
    assert report["newest_checkpoint"]["seq"] == 0 and report["unsigned_records"] == 1 and report["note"] is None
    code, out = await fedsched(*verify, dsn=fresh_database)
    assert code == 0 and "OK: 27 records" in out and "checked against 1 signed checkpoints, the newest #0" in out

    # An auditor proves one record offline.
    proof_file = tmp_path / "proof.json"
    code, out = await fedsched(
        "audit", "proof", "--topic", JOBS.name, "--partition", str(target.partition), "--offset", str(target.offset),
        "--checkpoint", str(first), "--public-key", str(public), "--out", str(proof_file), dsn=fresh_database,
    )  # fmt: skip
    assert code == 0, out
    check = ("audit", "proof", "--check", str(proof_file), "--public-key", str(public))
    code, out = await fedsched(*check, dsn="postgresql://nowhere.invalid/none")  # no database needed
    assert code == 0, out
    assert f"OK: the record at {JOBS.name}[{target.partition}] seq {target.seq}" in out
    assert "io.fedsched.JobStarted" in out and "checkpoint #0" in out
    document = json.loads(proof_file.read_text())
    document["value"] = document["value"][:-4] + "AAAA"
    proof_file.write_text(json.dumps(document))
    code, out = await fedsched(*check, "--json", dsn=fresh_database)
    assert code == 1 and json.loads(out)["ok"] is False and "was changed" in json.loads(out)["problems"][0]

    # An intruder rewrites the tail of that partition with recomputed hashes (and its head rows): the
    # keyless chain cannot tell, the signed checkpoint can.
    await rewrite_tail(fresh_database, JOBS.name, target.partition)
    code, out = await fedsched("audit", "chain", "--verify", dsn=fresh_database)
    assert code == 0 and "note: no signed checkpoint was checked" in out, out
    code, out = await fedsched(*verify, dsn=fresh_database)
    assert code == 1, out
    assert f"rewritten: {JOBS.name}[{target.partition}] seq 0" in out


async def rewrite_tail(dsn: str, topic: str, partition: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT * FROM fedsched_audit WHERE topic = $1 AND partition = $2 ORDER BY seq", topic, partition
        )
        pool_rows = [dict(r) for r in rows]
        previous = GENESIS
        for r in pool_rows:
            if r["seq"] == 0:
                r["value"] = b'{"forged": true}'
            digest = link(
                previous,
                canonical_bytes(
                    topic, partition, r["offset"], r["key"], bytes(r["value"]), bytes(r["headers"]), r["timestamp_ms"]
                ),
            )
            r["prev_hash"], r["hash"], previous = previous, digest, digest
        async with conn.transaction():
            await conn.execute("SET LOCAL session_replication_role = replica")
            await conn.execute("DELETE FROM fedsched_audit WHERE topic = $1 AND partition = $2", topic, partition)
            for r in pool_rows:
                await conn.execute(
                    'INSERT INTO fedsched_audit (topic, partition, seq, "offset", key, value, headers, timestamp_ms,'
                    " prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    topic, partition, r["seq"], r["offset"], r["key"], r["value"], r["headers"], r["timestamp_ms"],
                    r["prev_hash"], r["hash"],
                )  # fmt: skip
            by_seq = {r["seq"]: r for r in pool_rows}
            heads = await conn.fetch(
                "SELECT seq FROM fedsched_audit_heads WHERE topic = $1 AND partition = $2", topic, partition
            )
            await conn.execute("DELETE FROM fedsched_audit_heads WHERE topic = $1 AND partition = $2", topic, partition)
            for h in heads:
                r = by_seq[h["seq"]]
                await conn.execute(
                    'INSERT INTO fedsched_audit_heads (topic, partition, seq, "offset", hash)'
                    " VALUES ($1, $2, $3, $4, $5)",
                    topic, partition, r["seq"], r["offset"], r["hash"],
                )  # fmt: skip
    finally:
        await conn.close()


async def test_the_archiver_takes_its_key_from_the_environment_and_refuses_a_bad_setup(
    fresh_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "k"
    code, out = await fedsched(
        "audit", "keygen", "--out", str(key), "--public-out", str(tmp_path / "p.pem"), dsn=fresh_database
    )
    assert code == 0, out
    await publish(fresh_database, 0, 3)

    code, out = await fedsched("audit", "archive", "--once", "--signing-key", str(key), dsn=fresh_database)
    assert code == 2 and "needs a checkpoint directory" in out
    code, out = await fedsched("audit", "archive", "--once", "--checkpoint-dir", str(tmp_path), dsn=fresh_database)
    assert code == 2 and "needs a signing key" in out
    os.chmod(key, 0o644)
    code, out = await fedsched(
        "audit",
        "archive",
        "--once",
        "--signing-key",
        str(key),
        "--checkpoint-dir",
        str(tmp_path / "c"),
        dsn=fresh_database,
    )
    assert code == 2 and "other users may read" in out
    os.chmod(key, 0o600)

    monkeypatch.setenv("FEDSCHED_AUDIT_SIGNING_KEY_FILE", str(key))
    monkeypatch.setenv("FEDSCHED_AUDIT_CHECKPOINT_DIR", str(tmp_path / "c"))
    code, out = await fedsched("audit", "archive", "--once", dsn=fresh_database)
    assert code == 0 and "signed checkpoint #0" in out, out
    monkeypatch.delenv("FEDSCHED_AUDIT_SIGNING_KEY_FILE")
    monkeypatch.delenv("FEDSCHED_AUDIT_CHECKPOINT_DIR")

    verify = ("audit", "chain", "--verify", "--public-key", str(tmp_path / "p.pem"))
    code, out = await fedsched(*verify, dsn=fresh_database)
    assert code == 2 and "needs --checkpoint-dir" in out
    code, out = await fedsched(*verify, "--checkpoint-dir", str(tmp_path / "empty-does-not-exist"), dsn=fresh_database)
    assert code == 2 and "not a directory" in out
    (tmp_path / "empty").mkdir()
    code, out = await fedsched(*verify, "--checkpoint-dir", str(tmp_path / "empty"), dsn=fresh_database)
    assert code == 3 and "no checkpoint in" in out
    code, out = await fedsched(
        *verify, "--checkpoint", str(tmp_path / "c" / "checkpoint-000000000000.json"), dsn=fresh_database
    )
    assert code == 0, out
    stranger = Ed25519PrivateKey.generate().public_key().public_bytes_raw().hex()
    code, out = await fedsched(
        "audit",
        "chain",
        "--verify",
        "--public-key",
        stranger,
        "--checkpoint-dir",
        str(tmp_path / "c"),
        dsn=fresh_database,
    )
    assert code == 1 and "bad-signature: checkpoint #0" in out and "not a trusted key" in out
