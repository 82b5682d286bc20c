"""``fedsched audit whatif`` as people read it: every column header stands apart from the next, however
long the policy file's name, and a policy key it does not know is named beside the ones it does."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.catalog.jobs import PriorityClass
from services.audit import whatif
from services.audit.whatif import History, Outcome
from services.cli.main import main
from services.scheduler.core.policy.model import PolicyConfig
from tests.scheduler.builders import a_job
from tests.unit.audit.test_whatif import HOUR, T0, fleet

pytestmark = pytest.mark.timeout(60)


class NoLog:
    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def run_whatif(policy: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    job = a_job("j1").gpus(8).priority(PriorityClass.STANDARD).build()
    history = History(fleet(), [(job, T0, HOUR)], Outcome(), T0, T0 + 2 * HOUR)

    async def recorded(*args: object, **kwargs: object) -> History:
        return history

    monkeypatch.setattr(whatif, "load_history", recorded)
    monkeypatch.setattr("events.log.open_log", lambda url: NoLog())
    return main(["audit", "whatif", "--policy", str(policy), "--log", "postgresql://unused"])


def test_column_headers_are_apart_and_every_cell_lines_up_under_its_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "pol2-with-a-rather-long-name.yaml"
    policy.write_text("preemption: false\n", encoding="utf-8")
    assert run_whatif(policy, monkeypatch) == 0
    header, *rows = capsys.readouterr().out.splitlines()[1:]
    names = ["recorded", "simulated (policy-v1)", "simulated (whatif:pol2-with-a-rather-long-name.yaml)"]
    assert all(f"  {n}" in header for n in names), header
    ends = [header.index(n) + len(n) for n in names]
    for row in rows:
        assert len(row) == ends[-1], row  # right-aligned under the headers
        assert all(row[end - 1] != " " and row[end] == " " for end in ends[:-1]), row


def test_an_unknown_policy_key_is_named_with_the_valid_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "pol.yaml"
    policy.write_text("preemtion: false\n", encoding="utf-8")
    assert run_whatif(policy, monkeypatch) == 2
    err = capsys.readouterr().err
    assert "unknown settings preemtion" in err
    valid = sorted(name for name in PolicyConfig.__dataclass_fields__ if name != "version")
    assert "valid settings: " + ", ".join(valid) in err and "preemption" in valid
