"""Where a process finds its log and its database: flags first, then the environment or a file it names.

Called by CLI handlers and composition roots (never by the pure core); ``started_log`` and
``started_pool`` open them for a service, waiting out an outage at its start. ``FEDSCHED_LOG`` is a log URL
(``kafka://host:port`` or ``postgresql://...``); ``FEDSCHED_POSTGRES_DSN`` the PostgreSQL of the read
models and the audit archive. In embedded mode the log URL is that same DSN. Either may instead sit in a
file named by ``FEDSCHED_LOG_FILE`` or ``FEDSCHED_POSTGRES_DSN_FILE`` (``services.runtime.credentials``),
which is how ``fedsched up --config`` hands them to its children. A ``--dsn`` or ``--log`` holding a
password is used, with a warning that the command line is visible to every user of the host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from events.plumbing.startup import patiently
from services.cli.main import CliError
from services.runtime import credentials

if TYPE_CHECKING:
    import asyncpg

    from events.log.contract import EventLog


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


async def started_log(url: str, component: str, *, topics: bool = True) -> EventLog:
    """The log at ``url``, started (and its topics made, unless ``topics`` is false), waiting out an
    outage of the broker or database meanwhile (``events.plumbing.startup``)."""
    from events.catalog.topics import TOPICS
    from events.log import open_log

    log = open_log(url)
    await patiently("log", log.start, component=component, undo=log.close)
    if topics:
        await patiently("log", lambda: log.create_topics(TOPICS), component=component)
    return log


async def started_pool(dsn: str, component: str, max_size: int) -> asyncpg.Pool:
    """A pool on ``dsn``, waiting out an outage of the database meanwhile."""
    import asyncpg

    return await patiently(
        "postgres", lambda: asyncpg.create_pool(dsn, min_size=1, max_size=max_size), component=component
    )
