"""``fedsched up`` with a configuration: each component as its own process, supervised.

Called by ``fedsched up --config FILE`` (or when ``FEDSCHED_LOG`` names Kafka). Starts the scheduler,
the projections worker, the audit archiver, governance and the gRPC API as child processes of the same
``fedsched`` command, restarts a child that dies (with backoff), and stops them all on SIGINT/SIGTERM.
In production each would run under the cluster's own supervisor (the Helm chart); this is the same
layout on one machine. Calls ``services.runtime.credentials`` to find the secrets.

Configuration (YAML; every key optional except the log and the DSN, which the environment may give)::

    log: kafka://127.0.0.1:9092        # or a PostgreSQL DSN for the embedded log; or log_file: FILE
    postgres_dsn_file: FILE             # read models and audit archive (postgres_dsn: inline, if it has
                                        # no password worth keeping)
    namespace: ""                       # topic and group prefix
    api: {listen: 0.0.0.0:50051, jwt_secret_file: FILE, jwt_public_key: FILE, issuer: ..., audience: ...,
          tls_cert: FILE, tls_key: FILE, client_ca: FILE}   # jwt_secret: inline, if you must
    projections: {store: memory}        # or rocksdb
    audit: {signing_key_file: FILE, checkpoint_dir: DIR, checkpoint_every: 60}   # the archiver's signed
                                        # checkpoints (``fedsched audit keygen`` makes the key); without
                                        # them the archiver warns that checkpoints are off
    metrics: {host: 127.0.0.1, first_port: 9464}   # /metrics and /healthz of each child, on consecutive
                                        # ports in the order below, then the connectors'; first_port 0: none
    kubernetes:                         # Kubernetes clusters joined: a ``fedsched connector kubernetes``
      - {cluster: gpu-east, kubeconfig: FILE, context: NAME, config: FILE}   # child each, named
                                        # connector-<cluster>; config: its YAML (``--config``)

Secrets never reach a child's command line, which every user of the host can read: the log URL, the
DSN and the JWT secret go into the child's environment, as ``FEDSCHED_LOG``, ``FEDSCHED_POSTGRES_DSN``
and ``FEDSCHED_JWT_SECRET`` when the configuration holds the value, or as ``FEDSCHED_LOG_FILE``,
``FEDSCHED_POSTGRES_DSN_FILE`` and ``FEDSCHED_JWT_SECRET_FILE`` naming the file it gave (the child reads
the file itself, so a rotated secret is picked up at a restart). Unset in the configuration, each comes
from the supervisor's own environment (the same variables). Each child gets only the secrets it uses:
the scheduler and governance no DSN, only the API the JWT secret. Logged URLs are masked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from connectors.kubernetes.names import is_id
from events.audit.checkpoint_files import CHECKPOINT_DIR_ENV, SIGNING_KEY_ENV
from services.runtime import credentials

log = logging.getLogger("fedsched.supervisor")

_API_FLAGS = {
    "listen": "--listen",
    "jwt_public_key": "--jwt-public-key",
    "issuer": "--issuer",
    "audience": "--audience",
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
    "client_ca": "--client-ca",
}
_API_SECRETS = ("jwt_secret", "jwt_secret_file")
_SETTINGS = (
    "log",
    "log_file",
    "postgres_dsn",
    "postgres_dsn_file",
    "namespace",
    "api",
    "projections",
    "metrics",
    "audit",
    "kubernetes",
)
_AUDIT_SETTINGS = ("signing_key_file", "checkpoint_dir", "checkpoint_every")

COMPONENTS = ("scheduler", "api", "projections", "archiver", "governance")  # metrics ports in this order
_USES_DSN = frozenset({"api", "projections", "archiver"})


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret as it was given: its value, or the file holding it (read by whoever uses it)."""

    value: str | None = field(default=None, repr=False)
    file: Path | None = None

    def environment(self, variable: str) -> dict[str, str]:
        """What a child's environment gets: the file's path, or else the value."""
        if self.file is not None:
            return {credentials.file_variable(variable): str(self.file)}
        assert self.value is not None
        return {variable: self.value}

    def shown(self) -> str:
        """For a log line: the file, or the value with any password masked."""
        return f"file:{self.file}" if self.file is not None else credentials.masked(self.value or "")


