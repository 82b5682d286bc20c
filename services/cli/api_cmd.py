"""Sub-commands: ``fedsched api`` (the gRPC API, with the intake) and ``fedsched intake`` (the intake alone).

Composition roots (the API gets governance's quota rules, ``services.governance.quota_rules``, here):
read flags, then the environment (``FEDSCHED_LOG``, ``FEDSCHED_POSTGRES_DSN``,
``FEDSCHED_JWT_SECRET``, ``FEDSCHED_JWT_PUBLIC_KEY``, ``FEDSCHED_JWT_ISSUER``, ``FEDSCHED_JWT_AUDIENCE``,
``FEDSCHED_TLS_CERT``, ``FEDSCHED_TLS_KEY``, ``FEDSCHED_CLIENT_CA``), run until SIGINT or SIGTERM.
The secrets (log URL, DSN, JWT secret) may also sit in a file named by the same variable with ``_FILE``
(``services.runtime.credentials``); one given on the command line works but logs a warning, as argv is
visible to every user of the host. Without a key, ``--dev DIR`` makes a local development key in DIR,
serves on loopback only and keeps a 12-hour admin token in DIR/dev-token, renewed while it runs; without
either the command refuses to start (deny by default). Heavy imports stay inside the handlers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from events.plumbing.collector import tune_for_service
from events.plumbing.logs import configure as configure_logging
from events.plumbing.signals import stop_on_signals
from projections.readmodel.rows.tables import SCHEMA
from services.cli.main import CliError

if TYPE_CHECKING:
    from services.api.auth import AuthConfig
    from services.api.config import ApiConfig


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    api = sub.add_parser(
        "api",
        help="serve the gRPC API (jobs, resources, quota, audit) and the event intake",
        description="Serve the fedsched.v1 gRPC API with bearer-JWT auth, TLS when configured, and the "
        "event intake for MLOps tools (fedsched.intake).",
    )
    api.add_argument("--listen", default=os.environ.get("FEDSCHED_API_LISTEN", "127.0.0.1:50051"), help="host:port")
    _common(api)
    api.add_argument("--tls-cert", type=Path, default=_env_path("FEDSCHED_TLS_CERT"), help="server certificate (PEM)")
    api.add_argument("--tls-key", type=Path, default=_env_path("FEDSCHED_TLS_KEY"), help="server private key (PEM)")
    api.add_argument(
        "--client-ca", type=Path, default=_env_path("FEDSCHED_CLIENT_CA"), help="require client certificates of this CA"
    )
    api.add_argument("--no-intake", action="store_true", help="do not run the event intake in this process")
    api.add_argument(
        "--metrics-listen",
        default=os.environ.get("FEDSCHED_METRICS_LISTEN"),
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus) and /healthz here",
    )
    api.set_defaults(handler=_reported(run_api))

    intake = sub.add_parser("intake", help="run only the event intake for MLOps tools (fedsched.intake)")
    _common(intake)
    intake.set_defaults(handler=_reported(run_intake))


def _reported(
    handler: Callable[[argparse.Namespace], Awaitable[int]],
) -> Callable[[argparse.Namespace], Awaitable[int]]:
    """Report a ``CliError`` here, so it reads the same however the CLI was started."""

    async def run(args: argparse.Namespace) -> int:
        try:
            return await handler(args)
        except CliError as error:
            print(f"fedsched: {error}", file=sys.stderr)
            return error.exit_code

    return run


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log", help="log URL: kafka://host:port or a PostgreSQL DSN (default: FEDSCHED_LOG)")
    parser.add_argument("--dsn", help="PostgreSQL of the read models (default: FEDSCHED_POSTGRES_DSN)")
    parser.add_argument(
        "--jwt-secret",
        help="HS256 secret; visible to every user of the host: prefer --jwt-secret-file, FEDSCHED_JWT_SECRET_FILE"
        " or FEDSCHED_JWT_SECRET",
    )
    parser.add_argument(
        "--jwt-secret-file", type=Path, help="file holding the HS256 secret (default: FEDSCHED_JWT_SECRET_FILE)"
    )
    parser.add_argument(
        "--jwt-public-key", type=Path, default=_env_path("FEDSCHED_JWT_PUBLIC_KEY"), help="RS256 public key (PEM)"
    )
    parser.add_argument("--issuer", default=os.environ.get("FEDSCHED_JWT_ISSUER"), help="required token issuer")
    parser.add_argument("--audience", default=os.environ.get("FEDSCHED_JWT_AUDIENCE"), help="required token audience")
    parser.add_argument(
        "--dev", type=Path, metavar="DIR", help="no keys: make a development key in DIR and print an admin token"
    )
    parser.add_argument("--read-schema", default=SCHEMA, help="schema of the read models")
    parser.add_argument("--instance", default="", help="name of this replica (default: host name and pid)")


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def auth_config(args: argparse.Namespace) -> tuple[AuthConfig, bool]:
    """The auth settings from flags and environment; ``True`` when it is the development key."""
    from services.api.auth import DEV_AUDIENCE, DEV_ISSUER, AuthConfig, dev_auth

    text = jwt_secret(args)
    secret = text.encode() if text is not None else None
    public_key = args.jwt_public_key.read_bytes() if args.jwt_public_key else None
    if secret is None and public_key is None:
        if args.dev is None:
            raise CliError(
                "no token key: pass --jwt-secret(-file) or --jwt-public-key, or --dev DIR for development", 2
            )
        return dev_auth(args.dev), True
    try:
        config = AuthConfig(
            issuer=args.issuer or DEV_ISSUER,
            audience=args.audience or DEV_AUDIENCE,
            hs256_secret=secret,
            rs256_public_key=public_key,
        )
    except ValueError as error:
        raise CliError(f"token key: {error}", 2) from None
    return config, False


def jwt_secret(args: argparse.Namespace) -> str | None:
    """The HS256 secret: ``--jwt-secret-file``, ``--jwt-secret`` (with a warning), then the environment."""
    from services.runtime import credentials

    if args.jwt_secret_file and args.jwt_secret:
        raise CliError("--jwt-secret and --jwt-secret-file: give only one", 2)
    try:
        if args.jwt_secret_file:
            return credentials.read_secret_file(args.jwt_secret_file, "--jwt-secret-file")
        if args.jwt_secret:
            credentials.warn_on_command_line("--jwt-secret", credentials.JWT_SECRET)
            return str(args.jwt_secret)
        return credentials.from_environment(credentials.JWT_SECRET)
    except credentials.SecretError as error:
        raise CliError(str(error), 2) from None


def api_config(args: argparse.Namespace, *, intake: bool) -> tuple[ApiConfig, bool]:
    from services.api.config import ApiConfig, TlsConfig, check_listen
    from services.cli.config import log_url, postgres_dsn

    auth, dev = auth_config(args)
    listen = getattr(args, "listen", "127.0.0.1:50051")
    try:
        check_listen(listen, auth, flag="--listen")
    except ValueError as error:
        raise CliError(str(error), 2) from None
    tls = None
    if getattr(args, "tls_cert", None) or getattr(args, "tls_key", None):
        if not (args.tls_cert and args.tls_key):
            raise CliError("TLS needs both --tls-cert and --tls-key", 2)
        tls = TlsConfig.from_files(args.tls_cert, args.tls_key, args.client_ca)
    elif getattr(args, "client_ca", None):
        raise CliError("--client-ca (mutual TLS) needs --tls-cert and --tls-key", 2)
    config = ApiConfig(
        log_url=log_url(args.log),
        dsn=postgres_dsn(args.dsn),
        auth=auth,
        listen=listen,
        tls=tls,
        read_schema=args.read_schema,
        intake=intake,
        instance=args.instance,
    )
    return config, dev


async def _until_signalled() -> None:
    stop = stop_on_signals()
    await stop.wait()


async def run_api(args: argparse.Namespace) -> int:

    from services.api.auth import DEV_TOKEN_TTL_S
    from services.api.dev_tokens import DevTokens
    from services.api.server import serve
    from services.governance.api_reads import GovernanceReports
    from services.governance.quota_rules import GovernanceQuotaRules

    configure_logging()

    tune_for_service()
    config, dev = api_config(args, intake=not args.no_intake)
    api = await serve(config, quota_rules=GovernanceQuotaRules(), governance=GovernanceReports())
    print(f"fedsched api: listening on {api.address}", flush=True)
    metrics_server = None
    if args.metrics_listen:
        from events.plumbing.metrics import Metrics

        metrics = Metrics()
        metrics.add_source(api.samples)
        metrics.add_check("api", lambda: True)
        host, _, port = args.metrics_listen.rpartition(":")
        metrics_server = await metrics.serve(host or "127.0.0.1", int(port))
        print(f"fedsched api: metrics on {args.metrics_listen}", flush=True)
    stop = stop_on_signals()
    renewal: asyncio.Task[None] | None = None
    if dev:
        tokens = DevTokens(config.auth, args.dev)
        tokens.renew_if_due()
        hours = DEV_TOKEN_TTL_S // 3600
        print(
            f"fedsched api: development token (admin, every tenant, {hours} h, renewed in {tokens.path}):\n"
            f"{tokens.token}",
            flush=True,
        )
        renewal = asyncio.create_task(tokens.keep_fresh(stop), name="dev-token")
    try:
        await stop.wait()
    finally:
        if renewal is not None:
            stop.set()  # also when the wait itself was cancelled
            await renewal
        if metrics_server is not None:
            metrics_server.close()
        await api.stop()
    return 0


async def run_intake(args: argparse.Namespace) -> int:
    from events.log.publisher import Publisher
    from events.plumbing.startup import patiently
    from projections.readmodel import writer as readmodels
    from projections.readmodel.reader import ReadModels
    from services.api.commands import JobCommands
    from services.api.intake import Intake
    from services.api.store import ApiStore
    from services.cli.config import started_log, started_pool

    configure_logging()

    tune_for_service()
    config, _ = api_config(args, intake=True)
    log = await started_log(config.log_url, "intake")
    pool = await started_pool(config.dsn, "intake", 4)
    publisher = Publisher(log, config.source)
    intake: Intake | None = None
    try:
        await patiently("postgres", lambda: readmodels.ensure_schema(pool, config.read_schema), component="intake")
        store = ApiStore(pool, config.api_schema)
        await patiently("postgres", store.ensure_schema, component="intake")
        await patiently("log", publisher.start, component="intake", undo=publisher.close)
        intake = Intake(log, JobCommands(publisher, store, ReadModels(pool, config.read_schema)), config)
        await intake.start()
        print("fedsched intake: consuming fedsched.intake", flush=True)
        task = asyncio.create_task(intake.run())
        await _until_signalled()
        intake.stop()
        await task
    finally:
        if intake is not None:
            await intake.close()
        await publisher.close()
        await pool.close()
        await log.close()
    print(f"fedsched intake: stopped ({intake.stats if intake else ''})", file=sys.stderr)
    return 0
