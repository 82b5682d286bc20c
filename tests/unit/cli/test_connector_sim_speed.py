"""``fedsched connector sim --speed N`` stamps events in simulated time while the other processes of a
distributed deployment use the wall clock: its help says so, and a speed other than 1 is warned about
when the connector starts."""

from __future__ import annotations

import argparse
import logging

import pytest

from services.cli import connector_cmd

pytestmark = pytest.mark.timeout(30)


class Reached(Exception):
    """Raised where the connector would open the log: it has started as far as a test needs."""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser()
    connector_cmd.register(root.add_subparsers())
    return root


def test_the_help_of_speed_says_other_processes_use_the_wall_clock_and_points_to_fedsched_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["connector", "sim", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "other processes of a distributed deployment use the wall clock" in text
    assert "use fedsched up, whose components share one clock" in text


async def started(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    def no_log(url: str) -> object:
        raise Reached(url)

    monkeypatch.setattr("events.log.open_log", no_log)
    monkeypatch.setattr(connector_cmd, "tune_for_service", lambda: None)  # leave the test process's gc alone
    args = parser().parse_args(["connector", "sim", "--cluster", "sim-1", "--log", "kafka://127.0.0.1:9", *argv])
    with pytest.raises(Reached):
        await args.handler(args)


@pytest.mark.asyncio
async def test_a_speed_other_than_one_is_warned_about_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fedsched.connector.sim"):
        await started(monkeypatch, "--speed", "15")
    [warning] = [r for r in caplog.records if r.name == "fedsched.connector.sim"]
    message = warning.getMessage()
    assert "event=sim_speed_not_shared cluster=sim-1 speed=15" in message and "fedsched up" in message


@pytest.mark.asyncio
async def test_the_wall_clock_speed_is_not_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="fedsched.connector.sim"):
        await started(monkeypatch)
    assert not [r for r in caplog.records if r.name == "fedsched.connector.sim"]
