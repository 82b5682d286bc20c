"""Replays an operator runs after the soak, each as the ``fedsched`` command in its own process:
``audit verify`` under a PYTHONHASHSEED no component ran with; ``projections rebuild`` from offset 0
into another schema, whose tables are then compared row by row with the live read models; and ``audit
chain --verify`` against the checkpoints the archiver signed (with the key ``keygen`` made at the start).

Called by the soak's run once every component has stopped. Calls the CLI (``services.cli.main``) and,
for the rows that differ, the read models' tables as the reader names them
(``projections.readmodel.rows.tables``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from projections.readmodel.rows.tables import ALL, SCHEMA
from tests.soak.backing import ROOT

REBUILD_SCHEMA = "fedsched_rm_soak_rebuild"
_EXAMPLES = 4


@dataclass
class Verified:
    hash_seed: int
    exit_code: int
    report: dict[str, Any]
    stderr: str

    @property
    def identical_pct(self) -> float | None:
        value = self.report.get("identical_pct")
        return float(value) if isinstance(value, int | float) else None

    def problems(self, cycles_in_log: int) -> list[str]:
        out = []
        if self.exit_code != 0 or self.identical_pct != 100.0:
            out.append(
                f"audit verify (PYTHONHASHSEED={self.hash_seed}) exited {self.exit_code}: "
                f"{self.identical_pct}% identical; stderr: {self.stderr[-400:]!r}"
            )
        out += [f"differs: {json.dumps(d)[:400]}" for d in self.report.get("differences", [])[:_EXAMPLES]]
        out += [f"problem: {json.dumps(p)[:400]}" for p in self.report.get("problems", [])[:_EXAMPLES]]
        cycles = self.report.get("cycles")
        if cycles is not None and cycles != cycles_in_log:
            out.append(f"verify re-executed {cycles} cycles; the log records {cycles_in_log}")
        return out


@dataclass
class Rebuilt:
    exit_code: int
    report: dict[str, Any]
    rows: list[str] = field(default_factory=list)
    """Rows of the differing tables found on one side only (``table: live|rebuilt row``)."""

    @property
    def differing(self) -> list[str]:
        return list(self.report.get("differing", ["(no report)"]))


async def verify(log_url: str, hash_seed: int) -> Verified:
    code, out, err = await _fedsched(
        ["audit", "verify", "--log", log_url, "--json"], {"PYTHONHASHSEED": str(hash_seed)}
    )
    try:
        report = json.loads(out)
    except ValueError:
        report = {}
    return Verified(hash_seed, code, report, err)


async def rebuild(log_url: str, dsn: str) -> Rebuilt:
    argv = ["projections", "rebuild", "--log", log_url, "--dsn", dsn, "--into", REBUILD_SCHEMA, "--json"]
    code, out, err = await _fedsched(argv, {})
    try:
        report = json.loads(out)
    except ValueError:
        report = {"differing": [f"rebuild failed: {err[-400:]}"]}
    result = Rebuilt(code, report)
    if code != 0 and report.get("differing"):
        result.rows = await _differing_rows(dsn, [t for t in report["differing"] if isinstance(t, str)])
    return result


async def keygen(private: Path) -> Path | None:
    """A signing key pair for the archiver's checkpoints; returns the public key's file, or None when this
    fedsched has no ``audit keygen`` (signed checkpoints came with issue 19)."""
    code, _, err = await _fedsched(["audit", "keygen", "--out", str(private)], {})
    if code == 2 and "invalid choice: 'keygen'" in err:
        return None
    if code != 0:
        raise RuntimeError(f"fedsched audit keygen exited {code}: {err[-400:]}")
    return private.with_name(private.name + ".pub")


async def chain(dsn: str, public_key: Path | None, checkpoints: Path) -> list[str]:
    """What ``audit chain --verify`` finds wrong with the archive, checked against every signed checkpoint
    when there is a key."""
    argv = ["audit", "chain", "--verify", "--dsn", dsn, "--json"]
    if public_key is not None:
        argv += ["--public-key", str(public_key), "--checkpoint-dir", str(checkpoints)]
    code, out, err = await _fedsched(argv, {})
    try:
        report = json.loads(out)
    except ValueError:
        return [f"audit chain --verify exited {code}: {err[-400:]}"]
    found = [f"{json.dumps(p)[:400]}" for p in report.get("problems", []) + report.get("checkpoint_problems", [])]
    if code != 0 and not found:
        found.append(f"audit chain --verify exited {code}: {out[-400:]} {err[-400:]}")
    return found


async def _differing_rows(dsn: str, tables: list[str]) -> list[str]:
    """Per differing table, the entities found on one side only and, for those on both, the columns that
    differ with both values."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    out: list[str] = []
    try:
        for table in (t for t in ALL if t.name in tables):
            columns = [name for name, _ in table.columns]
            sides = []
            for schema in (SCHEMA, REBUILD_SCHEMA):
                rows = await pool.fetch(f"SELECT {', '.join(columns)} FROM {schema}.{table.name}")
                sides.append({str(row["entity_key"]): tuple(row) for row in rows})
            live, rebuilt = sides
            for key in sorted(set(live) | set(rebuilt)):
                if key not in rebuilt or key not in live:
                    out.append(f"{table.name} {key}: only in the {'live' if key in live else 'rebuilt'} read model")
                elif live[key] != rebuilt[key]:
                    differing = [
                        f"{name} live {a!r:.80} rebuilt {b!r:.80}"
                        for name, a, b in zip(columns, live[key], rebuilt[key], strict=True)
                        if a != b
                    ]
                    out.append(f"{table.name} {key}: " + "; ".join(differing))
    finally:
        await pool.close()
    return out


async def _fedsched(argv: list[str], env: dict[str, str], timeout_s: float = 1800) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *argv,
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")
