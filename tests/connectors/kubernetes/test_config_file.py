"""The connector's --config YAML: the shared cluster section, settings checked against ConnectorConfig, flags win."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from pathlib import Path

import pytest

from connectors.kubernetes import ConnectorConfig, config_file
from connectors.kubernetes.config_file import ConfigFileError
from connectors.kubernetes.usage import UsageSettings
from services.cli.connector_cmd import run_kubernetes
from services.cli.main import CliError

pytestmark = pytest.mark.timeout(30)

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "examples" / "connectors" / "kubernetes.yaml"

GOOD = """
cluster:
  display_name: GPU East 1
  site: dc-east
  region: us-east
  currency: EUR
  gpu_rates: {AMD-Instinct-MI300X: 3600000}
  datasets: [imagenet]
  labels: {tier: prod}
connector:
  namespace_prefix: team-
  default_image: registry.example/base:1
  cancel_grace_s: 60
  unreachable_after_s: 2
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "connector.yaml"
    path.write_text(text)
    return path


def test_the_file_gives_the_cluster_section_and_settings_and_flags_win(tmp_path: Path) -> None:
    loaded = config_file.load(write(tmp_path, GOOD))
    config = config_file.build("gpu-east-1", loaded, {"region": "eu-west", "site": None, "cancel_grace_s": 5})
    assert (config.cluster, config.display_name, config.site, config.region, config.currency) == (
        "gpu-east-1",
        "GPU East 1",
        "dc-east",
        "eu-west",  # the flag
        "EUR",
    )
    assert config.gpu_rates == (("AMD-Instinct-MI300X", 3_600_000),) and config.datasets == ("imagenet",)
    assert config.labels == {"tier": "prod"} and config.namespace_prefix == "team-"
    assert (config.cancel_grace_s, config.unreachable_after_s) == (5, 2.0)  # flag; an int read as a float
    assert config_file.build("c").site == ConnectorConfig(cluster="c").site  # type: ignore[arg-type]


def test_the_example_in_deploy_is_a_valid_file() -> None:
    config = config_file.build("gpu-east-1", config_file.load(EXAMPLE))
    assert config.gpu_rates and config.default_image


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("connector: {namespace_prefx: a-}\n", "connector.namespace_prefx is not a setting"),
        ("connector: {cancel_grace_s: soon}\n", "connector.cancel_grace_s must be an integer, got 'soon'"),
        ("connector: {cancel_grace_s: true}\n", "connector.cancel_grace_s must be an integer"),
        ("connector: {default_image: [a]}\n", "connector.default_image must be a string or null"),
        ("connector: {site: x}\n", "connector.site belongs in the 'cluster' section"),
        ("connector: {cluster: x}\n", "connector.cluster is given by --cluster"),
        ("cluster: {gpu_rates: {T4: cheap}}\n", "cluster.gpu_rates.T4 must be a non-negative integer"),
        ("cluster: {colour: red}\n", "cluster: unknown keys ['colour']"),
        ("cluster: {currency: euro}\n", "cluster currency"),
        ("clusters: {}\n", "unknown sections ['clusters']"),
        ("connector: [a]\n", "'connector' must be a mapping"),
        ("a: [\n", "not YAML"),
    ],
    ids=["unknown key", "wrong type", "bool for int", "list for str", "cluster key", "cluster id", "bad rate",
         "unknown cluster key", "bad currency", "unknown section", "not a mapping", "not yaml"],
)  # fmt: skip
def test_a_bad_file_is_refused_naming_the_file_and_the_key(tmp_path: Path, text: str, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigFileError) as caught:
        config_file.build("c", config_file.load(path))
    assert words in str(caught.value) and str(path) in str(caught.value)


def test_every_setting_of_the_connector_can_be_given_by_the_file() -> None:
    """A field added to ConnectorConfig later is readable, or this fails naming its type."""
    hints = config_file._hints()
    assert set(config_file.connector_keys()) | {
        "cluster",
        *config_file.FROM_CLUSTER_SECTION,
        *config_file.SECTIONS,
    } == {f.name for f in dataclasses.fields(ConnectorConfig)}
    for name in config_file.connector_keys():
        assert config_file.describe(hints[name])
    usage = config_file._hints(UsageSettings)
    for name in usage:
        assert config_file.describe(usage[name])


def test_the_usage_section_gives_where_usage_is_read_and_flags_win(tmp_path: Path) -> None:
    path = write(tmp_path, "usage: {interval_s: 120, selectors: [app=dcgm], namespace: gpu-operator, port: 9500}\n")
    config = config_file.build("c", config_file.load(path), None, {"port": 9400, "namespace": None})
    assert config.usage == UsageSettings(interval_s=120.0, selectors=("app=dcgm",), namespace="gpu-operator")
    bad = write(tmp_path, "usage: {scrape_s: 300}\n")  # longer than the window (60 s by default)
    with pytest.raises(ConfigFileError, match=r"usage\.scrape_s"):
        config_file.build("c", config_file.load(bad))
    with pytest.raises(ConfigFileError, match=r"usage\.pott is not a setting"):
        config_file.load(write(tmp_path, "usage: {pott: 1}\n"))
    with pytest.raises(ConfigFileError, match=r"connector\.usage is a section of its own"):
        config_file.load(write(tmp_path, "connector: {usage: {}}\n"))


def test_the_command_refuses_a_bad_file_before_it_connects(tmp_path: Path) -> None:
    path = write(tmp_path, "connector: {cancel_grace_s: soon}\n")
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    from services.cli import connector_cmd

    connector_cmd.register(sub)
    args = parser.parse_args(["connector", "kubernetes", "--cluster", "c", "--config", str(path)])
    with pytest.raises(CliError) as caught:
        asyncio.run(run_kubernetes(args))
    assert caught.value.exit_code == 2 and "connector.cancel_grace_s must be an integer" in str(caught.value)
