"""``fedsched connector kubernetes``'s tenant policy flags: allowed registries are checked as they are read
(a bare image name is refused with the reason), repeatable; pull secret namespace and container defaults."""

from __future__ import annotations

import argparse

import pytest

from services.cli import connector_cmd

pytestmark = pytest.mark.timeout(30)


def parse(*argv: str) -> argparse.Namespace:
    root = argparse.ArgumentParser()
    connector_cmd.register(root.add_subparsers())
    return root.parse_args(["connector", "kubernetes", "--cluster", "k8s-a", *argv])


def test_allowed_registries_repeat_and_default_to_none() -> None:
    args = parse("--allowed-registry", "nvcr.io", "--allowed-registry", "registry.example.com:5000/team-a")
    assert args.allowed_registry == ["nvcr.io", "registry.example.com:5000/team-a"]
    defaults = parse()
    assert defaults.allowed_registry is None and defaults.pull_secret_namespace is None
    # Not given: None, so the --config file or ConnectorConfig's defaults (100 milli-CPU, 256 MiB) decide.
    assert (defaults.container_cpu_milli, defaults.container_memory_mib) == (None, None)


def test_a_registry_that_is_no_host_is_refused_saying_why(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--allowed-registry", "ubuntu")
    assert "argument --allowed-registry: 'ubuntu' is not HOST[:PORT][/PATH]" in capsys.readouterr().err
