"""Secrets of a process: masked in what is logged, found in the environment or a file, warned about on
the command line (``services.runtime.credentials``, ``services.cli.config``, ``fedsched api``'s key)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from services.cli.api_cmd import jwt_secret
from services.cli.config import log_url, postgres_dsn
from services.cli.main import CliError
from services.runtime import credentials

pytestmark = pytest.mark.timeout(30)

SECRET = "s3cr3t/with?odd@chars"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in credentials.SECRET_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv(credentials.file_variable(variable), raising=False)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://fed:pw@db:5432/x", "postgresql://fed:***@db:5432/x"),
        (f"postgresql://fed:{SECRET}@db/x?sslmode=require", "postgresql://fed:***@db/x?sslmode=require"),
        ("postgresql://fed@db/x?password=pw&sslpassword=k", "postgresql://fed@db/x?password=***&sslpassword=***"),
        ("postgresql://fed:pw@h1:5432,h2:5432/x", "postgresql://fed:***@h1:5432,h2:5432/x"),
        ("host=db user=fed password=pw dbname=x", "host=db user=fed password=*** dbname=x"),
        ("host=db password='with space' dbname=x", "host=db password=*** dbname=x"),
        ("postgresql://fed@db/x", "postgresql://fed@db/x"),
        ("postgresql://db/x", "postgresql://db/x"),
        ("kafka://10.0.0.5:9092", "kafka://10.0.0.5:9092"),
    ],
)
def test_a_password_is_masked_wherever_a_dsn_carries_it(url: str, shown: str) -> None:
    assert credentials.masked(url) == shown
    assert credentials.has_password(url) == (url != shown)
    for secret in ("pw", SECRET, "with space", "k"):
        if secret in url and url != shown:
            assert f":{secret}@" not in shown and f"={secret}" not in shown


def test_a_secret_comes_from_the_environment_or_the_file_it_names_never_both(tmp_path: Path) -> None:
    file = tmp_path / "dsn"
    file.write_text("postgresql://u:pw@db/x\n")
    assert credentials.from_environment("FEDSCHED_POSTGRES_DSN", {}) is None
    assert credentials.from_environment("FEDSCHED_POSTGRES_DSN", {"FEDSCHED_POSTGRES_DSN": "a"}) == "a"
    environ = {"FEDSCHED_POSTGRES_DSN_FILE": str(file)}
    assert credentials.from_environment("FEDSCHED_POSTGRES_DSN", environ) == "postgresql://u:pw@db/x"
    with pytest.raises(credentials.SecretError, match="both set"):
        credentials.from_environment("FEDSCHED_POSTGRES_DSN", {**environ, "FEDSCHED_POSTGRES_DSN": "a"})
    with pytest.raises(credentials.SecretError, match="FEDSCHED_LOG_FILE: cannot read"):
        credentials.from_environment("FEDSCHED_LOG", {"FEDSCHED_LOG_FILE": str(tmp_path / "missing")})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(credentials.SecretError, match="is empty"):
        credentials.read_secret_file(tmp_path / "empty", "--jwt-secret-file")


def test_the_cli_reads_the_dsn_from_a_file_and_warns_of_one_on_its_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = f"postgresql://fed:{SECRET}@db/x"
    (tmp_path / "dsn").write_text(dsn + "\n")
    monkeypatch.setenv("FEDSCHED_POSTGRES_DSN_FILE", str(tmp_path / "dsn"))
    with caplog.at_level(logging.WARNING):
        assert postgres_dsn(None) == dsn
        assert log_url(None) == dsn  # embedded mode: the log is the database
        assert not caplog.records
        assert postgres_dsn(dsn) == dsn
        assert postgres_dsn("postgresql://fed@db/x") == "postgresql://fed@db/x"
    [warning] = caplog.records
    assert "--dsn" in warning.getMessage() and "visible to every user" in warning.getMessage()
    assert "FEDSCHED_POSTGRES_DSN_FILE" in warning.getMessage() and SECRET not in warning.getMessage()
    monkeypatch.setenv("FEDSCHED_POSTGRES_DSN", dsn)
    with pytest.raises(CliError, match="both set"):
        postgres_dsn(None)
    monkeypatch.delenv("FEDSCHED_POSTGRES_DSN")
    monkeypatch.delenv("FEDSCHED_POSTGRES_DSN_FILE")
    with pytest.raises(CliError, match="FEDSCHED_POSTGRES_DSN_FILE"):
        postgres_dsn(None)


def test_the_api_takes_its_jwt_secret_from_a_file_or_the_environment_and_warns_of_one_on_argv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "jwt").write_text(SECRET + "\n")

    def args(secret: str | None = None, file: Path | None = None) -> argparse.Namespace:
        return argparse.Namespace(jwt_secret=secret, jwt_secret_file=file)

    with caplog.at_level(logging.WARNING):
        assert jwt_secret(args(file=tmp_path / "jwt")) == SECRET
        assert jwt_secret(args()) is None
        monkeypatch.setenv("FEDSCHED_JWT_SECRET_FILE", str(tmp_path / "jwt"))
        assert jwt_secret(args()) == SECRET
        assert not caplog.records
        assert jwt_secret(args(secret="on-argv")) == "on-argv"
    [warning] = caplog.records
    assert "--jwt-secret" in warning.getMessage() and "on-argv" not in warning.getMessage()
    with pytest.raises(CliError, match="only one"):
        jwt_secret(args(secret="a", file=tmp_path / "jwt"))
    with pytest.raises(CliError, match="--jwt-secret-file: cannot read"):
        jwt_secret(args(file=tmp_path / "missing"))
