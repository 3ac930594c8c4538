"""What every client command shares: the connection options, opening clients with a short
connect timeout, bounding the whole command by its --timeout, and turning client errors
into one-line messages.

Exit codes: 2 for bad arguments (as argparse), 1 when the broker cannot be reached,
refuses the operation or does not answer within --timeout, 0 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from odradek.cli.errors import CliError

if TYPE_CHECKING:
    from odradek.client import AdminClient

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "ODRADEK_BOOTSTRAP"
DEFAULT_CONNECT_TIMEOUT_S = 5.0
# --timeout: the longest a command waits for brokers, in all (and for one answer, in the
# commands that stream: produce; consume has its own --timeout, the idle time).
DEFAULT_TIMEOUT_S = 30.0
EXIT_FAILED = 1

_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[^\s:,\[\]]+):(\d{1,5})$")


class Failed(CliError):
    """The broker could not be reached or refused the operation (exit code 1)."""

    exit_code = EXIT_FAILED


class Deadline:
    """When the command must be done by: --timeout seconds after its first broker call."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def remaining_s(self, what: str) -> float:
        """Seconds left; Failed naming ``what`` (what the command waited for) if none."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise self.timed_out(what)
        return left

    def timed_out(self, what: str) -> Failed:
        return Failed(f"{what}: no answer within --timeout {self.seconds:g}s")


def timeout_s(args: argparse.Namespace) -> float:
    """The command's --timeout (consume's --timeout is something else: its idle time)."""
    value = getattr(args, "command_timeout", None)
    return float(value) if value else DEFAULT_TIMEOUT_S


def api_timeout_ms(args: argparse.Namespace) -> int:
    """How long one consumer or admin call may take: the command's --timeout."""
    return int(timeout_s(args) * 1000)


def deadline_of(args: argparse.Namespace) -> Deadline:
    """The command's deadline, started by its first use."""
    deadline = getattr(args, "_deadline", None)
    if deadline is None:
        deadline = Deadline(timeout_s(args))
        args._deadline = deadline
    return deadline


TIMEOUT_HELP = (
    "give up when the brokers have not done what the command asks within this long in "
    "all, saying what did not answer (default {default:g})"
)


def add_connection_options(
    parser: argparse.ArgumentParser, *, timeout: bool = True, timeout_help: str = TIMEOUT_HELP
) -> None:
    """--bootstrap, --command-config, --connect-timeout and (unless the command has a
    --timeout of its own) --timeout."""
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--bootstrap",
        "-b",
        default=os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP,
        metavar="HOST:PORT",
        help=f"broker(s) to talk to, comma-separated (default ${BOOTSTRAP_ENV}, "
        f"else {DEFAULT_BOOTSTRAP}); any Kafka-compatible broker works",
    )
    group.add_argument(
        "--command-config",
        metavar="FILE",
        help="client settings in Kafka's properties format, e.g. security.protocol, "
        "sasl.mechanism, sasl.jaas.config, ssl.truststore.location (as Kafka's tools)",
    )
    group.add_argument(
        "--connect-timeout",
        type=positive_float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up on an unreachable broker after this long (default "
        f"{DEFAULT_CONNECT_TIMEOUT_S:g})",
    )
    if timeout:
        group.add_argument(
            "--timeout",
            dest="command_timeout",
            type=positive_float,
            default=DEFAULT_TIMEOUT_S,
            metavar="SECONDS",
            help=timeout_help.format(default=DEFAULT_TIMEOUT_S),
        )


def add_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        "-o",
        choices=("table", "json"),
        default="table",
        help="table for people (default), json for scripts",
    )


PARTITION_SHORT_FLAG_MOVED = (
    "-p is the partition count ('topics create -p 6'); to pick one partition give --partition N"
)


