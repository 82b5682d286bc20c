"""``fedsched gov ...`` on the command line, before any call: help, options refused naming themselves,
``--by``, ``--log`` and ``--dsn`` refused saying that identity comes from the token and the commands go
through the API (their calls: ``tests/api/test_cli_gov.py``)."""

from __future__ import annotations

import argparse

import pytest

from services.cli.main import build_parser, main

pytestmark = pytest.mark.timeout(120)


def ask(request_id: str, *more: str) -> list[str]:
    return [
        "gov", "quota", "request", "--id", request_id, "--tenant", "team-a", "--amount", "8000",
        "--justification", "paper deadline", *more,
    ]  # fmt: skip


@pytest.mark.parametrize("group", [["gov", "quota"], ["gov"], ["audit"]])
def test_a_group_without_its_action_prints_its_own_help(group: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(group) == 2
    assert capsys.readouterr().out.startswith(f"usage: fedsched {' '.join(group)} ")


def test_the_top_level_help_names_every_audit_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the audit trail: archive, chain, verify, timeline, export, at (a past moment), whatif" in text


def test_report_takes_json_as_short_for_format_json() -> None:
    assert build_parser().parse_args(["gov", "report", "--json"]).format == "json"


@pytest.mark.parametrize("hours", ["-3", "0", "nan"])
def test_a_period_of_no_hours_is_refused_naming_the_option(hours: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(ask("q1", "--hours", hours))
    assert exited.value.code == 2
    assert "argument --hours: must be more than 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "who"),
    [
        (ask("q1", "--by", "alice@example.com"), "requester"),
        (["gov", "quota", "approve", "q-1", "--by=ops@example.com"], "approver"),
        (["gov", "quota", "reject", "--by", "ops@example.com", "q-1"], "approver"),
    ],
)
def test_by_is_refused_saying_the_identity_comes_from_the_token(
    argv: list[str], who: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDSCHED_SERVER", "127.0.0.1:1")  # never reached
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"argument --by: no longer accepted: the {who} is the subject of the caller's token" in err, err
    assert "--token, FEDSCHED_TOKEN or FEDSCHED_TOKEN_FILE" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        ([*ask("q1"), "--log", "postgresql://x"], "--log"),
        (["gov", "quota", "list", "--log=postgresql://x"], "--log"),
        (["gov", "findings", "--log", "postgresql://x"], "--log"),
        (["gov", "report", "--dsn", "postgresql://x"], "--dsn"),
        (["gov", "report", "--log", "-"], "--log"),
        (["audit", "timeline", "j-1", "--dsn", "postgresql://x"], "--dsn"),
    ],
)
def test_the_log_and_the_database_are_no_longer_options_of_the_api_commands(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"argument {option}: no longer accepted: this command is a client of the API now" in err, err


def test_the_offline_audit_tools_say_so_in_their_help() -> None:
    helps = _sub_helps(_sub_helps_parser(build_parser(), "audit"))
    for tool in ("chain", "keygen", "proof", "verify", "export", "at", "whatif"):
        assert "offline" in helps[tool], (tool, helps[tool])
    assert "through the API, with your token" in helps["timeline"]


def _sub_helps_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    [group] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = group.choices[name]
    return found


def _sub_helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    [group] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {choice.dest: choice.help or "" for choice in group._choices_actions}
