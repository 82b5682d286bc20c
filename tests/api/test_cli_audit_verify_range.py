"""``fedsched audit verify`` claims nothing it did not check: a range without a recorded cycle verifies
nothing (exit 3, said plainly), and a range that ends before it starts is refused (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events.catalog.topics import TOPICS
from events.log import open_log
from services.cli.main import main
from tests.cli import fedsched

pytestmark = pytest.mark.timeout(120)

BACKWARDS = ["--since", "2030-01-02T00:00:00Z", "--until", "2030-01-01T00:00:00Z"]


def test_verify_refuses_a_range_that_ends_before_it_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "verify", "--log", "postgresql://unused", *BACKWARDS]) == 2
    assert "--since 2030-01-02T00:00:00.000Z is later than --until 2030-01-01T00:00:00.000Z" in capsys.readouterr().err


def test_whatif_refuses_it_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("{}\n", encoding="utf-8")
    assert main(["audit", "whatif", "--policy", str(policy), "--log", "postgresql://unused", *BACKWARDS]) == 2
    assert "is later than --until" in capsys.readouterr().err


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.postgres
async def test_a_range_without_a_recorded_cycle_verifies_nothing_and_says_so(fresh_database: str) -> None:
    log = open_log(fresh_database)
    await log.start()
    await log.create_topics(TOPICS)
    await log.close()

    code, out = await fedsched("audit", "verify", "--since", "2030-01-01T00:00:00Z", dsn=fresh_database)
    assert code == 3, out
    assert out.startswith("nothing verified: no scheduling cycle recorded from 2030-01-01T00:00:00.000Z")
    assert "identical" not in out

    code, out = await fedsched("audit", "verify", "--json", dsn=fresh_database)
    assert code == 3, out
    report = json.loads(out)
    assert (report["cycles"], report["identical_pct"]) == (0, None)
