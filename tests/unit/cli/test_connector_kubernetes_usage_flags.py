"""``fedsched connector kubernetes``'s usage flags reach the connector's settings, and a bad one is refused
before anything is contacted, naming the setting and why."""

from __future__ import annotations

import argparse

import pytest

from connectors.kubernetes import ConnectorConfig, KubeApi, config_file
from connectors.kubernetes.usage import UsageSettings
from services.cli import connector_cmd
from services.cli.main import CliError

pytestmark = [pytest.mark.timeout(30), pytest.mark.asyncio]


class Reached(Exception):
    """Raised where the connector would talk to the API server: it was configured as far as a test needs."""


def parse(*argv: str) -> argparse.Namespace:
    root = argparse.ArgumentParser()
    connector_cmd.register(root.add_subparsers())
    return root.parse_args(["connector", "kubernetes", "--cluster", "gpu-east", *argv])


async def configured(monkeypatch: pytest.MonkeyPatch, *argv: str) -> ConnectorConfig:
    seen: list[ConnectorConfig] = []

    async def no_api(*_: object, **__: object) -> KubeApi:
        raise Reached

    real = config_file.build

    def keep(*args: object, **kwargs: object) -> ConnectorConfig:
        seen.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return seen[-1]

    monkeypatch.setattr(config_file, "build", keep)
    monkeypatch.setattr(KubeApi, "from_kubeconfig", no_api)
    with pytest.raises(CliError):  # Reached, reported as a set-up error
        await connector_cmd.run_kubernetes(parse(*argv))
    return seen[-1]


async def test_the_usage_flags_become_the_connectors_usage_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    config = await configured(
        monkeypatch,
        "--usage-interval-s=120",
        "--usage-scrape-s=30",
        "--dcgm-selector=app=my-dcgm",
        "--dcgm-selector=team=gpu",
        "--dcgm-namespace=monitoring",
        "--dcgm-port=9500",
    )
    assert config.usage == UsageSettings(
        interval_s=120, scrape_s=30, selectors=("app=my-dcgm", "team=gpu"), namespace="monitoring", port=9500
    )
    defaults = await configured(monkeypatch)
    assert defaults.usage == UsageSettings()


async def test_a_bad_usage_flag_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KubeApi, "from_kubeconfig", None)  # never reached
    with pytest.raises(CliError, match=r"usage\.scrape_s: 90\.0 must be above 0 and at most the window, 60\.0"):
        await connector_cmd.run_kubernetes(parse("--usage-scrape-s=90"))