@dataclass(frozen=True, slots=True)
class Child:
    """One component's process: its arguments after ``fedsched`` (no secret among them) and the
    variables set in its environment (its secrets, or the files holding them)."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(repr=False)


@dataclass
class SupervisorConfig:
    log: Secret
    postgres_dsn: Secret
    namespace: str = ""
    api: dict[str, str] = field(default_factory=dict)
    """The API's settings that are not secret (listen, issuer, key and certificate paths)."""
    jwt_secret: Secret | None = None
    projections: dict[str, str] = field(default_factory=dict)
    metrics_host: str = "127.0.0.1"
    metrics_first_port: int = 9464
    audit: dict[str, str] = field(default_factory=dict)
    """The archiver's signing key file and checkpoint directory (absolute paths) and cadence."""
    kubernetes: tuple[dict[str, str], ...] = ()
    """Kubernetes clusters joined: ``cluster``, ``kubeconfig`` (an absolute path) and maybe ``context``."""

    @classmethod
    def load(cls, path: Path | None, environ: Mapping[str, str] | None = None) -> SupervisorConfig:
        env = os.environ if environ is None else environ
        raw: dict[str, Any] = {}
        if path is not None:
            try:
                raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as error:
                raise ConfigError(f"{path}: {error}") from None
            if not isinstance(raw, dict):
                raise ConfigError(f"{path}: must be a mapping of settings")
        unknown = sorted(set(raw) - set(_SETTINGS))
        if unknown:
            raise ConfigError(f"unknown settings: {unknown}")
        log_url = _secret(raw, "log", credentials.LOG, env)
        if log_url is None:
            raise ConfigError("log: required (kafka://host:port or a PostgreSQL DSN; or log_file), or set FEDSCHED_LOG")
        dsn = _secret(raw, "postgres_dsn", credentials.POSTGRES_DSN, env)
        if dsn is None:
            raise ConfigError("postgres_dsn: required (or postgres_dsn_file), or set FEDSCHED_POSTGRES_DSN(_FILE)")
        api = raw.get("api") or {}
        if not isinstance(api, dict):
            raise ConfigError("api: a mapping of settings")
        bad = sorted(set(api) - set(_API_FLAGS) - set(_API_SECRETS))
        if bad:
            raise ConfigError(f"api: unknown settings {bad}")
        jwt_secret = _secret(api, "jwt_secret", credentials.JWT_SECRET, env, where="api: ")
        if jwt_secret is None and "jwt_public_key" not in api and not env.get("FEDSCHED_JWT_PUBLIC_KEY"):
            raise ConfigError(
                "api: a token key is required: jwt_secret_file or jwt_public_key (or FEDSCHED_JWT_SECRET(_FILE)"
                " or FEDSCHED_JWT_PUBLIC_KEY in the environment)"
            )
        metrics = raw.get("metrics") or {}
        if not isinstance(metrics, dict) or set(metrics) - {"host", "first_port"}:
            raise ConfigError("metrics: a mapping of host and first_port")
        first_port = metrics.get("first_port", cls.metrics_first_port)
        if not isinstance(first_port, int) or not (first_port == 0 or 0 < first_port <= 65535 - len(COMPONENTS)):
            raise ConfigError(f"metrics: first_port must be 0 (off) or a port number, got {first_port!r}")
        audit = _audit_settings(raw.get("audit"))
        kubernetes = _kubernetes_settings(raw.get("kubernetes"))
        if first_port and first_port + len(COMPONENTS) + len(kubernetes) - 1 > 65535:
            raise ConfigError(f"metrics: first_port {first_port} leaves no port for every component and connector")
        return cls(
            log_url,
            dsn,
            str(raw.get("namespace") or ""),
            {k: str(v) for k, v in api.items() if k in _API_FLAGS},
            jwt_secret,
            {k: str(v) for k, v in (raw.get("projections") or {}).items()},
            str(metrics.get("host", cls.metrics_host)),
            first_port,
            audit,
            kubernetes,
        )

    def children(self) -> dict[str, Child]:
        """Each component's process: arguments without a secret, and the secrets it uses as variables."""
        ns = ["--namespace", self.namespace] if self.namespace else []
        api = ["api"]
        for key, value in sorted(self.api.items()):
            api += [_API_FLAGS[key], value]
        projections = ["projections", "worker"]
        if "store" in self.projections:
            projections += ["--store", self.projections["store"]]
        commands = {
            "scheduler": ["scheduler", *ns],
            "projections": projections,
            "archiver": ["audit", "archive"]
            + (["--checkpoint-every", self.audit["checkpoint_every"]] if "checkpoint_every" in self.audit else []),
            "governance": ["gov", "run", *ns],
            "api": api,
        }
        for joined in self.kubernetes:
            argv = ["connector", "kubernetes", "--cluster", joined["cluster"], "--kubeconfig", joined["kubeconfig"]]
            argv += ["--context", joined["context"]] if "context" in joined else []
            argv += ["--config", joined["config"]] if "config" in joined else []
            commands[f"connector-{joined['cluster']}"] = argv
        if self.metrics_first_port:
            order = [*COMPONENTS, *(name for name in commands if name not in COMPONENTS)]
            for offset, name in enumerate(order):  # the components in COMPONENTS' order, then the connectors
                flag = "--metrics-listen" if name == "api" else "--metrics"
                commands[name] += [flag, f"{self.metrics_host}:{self.metrics_first_port + offset}"]
        out = {}
        for name, argv in commands.items():
            env = self.log.environment(credentials.LOG)
            if name in _USES_DSN:
                env |= self.postgres_dsn.environment(credentials.POSTGRES_DSN)
            if name == "api" and self.jwt_secret is not None:
                env |= self.jwt_secret.environment(credentials.JWT_SECRET)
            if name == "archiver" and "signing_key_file" in self.audit:
                # The key's path, not the key: the archiver reads it (and refuses one others may read).
                env |= {
                    SIGNING_KEY_ENV: self.audit["signing_key_file"],
                    CHECKPOINT_DIR_ENV: self.audit["checkpoint_dir"],
                }
            out[name] = Child(name, tuple(argv), env)
        return out


