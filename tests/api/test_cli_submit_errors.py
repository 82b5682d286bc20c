"""A job file refused by the CLI itself reads like one refused by the server: with ``--json``, one
``{"error": {code, message, field, reason}}`` object on standard error, exit 2; without, one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cli.main import main

pytestmark = pytest.mark.timeout(30)

NOWHERE = ["--server", "127.0.0.1:1", "--token", "t"]  # never called: the file is refused first


def a_bad_job_file(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text("name: n\ntenant: t\nresources: {gpus: 1.5}\n", encoding="utf-8")
    return path


def test_with_json_the_error_is_the_servers_shape_on_standard_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", str(a_bad_job_file(tmp_path)), "--json", *NOWHERE]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    error = json.loads(err)["error"]
    assert (error["code"], error["field"], error["reason"]) == ("INVALID_ARGUMENT", "resources.gpus", "InvalidRequest")
    assert "must be a whole number" in error["message"]


def test_without_json_it_is_one_line_naming_the_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = a_bad_job_file(tmp_path)
    assert main(["submit", str(path), *NOWHERE]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"fedsched: invalid argument: {path}: resources.gpus: must be a whole number")
