"""Distributed ``fedsched up``: the configuration is read strictly and becomes one command per component."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.runtime.supervisor import ConfigError, SupervisorConfig


def test_a_configuration_becomes_one_command_per_component(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDSCHED_LOG", raising=False)
    path = tmp_path / "fedsched.yaml"
    path.write_text(
        "log: kafka://10.0.0.5:9092\npostgres_dsn: postgresql://pg/fedsched\nnamespace: prod\n"
        "api: {listen: 0.0.0.0:50051, issuer: https://sso, tls_cert: cert.pem}\nprojections: {store: rocksdb}\n"
    )
    commands = SupervisorConfig.load(path).commands()
    assert sorted(commands) == ["api", "archiver", "governance", "projections", "scheduler"]
    assert commands["scheduler"][:5] == ["scheduler", "--log", "kafka://10.0.0.5:9092", "--namespace", "prod"]
    assert commands["api"][:5] == ["api", "--log", "kafka://10.0.0.5:9092", "--dsn", "postgresql://pg/fedsched"]
    assert "--tls-cert" in commands["api"] and "--issuer" in commands["api"]
    assert commands["projections"][-4:-2] == ["--store", "rocksdb"]
    # Every child serves its metrics, each on its own port.
    listens = {name: argv[-1] for name, argv in commands.items()}
    assert listens == {
        "scheduler": "127.0.0.1:9464",
        "api": "127.0.0.1:9465",
        "projections": "127.0.0.1:9466",
        "archiver": "127.0.0.1:9467",
        "governance": "127.0.0.1:9468",
    }
    assert commands["api"][-2] == "--metrics-listen" and commands["governance"][-2] == "--metrics"
    path.write_text("log: kafka://h:1\npostgres_dsn: x\nmetrics: {first_port: 0}\n")
    assert not any("--metrics" in argv for argv in SupervisorConfig.load(path).commands().values())


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("postgres_dsn: x\n", "log"),
        ("log: kafka://h:1\n", "postgres_dsn"),
        ("log: kafka://h:1\npostgres_dsn: x\nschedular: {}\n", "schedular"),
        ("log: kafka://h:1\npostgres_dsn: x\napi: {port: 1}\n", "port"),
        ("- just\n- a list\n", "mapping"),
        ("log: kafka://h:1\npostgres_dsn: x\nmetrics: {first_port: http}\n", "first_port"),
        ("log: kafka://h:1\npostgres_dsn: x\nmetrics: {port: 1}\n", "metrics"),
    ],
)
def test_a_bad_configuration_names_what_is_wrong(
    text: str, field: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FEDSCHED_LOG", raising=False)
    monkeypatch.delenv("FEDSCHED_POSTGRES_DSN", raising=False)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=field):
        SupervisorConfig.load(path)