def reject_short_flag(parser: argparse.ArgumentParser, flag: str, message: str) -> None:
    """Make `flag`, which this command no longer has, a one-line usage error saying what
    to write instead, so old usage fails instead of meaning something else."""

    class Rejected(argparse.Action):
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            parser.error(message)

    parser.add_argument(
        flag,
        action=Rejected,
        nargs="?",
        dest=argparse.SUPPRESS,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = int_arg(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    value = int_arg(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {text!r}")
    return value


def int_arg(text: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def bootstrap_of(args: argparse.Namespace) -> str:
    """The --bootstrap list, checked: HOST:PORT[,HOST:PORT...]."""
    items = [item.strip() for item in str(args.bootstrap).split(",") if item.strip()]
    if not items:
        raise CliError("--bootstrap expects HOST:PORT")
    for item in items:
        match = _ADDRESS.match(item)
        if match is None or not 0 < int(match.group(2)) <= 65535:
            raise CliError(f"--bootstrap expects HOST:PORT[,HOST:PORT...], got {item!r}")
    return ",".join(items)


def client_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Settings every client of a command gets: short connects, requests bounded by the
    command's --timeout, and the --command-config file's settings (which win over these
    defaults). Consumers and admin clients add ``default_api_timeout_ms=api_timeout_ms(args)``."""
    connect_ms = int(args.connect_timeout * 1000)
    timeout_ms = int(timeout_s(args) * 1000)
    settings: dict[str, Any] = {
        "client_id": "odradek-cli",
        "socket_connection_setup_timeout_ms": connect_ms,
        "request_timeout_ms": timeout_ms,
        "reconnect_backoff_max_ms": 1_000,
    }
    settings.update(command_config(args))
    settings["bootstrap_servers"] = bootstrap_of(args)
    return settings


def command_config(args: argparse.Namespace) -> dict[str, Any]:
    """--command-config as typed client settings (keyword names), or {}. Only settings
    every client has are accepted (security, timeouts, client.id)."""
    from odradek.cli.properties import read_properties
    from odradek.client.config import CommonConfig, setting_name, typed_setting
    from odradek.client.errors import ConfigError

    path = getattr(args, "command_config", None)
    if not path:
        return {}
    out: dict[str, Any] = {}
    for name, value in read_properties(path, "--command-config").items():
        if name == "bootstrap.servers":
            continue  # --bootstrap says where
        # Settings every client has (security, timeouts); the commands' own options
        # cover the producer's and consumer's.
        try:
            out[setting_name(name)] = typed_setting(CommonConfig, name, value)
        except ConfigError as exc:
            raise CliError(f"--command-config {path}: {exc}") from None
    return out


def _reason(exc: BaseException) -> str:
    """A short cause for a connection failure."""
    text = str(exc)
    for marker, reason in (
        ("Connection refused", "connection refused"),
        ("Name or service not known", "unknown host"),
        ("nodename nor servname", "unknown host"),
        ("No route to host", "no route to host"),
        ("Network is unreachable", "network unreachable"),
        ("timed out", "no answer"),
    ):
        if marker in text:
            return reason
    return re.sub(r"^\[Error -?\d+\] \w+: ", "", text)


def unreachable(args: argparse.Namespace, exc: BaseException, within: str) -> Failed:
    return Failed(f"cannot reach a broker at {args.bootstrap} within {within}: {_reason(exc)}")


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted."""

    odradek_cli = True

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def client_logs_to_stderr() -> None:
    """The client library's warnings (a failed commit, a lost connection) as one
    ``odradek: ...`` line each on stderr; its debug chatter stays quiet."""
    logger = logging.getLogger("odradek.client")
    if any(getattr(h, "odradek_cli", False) for h in logger.handlers):
        return
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("odradek: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False


@contextmanager
def admin_client(args: argparse.Namespace) -> Iterator[AdminClient]:
    """An AdminClient whose broker answered within --connect-timeout (else exit 1), and
    whose every call ends by the command's deadline (--timeout)."""
    from odradek.client import AdminClient
    from odradek.client.errors import KafkaError
    from odradek.client.security import is_authentication_error

    client_logs_to_stderr()
    settings = client_settings(args)
    admin = AdminClient(default_api_timeout_ms=api_timeout_ms(args), **settings)
    deadline = deadline_of(args)
    admin.set_deadline(deadline.at)
    try:
        remaining = deadline.remaining_s(f"reaching {args.bootstrap}")
        connect_s, within = args.connect_timeout, f"{args.connect_timeout:g}s"
        if remaining < connect_s:
            connect_s, within = remaining, f"{deadline.seconds:g}s (--timeout)"
        try:
            admin.describe_cluster(timeout_ms=max(1, int(connect_s * 1000)))
        except KafkaError as exc:
            if is_authentication_error(exc):
                raise Failed(f"{args.bootstrap}: {describe_error(exc)}") from None
            raise unreachable(args, exc, within) from None
        yield admin
    finally:
        admin.close()


def describe_error(exc: BaseException) -> str:
    """A client error as words: the Kafka name stays, the bracketed code goes."""
    text = str(exc)
    match = re.match(r"^\[Error (-?\d+)\] (\w+)(?:: (.*))?$", text, re.S)
    if match is None:
        return text
    name = re.sub(r"(?<!^)(?=[A-Z])", " ", match.group(2).removesuffix("Error")).lower()
    return f"{match.group(3)}: {name}" if match.group(3) else name


@contextmanager
def failures_as_messages(action: str) -> Iterator[None]:
    """Client errors raised inside become ``Failed("<action>: <reason>")``."""
    from odradek.client.errors import KafkaError, KafkaTimeoutError

    try:
        yield
    except KafkaTimeoutError as exc:
        raise Failed(f"{action}: {describe_error(exc)} (see --timeout)") from None
    except KafkaError as exc:
        raise Failed(f"{action}: {describe_error(exc)}") from None
