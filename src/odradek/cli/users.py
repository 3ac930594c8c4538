"""`odradek users list|add|remove`: SCRAM users (DescribeUserScramCredentials /
AlterUserScramCredentials), like ``kafka-configs --entity-type users``.

    odradek users add alice --password-file alice.pw            # SCRAM-SHA-512
    odradek users add alice --mechanism SCRAM-SHA-256 --iterations 8192 < alice.pw
    odradek users list
    odradek users remove alice

The password is read from --password-file, from stdin, or prompted for on a
terminal; ``--password`` works too but shows in the process list.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from odradek.cli.common import (
    Failed,
    add_connection_options,
    add_format_option,
    admin_client,
    describe_error,
    failures_as_messages,
    positive_int,
)
from odradek.cli.errors import CliError

DEFAULT_MECHANISM = "SCRAM-SHA-512"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "users",
        help="list, add and remove SCRAM users",
        description="Manage SCRAM credentials (users of SASL/SCRAM, and of SASL/PLAIN "
        "on Odradek). The broker stores salted keys, never passwords.",
    )
    sub = parser.add_subparsers(dest="users_command", metavar="ACTION")
    sub.required = True

    listing = sub.add_parser("list", help="users and their mechanisms")
    listing.add_argument("users", nargs="*", metavar="USER", help="only these users")
    add_format_option(listing)
    add_connection_options(listing)
    listing.set_defaults(run=run_list)

    add = sub.add_parser(
        "add",
        help="create a user or change its password",
        description="Create a SCRAM user, or set a new password for one.",
    )
    add.add_argument("user", metavar="USER")
    add.add_argument(
        "--mechanism",
        action="append",
        choices=("SCRAM-SHA-256", "SCRAM-SHA-512"),
        help=f"default {DEFAULT_MECHANISM} (repeatable)",
    )
    add.add_argument(
        "--iterations", type=positive_int, default=4096, help="4096..16384 (default 4096)"
    )
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password-file", metavar="FILE", help="first line is the password")
    source.add_argument("--password", help="the password (visible to other local users)")
    add_connection_options(add)
    add.set_defaults(run=run_add)

    remove = sub.add_parser("remove", help="delete a user's credentials")
    remove.add_argument("user", metavar="USER")
    remove.add_argument(
        "--mechanism",
        action="append",
        choices=("SCRAM-SHA-256", "SCRAM-SHA-512"),
        help="only this mechanism (default: every one the user has)",
    )
    add_connection_options(remove)
    remove.set_defaults(run=run_remove)


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        text = args.password
    elif args.password_file:
        try:
            text = Path(args.password_file).read_text().splitlines()[0]
        except (OSError, IndexError) as exc:
            raise CliError(f"--password-file: cannot read a password ({exc})") from None
    elif sys.stdin.isatty():
        text = getpass.getpass(f"password for {args.user}: ")
    else:
        text = sys.stdin.readline().rstrip("\n")
    if not text:
        raise CliError("the password is empty")
    return text


def run_add(args: argparse.Namespace) -> int:
    from odradek.client import UserScramCredentialUpsertion

    password = _password(args)
    changes = [
        UserScramCredentialUpsertion(args.user, mech, password, args.iterations)
        for mech in args.mechanism or [DEFAULT_MECHANISM]
    ]
    with admin_client(args) as admin, failures_as_messages(f"cannot add user {args.user}"):
        result = admin.alter_user_scram_credentials(changes)[args.user]
        try:
            result.result()
        except Exception as exc:
            raise Failed(f"cannot add user {args.user}: {describe_error(exc)}") from None
    print(f"user {args.user}: {', '.join(c.mechanism for c in changes)} set")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    from odradek.client import UserScramCredentialDeletion

    with admin_client(args) as admin, failures_as_messages(f"cannot remove user {args.user}"):
        mechanisms = args.mechanism
        if not mechanisms:
            known = admin.describe_user_scram_credentials([args.user])
            mechanisms = [info.mechanism for info in known.get(args.user, [])]
        changes = [UserScramCredentialDeletion(args.user, m) for m in mechanisms]
        result = admin.alter_user_scram_credentials(changes)[args.user]
        try:
            result.result()
        except Exception as exc:
            raise Failed(f"cannot remove user {args.user}: {describe_error(exc)}") from None
    print(f"user {args.user}: {', '.join(mechanisms)} removed")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from odradek.cli import render

    with admin_client(args) as admin, failures_as_messages("cannot list users"):
        users = admin.describe_user_scram_credentials(args.users or None)
    if args.format == "json":
        render.print_json(
            {
                user: [{"mechanism": i.mechanism, "iterations": i.iterations} for i in infos]
                for user, infos in sorted(users.items())
            }
        )
        return 0
    out = render.output()
    if not users:
        out.print("No SCRAM users.")
        return 0
    table = render.table("USER", "MECHANISM", "ITERATIONS", numeric=("ITERATIONS",))
    for user, infos in sorted(users.items()):
        for info in infos:
            table.add_row(render.text(user), info.mechanism, str(info.iterations))
    out.print(table)
    return 0
