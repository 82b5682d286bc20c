"""``fedsched up --governance FILE``: the embedded service's governance settings, read as ``fedsched gov run
--config`` reads them, and a clear error for a file that says something invalid."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli.main import CliError, build_parser
from services.cli.up_cmd import config_from


def up_args(*more: str) -> object:
    return build_parser().parse_args(["up", *more])


def test_up_takes_the_governance_settings_of_a_file(tmp_path: Path) -> None:
    settings = tmp_path / "gov.yaml"
    settings.write_text("auto_approve:\n  - {name: team-a-small, tenant: team-a, max_amount: 4000}\n")
    config = config_from(up_args("--governance", str(settings)))  # type: ignore[arg-type]
    assert config.governance is not None
    [rule] = config.governance.auto_approve
    assert (rule.name, rule.tenant, rule.max_amount) == ("team-a-small", "team-a", 4000)
    assert config_from(up_args()).governance is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "reason"),
    [("auto_approve:\n  - {name: x, max_amount: many}\n", "max_amount"), ("- just a list\n", "mapping")],
)
def test_a_governance_file_that_says_something_invalid_is_one_clear_error(
    tmp_path: Path, text: str, reason: str
) -> None:
    settings = tmp_path / "gov.yaml"
    settings.write_text(text)
    with pytest.raises(CliError, match=reason) as raised:
        config_from(up_args("--governance", str(settings)))  # type: ignore[arg-type]
    assert raised.value.exit_code == 2 and "--governance" in str(raised.value)
    with pytest.raises(CliError, match="No such file"):
        config_from(up_args("--governance", str(tmp_path / "missing.yaml")))  # type: ignore[arg-type]


def test_up_takes_the_size_of_the_simulated_npu_pool() -> None:
    assert config_from(up_args()).sim_npu_nodes is None  # type: ignore[arg-type]
    assert config_from(up_args("--sim-npu-nodes", "0")).sim_npu_nodes == 0  # type: ignore[arg-type]


def test_a_negative_npu_pool_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        up_args("--sim-npu-nodes", "-2")
    assert "--sim-npu-nodes: -2 nodes: give 0 or more" in capsys.readouterr().err
