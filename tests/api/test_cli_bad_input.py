"""Bad input on the command line ends in one line naming the option and exit 2, never a traceback; a
reader that closes standard output early ends the command quietly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.main import main
from services.runtime.demo import _node_slice

pytestmark = pytest.mark.timeout(60)

REQUEST = ["gov", "quota", "request", "--id", "q1", "--tenant", "t", "--amount", "1", "--justification", "j"]


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["gov", "quota", "approve", "q2", "--until", "garbage"], "--until"),
        ([*REQUEST, "--from", "yesterday"], "--from"),
        ([*REQUEST, "--from", "2026-12-01T09:00:00"], "--from"),  # no offset: which day's 09:00?
        (["gov", "report", "--until", "garbage"], "--until"),
        (["audit", "verify", "--since", "garbage"], "--since"),
        (["audit", "whatif", "--policy", "p.yaml", "--until", "garbage"], "--until"),
        (["audit", "at", "garbage"], "time"),
        (["demo", "--count", "0"], "--count"),
        (["demo", "--speed", "-1"], "--speed"),
    ],
)
def test_a_bad_value_is_refused_naming_its_option(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert f"argument {option}:" in err and "Traceback" not in err


def test_the_demo_without_a_pod_trace_says_what_to_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FEDSCHED_TRACES", str(tmp_path / "no-traces"))
    assert main(["demo", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert "--pods FILE" in err and "FEDSCHED_TRACES" in err
    assert not (tmp_path / "data").exists(), "refused before starting anything"


def test_the_demo_fleet_comes_from_the_bundled_node_sample_when_the_traces_are_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDSCHED_TRACES", str(tmp_path / "no-traces"))
    lines = _node_slice(tmp_path, 5).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6 and lines[0].startswith("sn,")


def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `| head` that has already exited: every write fails
    try:
        done = subprocess.run(
            [sys.executable, "-m", "services.cli.main", "events", "list", "--json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=50,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.stderr.decode() == ""
    assert done.returncode == 141, "128 + SIGPIPE, as a command killed by the closed pipe reports"
