"""The ``fedsched`` command: one entry point, one sub-command module per area.

Each module in ``COMMAND_MODULES`` has ``register(subparsers)``, which adds its sub-commands and sets
``handler`` on them: a function ``(args) -> int`` (the exit code), sync or async. Modules import heavy
libraries inside their handlers so ``fedsched --help`` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import os
import signal
import sys
from collections.abc import Callable, Sequence

COMMAND_MODULES = (
    "services.cli.events_cmd",
    "services.cli.audit_cmd",
    "services.cli.bench_cmd",
    "services.cli.simulate_cmd",
    "services.cli.scheduler_cmd",
    "services.cli.up_cmd",
    "services.cli.connector_cmd",
    "services.cli.projections_cmd",
    "services.cli.api_cmd",
    "services.cli.people_cmd",
    "services.cli.config_cmd",
    "services.cli.gov_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedsched",
        description="Event-sourced federation scheduler for AI compute across many clusters.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    _help_without_action(parser)
    return parser


def _help_without_action(parser: argparse.ArgumentParser) -> None:
    """A group named without its action (``fedsched gov quota``) prints its own help, not the top one."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if parser.get_default("handler") is None:
                parser.set_defaults(handler=_print_help(parser))
            for child in action.choices.values():
                _help_without_action(child)


def _print_help(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return run


def main(argv: Sequence[str] | None = None) -> int:
    # gRPC's core logs INFO lines to stderr, for instance that a fork skipped its handlers when
    # ``audit verify`` forks its workers beside the API in ``fedsched demo``: errors only, unless asked.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.handler(args)
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
        sys.stdout.flush()  # here, so a reader that went away is seen below and not at interpreter exit
    except KeyboardInterrupt:
        return 130
    except CliError as error:
        print(f"fedsched: {error}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:
        return _reader_gone()
    return int(result or 0)


def _reader_gone() -> int:
    """Stop quietly when standard output is closed early (``fedsched jobs | head``), as ``cat`` would."""
    # Python flushes stdout again at exit and would report that write failing too: send what is left
    # in the buffer nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


class CliError(Exception):
    """An error for a person at a terminal: printed as one line, with an exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


if __name__ == "__main__":
    # Run as a module, this file is ``__main__``; handlers raise ``services.cli.main.CliError``, so
    # call the main of that module, not this copy of it.
    from services.cli.main import main as package_main

    sys.exit(package_main())