_JOIN_SETTINGS = ("cluster", "kubeconfig", "context", "config")


def _kubernetes_settings(raw: object) -> tuple[dict[str, str], ...]:
    """The ``kubernetes:`` list: each a cluster id and its kubeconfig file (which must exist), maybe a
    context; a cluster named twice is refused."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("kubernetes: a list of {cluster, kubeconfig, context}")
    out: list[dict[str, str]] = []
    for i, entry in enumerate(raw):
        where = f"kubernetes[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: a mapping of cluster, kubeconfig and context")
        bad = sorted(set(entry) - set(_JOIN_SETTINGS))
        if bad:
            raise ConfigError(f"{where}: unknown settings {bad}")
        cluster, kubeconfig = entry.get("cluster"), entry.get("kubeconfig")
        if not isinstance(cluster, str) or not is_id(cluster):
            raise ConfigError(f"{where}: cluster: required, an id (lowercase letters, digits, . _ -)")
        if any(joined["cluster"] == cluster for joined in out):
            raise ConfigError(f"{where}: cluster {cluster} is named twice")
        if not isinstance(kubeconfig, str) or not Path(kubeconfig).expanduser().is_file():
            raise ConfigError(f"{where}: kubeconfig: required, an existing file (got {kubeconfig!r})")
        joined = {"cluster": cluster, "kubeconfig": str(Path(kubeconfig).expanduser().absolute())}
        if entry.get("context") is not None:
            joined["context"] = str(entry["context"])
        if entry.get("config") is not None:
            file = Path(str(entry["config"])).expanduser()
            if not file.is_file():
                raise ConfigError(f"{where}: config: no such file {file}")
            joined["config"] = str(file.absolute())
        out.append(joined)
    return tuple(out)


def _audit_settings(raw: object) -> dict[str, str]:
    """The ``audit:`` section: the key file and the directory together or neither, a positive cadence."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("audit: a mapping of signing_key_file, checkpoint_dir and checkpoint_every")
    bad = sorted(set(raw) - set(_AUDIT_SETTINGS))
    if bad:
        raise ConfigError(f"audit: unknown settings {bad}")
    if ("signing_key_file" in raw) != ("checkpoint_dir" in raw):
        raise ConfigError("audit: signing_key_file and checkpoint_dir go together (give both or neither)")
    out = {key: str(Path(str(raw[key])).absolute()) for key in ("signing_key_file", "checkpoint_dir") if key in raw}
    if "signing_key_file" in out and not Path(out["signing_key_file"]).is_file():
        raise ConfigError(f"audit: signing_key_file: no such file {out['signing_key_file']}")
    every = raw.get("checkpoint_every")
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int | float) or every <= 0:
            raise ConfigError(f"audit: checkpoint_every must be a positive number of seconds, got {every!r}")
        out["checkpoint_every"] = str(every)
    return out


