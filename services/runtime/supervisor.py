"""``fedsched up`` with a configuration: each component as its own process, supervised.

Called by ``fedsched up --config FILE`` (or when ``FEDSCHED_LOG`` names Kafka). Starts the scheduler,
the projections worker, the audit archiver, governance and the gRPC API as child processes of the same
``fedsched`` command, restarts a child that dies (with backoff), and stops them all on SIGINT/SIGTERM.
In production each would run under the cluster's own supervisor (the Helm chart); this is the same
layout on one machine.

Configuration (YAML; every key optional except ``log`` and ``postgres_dsn``)::

    log: kafka://127.0.0.1:9092        # or a PostgreSQL DSN for the embedded log
    postgres_dsn: postgresql://...      # read models and audit archive
    namespace: ""                       # topic and group prefix
    api: {listen: 0.0.0.0:50051, jwt_secret: ..., jwt_public_key: FILE, issuer: ..., audience: ...,
          tls_cert: FILE, tls_key: FILE, client_ca: FILE}
    projections: {store: memory}        # or rocksdb
    metrics: {host: 127.0.0.1, first_port: 9464}   # /metrics and /healthz of each child, on consecutive
                                        # ports in the order below; first_port 0: none served
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger("fedsched.supervisor")

_API_FLAGS = {
    "listen": "--listen",
    "jwt_secret": "--jwt-secret",
    "jwt_public_key": "--jwt-public-key",
    "issuer": "--issuer",
    "audience": "--audience",
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
    "client_ca": "--client-ca",
}


_COMPONENTS = ("scheduler", "api", "projections", "archiver", "governance")  # metrics ports in this order


class ConfigError(ValueError):
    pass


@dataclass
class SupervisorConfig:
    log: str
    postgres_dsn: str
    namespace: str = ""
    api: dict[str, str] = field(default_factory=dict)
    projections: dict[str, str] = field(default_factory=dict)
    metrics_host: str = "127.0.0.1"
    metrics_first_port: int = 9464

    @classmethod
    def load(cls, path: Path | None) -> SupervisorConfig:
        raw: dict[str, Any] = {}
        if path is not None:
            try:
                raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as error:
                raise ConfigError(f"{path}: {error}") from None
            if not isinstance(raw, dict):
                raise ConfigError(f"{path}: must be a mapping of settings")
        log_url = raw.get("log") or os.environ.get("FEDSCHED_LOG")
        dsn = raw.get("postgres_dsn") or os.environ.get("FEDSCHED_POSTGRES_DSN")
        if not log_url:
            raise ConfigError("log: required (kafka://host:port or a PostgreSQL DSN), or set FEDSCHED_LOG")
        if not dsn:
            raise ConfigError("postgres_dsn: required, or set FEDSCHED_POSTGRES_DSN")
        unknown = sorted(set(raw) - {"log", "postgres_dsn", "namespace", "api", "projections", "metrics"})
        if unknown:
            raise ConfigError(f"unknown settings: {unknown}")
        api = raw.get("api") or {}
        bad = sorted(set(api) - set(_API_FLAGS))
        if bad:
            raise ConfigError(f"api: unknown settings {bad}")
        metrics = raw.get("metrics") or {}
        if not isinstance(metrics, dict) or set(metrics) - {"host", "first_port"}:
            raise ConfigError("metrics: a mapping of host and first_port")
        first_port = metrics.get("first_port", cls.metrics_first_port)
        if not isinstance(first_port, int) or not (first_port == 0 or 0 < first_port <= 65535 - len(_COMPONENTS)):
            raise ConfigError(f"metrics: first_port must be 0 (off) or a port number, got {first_port!r}")
        return cls(
            str(log_url),
            str(dsn),
            str(raw.get("namespace") or ""),
            {k: str(v) for k, v in api.items()},
            {k: str(v) for k, v in (raw.get("projections") or {}).items()},
            str(metrics.get("host", cls.metrics_host)),
            first_port,
        )

    def commands(self) -> dict[str, list[str]]:
        ns = ["--namespace", self.namespace] if self.namespace else []
        api = ["api", "--log", self.log, "--dsn", self.postgres_dsn]
        for key, value in sorted(self.api.items()):
            api += [_API_FLAGS[key], value]
        projections = ["projections", "worker", "--log", self.log, "--dsn", self.postgres_dsn]
        if "store" in self.projections:
            projections += ["--store", self.projections["store"]]
        commands = {
            "scheduler": ["scheduler", "--log", self.log, *ns],
            "projections": projections,
            "archiver": ["audit", "archive", "--log", self.log, "--dsn", self.postgres_dsn],
            "governance": ["gov", "run", "--log", self.log, *ns],
            "api": api,
        }
        if self.metrics_first_port:
            for offset, name in enumerate(_COMPONENTS):
                flag = "--metrics-listen" if name == "api" else "--metrics"
                commands[name] += [flag, f"{self.metrics_host}:{self.metrics_first_port + offset}"]
        return commands


async def supervise(config: SupervisorConfig, *, stop: asyncio.Event | None = None) -> int:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    children = [asyncio.create_task(_keep_running(name, argv, stop)) for name, argv in config.commands().items()]
    await stop.wait()
    await asyncio.gather(*children, return_exceptions=True)
    return 0


async def _keep_running(name: str, argv: list[str], stop: asyncio.Event) -> None:
    backoff = 1.0
    while not stop.is_set():
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.cli.main", *argv)
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
