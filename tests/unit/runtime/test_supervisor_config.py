"""Distributed ``fedsched up``: the configuration is read strictly and becomes one child per component,
whose command line carries no secret and whose environment carries only the secrets it uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.runtime.supervisor import ConfigError, SupervisorConfig, environment

PASSWORD = "pw-4c1d-not-on-argv"
JWT = "jwt-secret-of-at-least-32-bytes-0b7e9d"
_SECRET_VARIABLES = ("FEDSCHED_LOG", "FEDSCHED_POSTGRES_DSN", "FEDSCHED_JWT_SECRET")


@pytest.fixture(autouse=True)
def no_secrets_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in _SECRET_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv(variable + "_FILE", raising=False)
    monkeypatch.delenv("FEDSCHED_JWT_PUBLIC_KEY", raising=False)


def test_a_configuration_becomes_one_command_per_component(tmp_path: Path) -> None:
    path = tmp_path / "fedsched.yaml"
    path.write_text(
        "log: kafka://10.0.0.5:9092\npostgres_dsn: postgresql://pg/fedsched\nnamespace: prod\n"
        "api: {listen: 0.0.0.0:50051, issuer: https://sso, tls_cert: cert.pem, jwt_public_key: k.pem}\n"
        "projections: {store: rocksdb}\n"
    )
    children = SupervisorConfig.load(path).children()
    commands = {name: list(child.argv) for name, child in children.items()}
    assert sorted(commands) == ["api", "archiver", "governance", "projections", "scheduler"]
    assert commands["scheduler"][:3] == ["scheduler", "--namespace", "prod"]
    assert commands["api"][0] == "api" and "--tls-cert" in commands["api"] and "--issuer" in commands["api"]
    assert commands["projections"][-4:-2] == ["--store", "rocksdb"]
    assert children["api"].env == {
        "FEDSCHED_LOG": "kafka://10.0.0.5:9092",
        "FEDSCHED_POSTGRES_DSN": "postgresql://pg/fedsched",
    }
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
    path.write_text("log: kafka://h:1\npostgres_dsn: x\nmetrics: {first_port: 0}\napi: {jwt_secret: s}\n")
    assert not any("--metrics" in child.argv for child in SupervisorConfig.load(path).children().values())


def test_no_secret_reaches_a_command_line_and_each_child_gets_only_the_secrets_it_uses(tmp_path: Path) -> None:
    dsn = f"postgresql://fedsched:{PASSWORD}@db:5432/fedsched"
    (tmp_path / "dsn").write_text(dsn + "\n")
    (tmp_path / "jwt").write_text(JWT + "\n")
    path = tmp_path / "fedsched.yaml"
    path.write_text(
        f"log: {dsn}\npostgres_dsn_file: {tmp_path / 'dsn'}\napi: {{jwt_secret_file: {tmp_path / 'jwt'}}}\n"
    )
    children = SupervisorConfig.load(path).children()
    for child in children.values():
        assert not any(PASSWORD in arg or JWT in arg or "jwt" in arg for arg in child.argv), child.argv
        assert not {"--dsn", "--log", "--jwt-secret", "--jwt-secret-file"} & set(child.argv)
        assert PASSWORD not in repr(child) and JWT not in repr(child)
    assert children["api"].env == {
        "FEDSCHED_LOG": dsn,
        "FEDSCHED_POSTGRES_DSN_FILE": str(tmp_path / "dsn"),
        "FEDSCHED_JWT_SECRET_FILE": str(tmp_path / "jwt"),
    }
    assert (
        children["archiver"].env
        == children["projections"].env
        == {
            "FEDSCHED_LOG": dsn,
            "FEDSCHED_POSTGRES_DSN_FILE": str(tmp_path / "dsn"),
        }
    )
    assert children["scheduler"].env == children["governance"].env == {"FEDSCHED_LOG": dsn}
    # The parent's own secrets do not leak into a child that does not use them.
    parent = {"PATH": "/bin", "FEDSCHED_JWT_SECRET": "parent-secret", "FEDSCHED_POSTGRES_DSN": "postgresql://p:q@x/y"}
    scheduler = environment(children["scheduler"], parent)
    assert scheduler == {"PATH": "/bin", "FEDSCHED_LOG": dsn}
    api = environment(children["api"], parent)
    assert "FEDSCHED_JWT_SECRET" not in api and "FEDSCHED_POSTGRES_DSN" not in api
    assert api["FEDSCHED_JWT_SECRET_FILE"] == str(tmp_path / "jwt")


def test_secrets_left_out_of_the_file_come_from_the_supervisors_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "dsn").write_text(f"postgresql://u:{PASSWORD}@db/x")
    monkeypatch.setenv("FEDSCHED_LOG", "kafka://k:9092")
    monkeypatch.setenv("FEDSCHED_POSTGRES_DSN_FILE", str(tmp_path / "dsn"))
    monkeypatch.setenv("FEDSCHED_JWT_SECRET", JWT)
    children = SupervisorConfig.load(None).children()
    assert children["api"].env == {
        "FEDSCHED_LOG": "kafka://k:9092",
        "FEDSCHED_POSTGRES_DSN_FILE": str(tmp_path / "dsn"),
        "FEDSCHED_JWT_SECRET": JWT,
    }
    assert all(JWT not in arg and PASSWORD not in arg for child in children.values() for arg in child.argv)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("postgres_dsn: x\napi: {jwt_secret: s}\n", "log"),
        ("log: kafka://h:1\napi: {jwt_secret: s}\n", "postgres_dsn"),
        ("log: kafka://h:1\npostgres_dsn: x\nschedular: {}\n", "schedular"),
        ("log: kafka://h:1\npostgres_dsn: x\napi: {port: 1}\n", "port"),
        ("- just\n- a list\n", "mapping"),
        ("log: kafka://h:1\npostgres_dsn: x\napi: {jwt_secret: s}\nmetrics: {first_port: http}\n", "first_port"),
        ("log: kafka://h:1\npostgres_dsn: x\napi: {jwt_secret: s}\nmetrics: {port: 1}\n", "metrics"),
        ("log: kafka://h:1\npostgres_dsn: x\napi: {listen: 0.0.0.0:1}\n", "token key"),
        ("log: kafka://h:1\npostgres_dsn: x\npostgres_dsn_file: y\napi: {jwt_secret: s}\n", "postgres_dsn_file"),
        ("log: kafka://h:1\npostgres_dsn_file: /nonexistent/dsn\napi: {jwt_secret: s}\n", "postgres_dsn_file"),
        ("log: kafka://h:1\npostgres_dsn: x\napi: {jwt_secret: s, jwt_secret_file: f}\n", "jwt_secret_file"),
        ("log: kafka://h:1\npostgres_dsn: x\napi: {jwt_secret_file: EMPTY}\n", "empty"),
        ("log: 5\npostgres_dsn: x\napi: {jwt_secret: s}\n", "log"),
    ],
)
def test_a_bad_configuration_names_what_is_wrong(text: str, field: str, tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace("EMPTY", str(tmp_path / "empty")))
    with pytest.raises(ConfigError, match=field):
        SupervisorConfig.load(path)


def test_a_secret_given_both_ways_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDSCHED_LOG", "kafka://k:9092")
    monkeypatch.setenv("FEDSCHED_POSTGRES_DSN", "postgresql://db/x")
    monkeypatch.setenv("FEDSCHED_POSTGRES_DSN_FILE", "/some/file")
    with pytest.raises(ConfigError, match="FEDSCHED_POSTGRES_DSN and FEDSCHED_POSTGRES_DSN_FILE"):
        SupervisorConfig.load(None)


def test_the_archiver_is_handed_the_signing_key_by_path_and_the_checkpoint_directory(tmp_path: Path) -> None:
    key = tmp_path / "audit.key"
    key.write_text("a key file")
    path = tmp_path / "fedsched.yaml"
    path.write_text(
        "log: kafka://h:1\npostgres_dsn: x\napi: {jwt_public_key: k.pem}\n"
        f"audit: {{signing_key_file: {key}, checkpoint_dir: {tmp_path / 'cp'}, checkpoint_every: 30}}\n"
    )
    children = SupervisorConfig.load(path).children()
    archiver = children["archiver"]
    assert archiver.argv[:4] == ("audit", "archive", "--checkpoint-every", "30")
    assert archiver.env["FEDSCHED_AUDIT_SIGNING_KEY_FILE"] == str(key)
    assert archiver.env["FEDSCHED_AUDIT_CHECKPOINT_DIR"] == str(tmp_path / "cp")
    assert all("FEDSCHED_AUDIT_SIGNING_KEY_FILE" not in c.env for n, c in children.items() if n != "archiver")
    assert "a key file" not in " ".join(archiver.argv)


@pytest.mark.parametrize(
    ("audit", "says"),
    [
        ("{signing_key_file: KEY}", "go together"),
        ("{signing_key_file: /no/such/key, checkpoint_dir: /tmp/cp}", "no such file"),
        ("{checkpoint_every: 0}", "checkpoint_every"),
        ("{cadence: 5}", "unknown settings"),
        ("[]", "a mapping"),
    ],
)
def test_a_bad_audit_section_names_what_is_wrong(tmp_path: Path, audit: str, says: str) -> None:
    key = tmp_path / "audit.key"
    key.write_text("k")
    path = tmp_path / "fedsched.yaml"
    path.write_text(
        f"log: kafka://h:1\npostgres_dsn: x\napi: {{jwt_public_key: k.pem}}\naudit: {audit.replace('KEY', str(key))}\n"
    )
    with pytest.raises(ConfigError, match=says):
        SupervisorConfig.load(path)


def test_each_kubernetes_cluster_joined_gets_its_connector_with_the_log_and_no_other_secret(tmp_path: Path) -> None:
    (tmp_path / "east.kubeconfig").write_text("apiVersion: v1\n")
    path = tmp_path / "fedsched.yaml"
    path.write_text(
        "log: kafka://10.0.0.5:9092\npostgres_dsn: postgresql://pg/fedsched\napi: {jwt_secret: s}\n"
        f"kubernetes:\n  - {{cluster: gpu-east, kubeconfig: {tmp_path / 'east.kubeconfig'}, context: admin@east,"
        f" config: {tmp_path / 'east.kubeconfig'}}}\n"
    )
    children = SupervisorConfig.load(path).children()
    connector = children["connector-gpu-east"]
    assert list(connector.argv) == [
        "connector",
        "kubernetes",
        "--cluster",
        "gpu-east",
        "--kubeconfig",
        str(tmp_path / "east.kubeconfig"),
        "--context",
        "admin@east",
        "--config",
        str(tmp_path / "east.kubeconfig"),
        "--metrics",
        "127.0.0.1:9469",  # after the five components' ports
    ]
    assert connector.env == {"FEDSCHED_LOG": "kafka://10.0.0.5:9092"}


@pytest.mark.parametrize(
    ("joined", "says"),
    [
        ("{cluster: Bad_Id, kubeconfig: K}", "cluster: required, an id"),
        ("{cluster: a, kubeconfig: /nonexistent}", "kubeconfig: required, an existing file"),
        ("{cluster: a, kubeconfig: K, token: x}", "unknown settings"),
        ("{cluster: a, kubeconfig: K}\n  - {cluster: a, kubeconfig: K}", "named twice"),
        ("{cluster: a, kubeconfig: K, config: /nonexistent.yaml}", "config: no such file"),
    ],
)
def test_a_bad_kubernetes_entry_names_what_is_wrong(tmp_path: Path, joined: str, says: str) -> None:
    (tmp_path / "k").write_text("apiVersion: v1\n")
    path = tmp_path / "fedsched.yaml"
    entry = joined.replace("K", str(tmp_path / "k"))
    path.write_text(f"log: kafka://h:1\npostgres_dsn: x\napi: {{jwt_secret: s}}\nkubernetes:\n  - {entry}\n")
    with pytest.raises(ConfigError, match=says):
        SupervisorConfig.load(path)
