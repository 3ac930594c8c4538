"""The `odradek` command line.

Bad arguments give a one-line message and exit 2, a broker that cannot be reached
or refuses an operation a one-line message and exit 1; never a traceback (set
ODRADEK_DEBUG=1 to see one for an unexpected error).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from odradek import __version__
from odradek.cli import (
    acls,
    cluster,
    consume,
    groups,
    produce,
    serve,
    topics,
    transactions,
    users,
)
from odradek.cli.errors import CliError
from odradek.console import command as console

__all__ = ["CliError", "build_parser", "main"]

DEBUG_ENV = "ODRADEK_DEBUG"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that points at --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="odradek",
        description="Odradek: a Kafka-compatible event-streaming broker written in Python, "
        "and the tools to operate it (or any Kafka-compatible broker).",
        epilog="Run 'odradek COMMAND --help' for a command's options. "
        "Exit codes: 0 done, 1 the broker failed or refused, 2 bad arguments.",
    )
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    serve.add_parser(commands)
    cluster.add_parser(commands)
    topics.add_parser(commands)
    produce.add_parser(commands)
    consume.add_parser(commands)
    groups.add_parser(commands)
    acls.add_parser(commands)
    users.add_parser(commands)
    transactions.add_parser(commands)
    console.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except CliError as exc:
        print(f"odradek: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``odradek consume ... | head``): stop quietly.
        _silence_stdout()
        return 0
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        from odradek.client.errors import KafkaError

        if isinstance(exc, KafkaError):
            from odradek.cli.common import describe_error

            print(f"odradek: {describe_error(exc)}", file=sys.stderr)
        else:
            print(
                f"odradek: unexpected {type(exc).__name__}: {exc} "
                f"(set {DEBUG_ENV}=1 for a traceback)",
                file=sys.stderr,
            )
        return 1


def _silence_stdout() -> None:
    """After a broken pipe, keep the interpreter's final flush from failing again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
