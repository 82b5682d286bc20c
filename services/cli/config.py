"""Where a process finds its log and its database: flags first, then the environment or a file it names.

Called by CLI handlers and composition roots (never by the pure core). ``FEDSCHED_LOG`` is a log URL
(``kafka://host:port`` or ``postgresql://...``); ``FEDSCHED_POSTGRES_DSN`` the PostgreSQL of the read
models and the audit archive. In embedded mode the log URL is that same DSN. Either may instead sit in a
file named by ``FEDSCHED_LOG_FILE`` or ``FEDSCHED_POSTGRES_DSN_FILE`` (``services.runtime.credentials``),
which is how ``fedsched up --config`` hands them to its children. A ``--dsn`` or ``--log`` holding a
password is used, with a warning that the command line is visible to every user of the host.
"""

from __future__ import annotations

from services.cli.main import CliError
from services.runtime import credentials


def postgres_dsn(flag: str | None) -> str:
    if flag:
        return _from_flag("--dsn", flag, credentials.POSTGRES_DSN)
    dsn = _from_environment(credentials.POSTGRES_DSN)
    if not dsn:
        raise CliError(
            "no PostgreSQL: set FEDSCHED_POSTGRES_DSN or FEDSCHED_POSTGRES_DSN_FILE (or pass --dsn)", exit_code=2
        )
    return dsn


def log_url(flag: str | None) -> str:
    if flag:
        return _from_flag("--log", flag, credentials.LOG)
    url = _from_environment(credentials.LOG) or _from_environment(credentials.POSTGRES_DSN)
    if not url:
        raise CliError(
            "no event log: set FEDSCHED_LOG or FEDSCHED_LOG_FILE (kafka://host:port or a PostgreSQL DSN),"
            " or pass --log",
            2,
        )
    return url


def _from_flag(flag: str, value: str, variable: str) -> str:
    if credentials.has_password(value):
        credentials.warn_on_command_line(flag, variable)
    return value


def _from_environment(variable: str) -> str | None:
    try:
        return credentials.from_environment(variable)
    except credentials.SecretError as error:
        raise CliError(str(error), 2) from None
