"""`odradek console`: the web console as a process of its own, for any Kafka-compatible
cluster; and what `odradek serve --console` adds to a broker.

The console talks the Kafka protocol like any client (``--bootstrap``, and
``--command-config`` for TLS and SASL: it connects with its own principal). It binds
127.0.0.1 by default; another address needs ``--users FILE`` (a login). The users file
is written by ``odradek console --users FILE --set-password NAME``.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import signal
import sys
from pathlib import Path
from typing import Any

DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_LAG_FILE = "odradek-console-lag.sqlite3"
EMBEDDED_LAG_FILE = "console-lag.sqlite3"  # in the broker's first log directory


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from odradek.cli.common import add_connection_options, positive_float

    parser = commands.add_parser(
        "console",
        help="a web console: groups, rebalances, lag over time, topics, the cluster",
        description="Serve the web console for a Kafka-compatible cluster: every consumer "
        "group with its state, protocol, members, lag and a lag verdict; a group's "
        "rebalance timeline, partition ownership and lag over time; offset resets (a dry "
        "run first); topics with their messages; the cluster's brokers, partitions and "
        "elections. Pages update live. Needs the console extra: pip install "
        "'odradek[console]'.",
        epilog="Example: odradek console --bootstrap 127.0.0.1:9092, then open "
        "http://127.0.0.1:8080. To listen on another address: odradek console --users "
        "users.txt --set-password alice (prompts), then odradek console --listen "
        "0.0.0.0:8080 --users users.txt.",
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"where to serve the pages (default {DEFAULT_LISTEN}); an address other than "
        "loopback needs --users",
    )
    parser.add_argument(
        "--users",
        metavar="FILE",
        help="require a login, with the users of this file (scrypt-hashed passwords)",
    )
    parser.add_argument(
        "--set-password",
        metavar="NAME",
        help="add NAME to the --users file, or change its password (read from stdin, or "
        "asked twice on a terminal), and exit",
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="show everything, change nothing (no offset resets)",
    )
    parser.add_argument(
        "--lag-file",
        default=DEFAULT_LAG_FILE,
        metavar="FILE",
        help=f"where lag history is kept, 7 days at one sample a minute (default "
        f"./{DEFAULT_LAG_FILE}); it survives restarts and belongs to one cluster",
    )
    parser.add_argument(
        "--poll-interval",
        type=positive_float,
        default=5.0,
        metavar="SECONDS",
        help="how often groups, log ends and metadata are asked for (default 5)",
    )
    parser.add_argument(
        "--sample-interval",
        type=positive_float,
        default=60.0,
        metavar="SECONDS",
        help="how often lag is sampled into the history (default 60)",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default="INFO",
        help="what the console logs (default INFO)",
    )
    add_connection_options(parser, timeout=False)
    parser.set_defaults(run=run)


def parse_listen(text: str, option: str = "--listen") -> tuple[str, int]:
    from odradek.cli.errors import CliError

    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"{option} expects [HOST:]PORT, got {text!r}")
    return host, int(port)


def require_console(feature: str) -> None:
    """A one-line usage error naming the install when aiohttp is missing."""
    from odradek import extras
    from odradek.cli.errors import CliError

    try:
        extras.require("console", feature)
    except extras.MissingExtra as exc:
        raise CliError(str(exc)) from None


def is_loopback(host: str) -> bool:
    from odradek.broker.security.metrics_http import is_loopback as loopback

    return loopback(host)


def _set_password(args: argparse.Namespace) -> int:
    from odradek.cli.errors import CliError
    from odradek.console.auth import UsersFileError, write_user

    if not args.users:
        raise CliError("--set-password needs --users FILE (where the user is written)")
    if sys.stdin.isatty():
        password = getpass.getpass(f"Password for {args.set_password}: ")
        if getpass.getpass("Again: ") != password:
            raise CliError("the passwords differ")
    else:
        password = sys.stdin.readline().rstrip("\n")
    if len(password) < 8:
        raise CliError("a password has at least 8 characters")
    try:
        new = write_user(Path(args.users), args.set_password, password)
    except (UsersFileError, OSError) as exc:
        raise CliError(f"--users {args.users}: {exc}") from None
    print(f"{'Added' if new else 'Changed the password of'} {args.set_password} in {args.users}.")
    return 0


def load_users(path: str | None, option: str = "--users") -> dict[str, str] | None:
    from odradek.cli.errors import CliError
    from odradek.console.auth import UsersFileError, read_users

    if not path:
        return None
    try:
        users = read_users(Path(path))
    except UsersFileError as exc:
        raise CliError(f"{option}: {exc}") from None
    if not users:
        raise CliError(
            f"{option} {path} has no users: add one with "
            "'odradek console --users FILE --set-password NAME'"
        )
    return users


def run(args: argparse.Namespace) -> int:
    from odradek.cli.common import client_settings
    from odradek.cli.errors import CliError

    if args.set_password:
        return _set_password(args)
    require_console("console")
    host, port = parse_listen(args.listen)
    users = load_users(args.users)
    if users is None and not is_loopback(host):
        raise CliError(
            f"--listen {args.listen} is not a loopback address: give --users FILE so that "
            "the console asks for a login (odradek console --users FILE --set-password NAME)"
        )
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings = client_settings(args)
    settings["client_id"] = "odradek-console"
    settings.pop("request_timeout_ms", None)
    return serve(
        settings,
        host,
        port,
        users=users,
        read_only=args.read_only,
        lag_file=Path(args.lag_file) if args.lag_file else None,
        poll_interval_s=args.poll_interval,
        sample_interval_s=args.sample_interval,
    )


def build_server(
    client: dict[str, Any],
    *,
    users: dict[str, str] | None,
    require_login: bool,
    read_only: bool,
    lag_file: Path | None,
    poll_interval_s: float = 5.0,
    sample_interval_s: float = 60.0,
) -> Any:
    """A ``ConsoleServer`` (not started) for these client settings."""
    from odradek.console.app import ConsoleServer, create_app
    from odradek.console.service import ConsoleService, ConsoleSettings, principal_of

    service = ConsoleService(
        ConsoleSettings(
            client=client,
            lag_file=lag_file,
            read_only=read_only,
            poll_interval_s=poll_interval_s,
            sample_interval_s=sample_interval_s,
            principal=principal_of(client),
        )
    )
    app = create_app(service, users=users, require_login=require_login, read_only=read_only)
    return ConsoleServer(service, app)


def serve(
    client: dict[str, Any],
    host: str,
    port: int,
    *,
    users: dict[str, str] | None,
    read_only: bool,
    lag_file: Path | None,
    poll_interval_s: float,
    sample_interval_s: float,
) -> int:
    """Serve until SIGTERM or Ctrl-C."""
    from odradek.cli.errors import CliError

    server = build_server(
        client,
        users=users,
        require_login=users is not None,
        read_only=read_only,
        lag_file=lag_file,
        poll_interval_s=poll_interval_s,
        sample_interval_s=sample_interval_s,
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start(host, port)
        except OSError as exc:
            await server.stop()
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        print(f"odradek console: http://{host}:{server.port}/", file=sys.stderr, flush=True)
        try:
            await stop.wait()
        finally:
            await server.stop()

    asyncio.run(main())
    return 0


# --- odradek serve --console --------------------------------------------------------------------


def embedded_address(text: str) -> tuple[str, int]:
    return parse_listen(text, "--console")


def check_embedded(host: str, users: dict[str, str] | None) -> None:
    from odradek.cli.errors import CliError

    require_console("serve --console")
    if users is None and not is_loopback(host):
        raise CliError(
            f"--console {host}: not a loopback address; give --console-users FILE for a login"
        )


def embedded_server(broker: Any, users: dict[str, str] | None, lag_dir: Path) -> Any:
    """The console for ``broker``, connected to its first PLAINTEXT listener."""
    from odradek.cli.errors import CliError

    plain = [lst for lst in broker.listeners if lst.protocol == "PLAINTEXT"]
    if not plain:
        raise CliError(
            "--console connects to the broker over a PLAINTEXT listener and this broker has "
            "none: run 'odradek console --command-config FILE' with the console's credentials"
        )
    listener = plain[0]
    host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    return build_server(
        {"bootstrap_servers": f"{host}:{listener.port}", "client_id": "odradek-console"},
        users=users,
        require_login=users is not None,
        read_only=False,
        lag_file=lag_dir / EMBEDDED_LAG_FILE,
    )
