"""Where a process finds its log and its database: flags first, then the environment.

Called by CLI handlers and composition roots (never by the pure core). ``FEDSCHED_LOG`` is a log URL
(``kafka://host:port`` or ``postgresql://...``); ``FEDSCHED_POSTGRES_DSN`` the PostgreSQL of the read
models and the audit archive. In embedded mode the log URL is that same DSN.
"""

from __future__ import annotations

import os

from services.cli.main import CliError


def postgres_dsn(flag: str | None) -> str:
    dsn = flag or os.environ.get("FEDSCHED_POSTGRES_DSN")
    if not dsn:
        raise CliError("no PostgreSQL: pass --dsn or set FEDSCHED_POSTGRES_DSN", exit_code=2)
    return dsn


def log_url(flag: str | None) -> str:
    url = flag or os.environ.get("FEDSCHED_LOG") or os.environ.get("FEDSCHED_POSTGRES_DSN")
    if not url:
        raise CliError("no event log: pass --log (kafka://host:port or a PostgreSQL DSN) or set FEDSCHED_LOG", 2)
    return url
