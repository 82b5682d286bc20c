"""Secrets of a process (the log URL, the PostgreSQL DSN, the JWT secret): found in the environment or a
file, warned about on the command line, masked in what is logged.

Called by the CLI's composition roots (``services.cli.config`` for the log URL and the DSN,
``services.cli.api_cmd`` for the JWT secret) and by the supervisor (``services.runtime.supervisor``),
which hands each child the secrets it needs through the child's environment. Reads the environment and
the files it names; nothing else.

Why not argv: a process's command line is readable by every user of the host (``ps``,
``/proc/<pid>/cmdline``); its environment and a file of mode 0600 only by its owner and root. Each
secret has two variables: ``FEDSCHED_<NAME>`` holds the value, ``FEDSCHED_<NAME>_FILE`` names a file
holding it (a mounted Kubernetes secret, a file of mode 0600); both set at once is refused as
ambiguous. A secret given on the command line is still accepted, with a warning naming the variables to
use instead: refusing it would break every script and test that passes ``--dsn`` today, for a risk the
operator is told about and can remove.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

LOG = "FEDSCHED_LOG"
POSTGRES_DSN = "FEDSCHED_POSTGRES_DSN"
JWT_SECRET = "FEDSCHED_JWT_SECRET"
SECRET_VARIABLES = (LOG, POSTGRES_DSN, JWT_SECRET)
"""Each of these also has its ``_FILE`` twin."""

MASK = "***"
_QUERY_PASSWORD = re.compile(r"((?:^|[?&;])(?:ssl)?password=)[^&#;]*", re.IGNORECASE)
# libpq's keyword form: host=... password=secret (or password='with spaces').
_KEYWORD_PASSWORD = re.compile(r"(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)

log = logging.getLogger("fedsched.credentials")


class SecretError(ValueError):
    """A secret that cannot be read, or is given twice."""


def file_variable(variable: str) -> str:
    return variable + "_FILE"


def from_environment(variable: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The secret ``variable`` holds, or the content of the file ``variable_FILE`` names; ``None`` when
    neither is set. Raises ``SecretError`` when both are, or the file cannot be read or is empty."""
    env = os.environ if environ is None else environ
    value = env.get(variable) or None
    path = env.get(file_variable(variable)) or None
    if value is not None and path is not None:
        raise SecretError(f"{variable} and {file_variable(variable)} are both set: set only one")
    if path is not None:
        return read_secret_file(Path(path), file_variable(variable))
    return value


def read_secret_file(path: Path, name: str) -> str:
    """The secret in ``path`` without surrounding whitespace (a trailing newline is the norm); ``name``
    (the flag, setting or variable that named the file) leads the error."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise SecretError(f"{name}: cannot read {path}: {reason}") from None
    if not text:
        raise SecretError(f"{name}: {path} is empty")
    return text


def warn_on_command_line(flag: str, variable: str) -> None:
    """Say that a secret was given on the command line, and where it belongs (never the secret itself)."""
    log.warning(
        "event=secret_on_command_line flag=%s: the command line is visible to every user of this host "
        "(ps, /proc/<pid>/cmdline); set %s or %s (a file of mode 0600) instead",
        flag,
        variable,
        file_variable(variable),
    )


def masked(url: str) -> str:
    """``url`` with any password replaced by ``***``: in the user part of a URL, in a ``password`` or
    ``sslpassword`` query parameter, or in libpq's ``password=...`` keyword form."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + MASK, url)
    # The user part ends at the last '@': a raw (unencoded) password may hold '/', '?' or '@'. An '@' in a
    # query parameter makes this hide more than the password, never less.
    at = rest.rfind("@")
    if at >= 0:
        user, colon, password = rest[:at].partition(":")
        if colon and password:
            rest = f"{user}:{MASK}{rest[at:]}"
    head, question, query = rest.partition("?")
    if question:
        query = _QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, query)
    return f"{scheme}{separator}{head}{question}{query}"


def has_password(url: str) -> bool:
    """Whether ``url`` carries a password (``masked`` would change it)."""
    return masked(url) != url
