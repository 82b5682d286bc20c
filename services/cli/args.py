"""Argument types shared by the sub-commands: a value is checked when it is parsed.

Used as ``type=`` of ``argparse`` arguments, so a bad value is refused before any connection is opened,
with argparse's own message naming the option (``argument --until: not an RFC 3339 time: ...``) and
exit code 2, the code for bad input everywhere in the CLI.
"""

from __future__ import annotations

import argparse


def rfc3339_ms(text: str) -> int:
    """An RFC 3339 time with its offset, as epoch milliseconds."""
    from events.wire.envelope import parse_time  # imported here so ``fedsched --help`` stays fast

    try:
        return parse_time(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"not an RFC 3339 time such as 2026-12-01T09:00:00Z ({error}): {text!r}"
        ) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def time_range(since_ms: int | None, until_ms: int | None) -> None:
    """Refuse ``--since`` after ``--until``: such a range holds nothing, which is never what was meant."""
    from events.wire.envelope import format_time
    from services.cli.main import CliError

    if since_ms is not None and until_ms is not None and since_ms > until_ms:
        raise CliError(f"--since {format_time(since_ms)} is later than --until {format_time(until_ms)}", 2)


class Retired(argparse.Action):
    """An option a command no longer takes: given anyway (with or without a value), the command is refused
    before anything runs, saying why (``argument --by: ...``, exit 2), so an old script fails clearly
    rather than having its option ignored. Hidden from the help."""

    def __init__(self, option_strings: list[str], dest: str, *, why: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        self.why = why

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        raise argparse.ArgumentError(self, f"no longer accepted: {self.why}")


#: Why the CLI's API commands take no ``--log`` or ``--dsn``.
THROUGH_THE_API = (
    "this command is a client of the API now: it reaches it with --server (FEDSCHED_SERVER) and your token"
    " (--token, FEDSCHED_TOKEN or FEDSCHED_TOKEN_FILE), never the log or the database"
)


def retire(parser: argparse.ArgumentParser, *options: str, why: str = THROUGH_THE_API) -> None:
    """Refuse each of ``options`` on ``parser`` with ``why`` (``Retired``)."""
    for option in options:
        parser.add_argument(option, action=Retired, why=why)
