"""The `odradek` command line.

Bad arguments give a one-line message and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from odradek import __version__
from odradek.cli import serve


class CliError(Exception):
    """A problem the user can fix; printed as one line."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="odradek",
        description="Odradek: a Kafka-compatible event-streaming broker written in Python.",
    )
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    serve.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except CliError as exc:
        print(f"odradek: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