def _secret(
    raw: Mapping[str, Any], key: str, variable: str, environ: Mapping[str, str], *, where: str = ""
) -> Secret | None:
    """A secret setting ``key`` (inline) or ``key_file``, else ``variable`` or ``variable_FILE`` of the
    environment; each file is read once here, so a wrong path is reported now, not by a restarting child."""
    value, path = raw.get(key), raw.get(f"{key}_file")
    names = (f"{where}{key}", f"{where}{key}_file")
    if value is not None and path is not None:
        raise ConfigError(f"{names[0]} and {names[1]}: give only one")
    if value is None and path is None:
        value = environ.get(variable) or None
        path = environ.get(credentials.file_variable(variable)) or None
        names = (variable, credentials.file_variable(variable))
        if value is not None and path is not None:
            raise ConfigError(f"{names[0]} and {names[1]} are both set: set only one")
    if path is not None:
        file = Path(str(path)).absolute()  # the child may start in another folder
        try:
            credentials.read_secret_file(file, names[1])
        except credentials.SecretError as error:
            raise ConfigError(str(error)) from None
        return Secret(file=file)
    if value is not None:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{names[0]}: must be a non-empty string")
        return Secret(value=value)
    return None


def environment(child: Child, parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment: the parent's without any secret variable, then the child's own."""
    base = dict(os.environ if parent is None else parent)
    for variable in credentials.SECRET_VARIABLES:
        base.pop(variable, None)
        base.pop(credentials.file_variable(variable), None)
    return base | dict(child.env)


async def supervise(
    config: SupervisorConfig, *, stop: asyncio.Event | None = None, components: Collection[str] | None = None
) -> int:
    """Run the children (``components``: a subset, as a host running only some of them; default all)
    until ``stop`` is set or SIGINT/SIGTERM arrives."""
    every = config.children()
    unknown = sorted(set(components or ()) - set(every))
    if unknown:
        raise ConfigError(f"components: unknown {unknown} (known: {', '.join(every)})")
    chosen = [child for name, child in every.items() if components is None or name in components]
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    log.info(
        "event=supervisor_started log=%s postgres=%s components=%s",
        config.log.shown(),
        config.postgres_dsn.shown(),
        ",".join(child.name for child in chosen),
    )
    children = [asyncio.create_task(_keep_running(child, stop)) for child in chosen]
    try:
        await stop.wait()
    finally:
        stop.set()  # also when this call is cancelled: the children are stopped, not left behind
        await asyncio.gather(*children, return_exceptions=True)
        for sig in handled:  # the loop may outlive this call (tests, an embedding program)
            loop.remove_signal_handler(sig)
    return 0


async def _keep_running(child: Child, stop: asyncio.Event) -> None:
    backoff = 1.0
    name = child.name
    while not stop.is_set():
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", *child.argv, env=environment(child)
        )
        log.info("event=child_started component=%s pid=%d", name, process.pid)
        waiter = asyncio.create_task(process.wait())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            stopper.cancel()
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(waiter, 30)
                except TimeoutError:
                    process.kill()
                    await waiter
            return
        stopper.cancel()
        log.warning("event=child_exited component=%s code=%s restart_in_s=%.0f", name, process.returncode, backoff)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), backoff)
        backoff = min(backoff * 2, 60.0)
