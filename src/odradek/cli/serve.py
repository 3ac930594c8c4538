"""`odradek serve`: run a broker in the foreground until SIGTERM or Ctrl-C.

Settings come, in increasing precedence, from Kafka's defaults, a Kafka
``server.properties`` (``--config``) and ``--set``. Settings of a Kafka
cluster that mean nothing to a single Odradek node (``process.roles``,
replication factors, thread counts, ...) are accepted from a file and logged
as ignored, so a Kafka configuration ports over; an unknown name is an error.

The log directories are ``--data-dir`` (repeatable, each may be a comma list),
else ``log.dirs`` (``--set``, then the file; ``log.dir`` if there is no
``log.dirs``), else ``./odradek-data``. Partitions are spread over them; the
broker's metadata lives in the first (docs/operations.md, "Several log
directories").
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.cli.errors import CliError

if TYPE_CHECKING:
    from odradek.broker.config import BrokerConfig

DEFAULT_LISTEN = "127.0.0.1:9092"
DEFAULT_DATA_DIR = "odradek-data"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

# Kafka settings with no meaning for one Odradek node: read from a file, then ignored.
KAFKA_SETTINGS_IGNORED = frozenset(
    {
        "process.roles",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "sasl.mechanism.controller.protocol",
        "num.network.threads",
        "num.io.threads",
        "num.replica.fetchers",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "num.recovery.threads.per.data.dir",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "delete.topic.enable",
        "metadata.log.dir",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "broker.id",
        "group.coordinator.rebalance.protocols",
    }
)
# Where partition logs live (the first also holds the metadata), as Kafka names them:
# log.dirs wins over log.dir. Taken by `odradek serve` itself, not a broker setting.
LOG_DIR_SETTINGS = ("log.dirs", "log.dir")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "serve",
        help="run a broker",
        description="Run an Odradek broker in the foreground. Stops cleanly on SIGTERM or Ctrl-C.",
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"one PLAINTEXT listener (default {DEFAULT_LISTEN}); a wildcard host (0.0.0.0, ::)"
        " advertises this machine's name; for several listeners or TLS/SASL use the"
        " `listeners` setting",
    )
    parser.add_argument(
        "--advertise",
        metavar="HOST:PORT",
        help="address clients should use, when it differs from --listen",
    )
    parser.add_argument(
        "--data-dir",
        action="append",
        metavar="DIR[,DIR...]",
        help="a log directory for partition logs; repeat it (or give a comma list) for "
        "several, the first also holds the broker's metadata (default: log.dirs of --set or "
        f"--config, else ./{DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a Kafka server.properties to read settings from (--set wins)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a broker setting by its Kafka name, e.g. num.partitions=6 (repeatable)",
    )
    parser.add_argument(
        "--add-scram",
        action="append",
        default=[],
        metavar="SPEC",
        help="create a SCRAM user unless it exists, as kafka-storage does: "
        "'SCRAM-SHA-512=[name=admin,password=admin-secret]' (repeatable)",
    )
    parser.add_argument(
        "--metrics",
        metavar="[HOST:]PORT",
        help="serve Prometheus metrics over HTTP at this address (off by default; "
        "HOST defaults to 127.0.0.1)",
    )
    parser.add_argument(
        "--metrics-token-file",
        metavar="FILE",
        help="require this bearer token for /metrics (needed to bind a non-loopback address)",
    )
    parser.add_argument(
        "--console",
        metavar="[HOST:]PORT",
        help="also serve the web console here, in this process (HOST defaults to "
        "127.0.0.1; needs the console extra: pip install 'odradek[console]'); see "
        "'odradek console --help'",
    )
    parser.add_argument(
        "--console-users",
        metavar="FILE",
        help="require a login to the console, with the users of this file (needed for a "
        "non-loopback --console; written by 'odradek console --users FILE --set-password')",
    )
    parser.add_argument(
        "--etcd",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="join a cluster whose metadata lives in etcd (the etcd.endpoints setting; give "
        "every member): the first that accepts a connection is used, the next whenever it goes "
        "away; https://HOST:PORT for TLS (the etcd.ssl.* settings); without it the broker is a "
        "single node and needs no etcd",
    )
    parser.add_argument(
        "--node-id", type=int, metavar="ID", help="this broker's id (the node.id setting)"
    )
    parser.add_argument("--rack", metavar="RACK", help="this broker's rack (broker.rack)")
    parser.add_argument(
        "--log-level",
        type=str.upper,  # any case, as Python's logging level names
        choices=LOG_LEVELS,
        default="INFO",
        help="what the broker logs, in any case (default INFO)",
    )
    parser.set_defaults(run=run)


def parse_address(text: str, option: str) -> tuple[str, int]:

    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"{option} expects HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def _settings(args: argparse.Namespace) -> tuple[BrokerConfig, str | None]:
    """The broker config (file, then --set) and the log.dirs it names, if any."""
    from odradek.broker.config import BrokerConfig, ConfigError
    from odradek.cli.properties import read_properties

    found: dict[tuple[str, str], str] = {}  # (source, setting) -> value
    config = BrokerConfig()
    try:
        if args.config:
            for name, value in read_properties(args.config, "--config").items():
                if name in LOG_DIR_SETTINGS:
                    found["file", name] = value
                    continue
                if name in KAFKA_SETTINGS_IGNORED:
                    logging.getLogger("odradek.serve").info(
                        "%s from %s: not used by a single Odradek node", name, args.config
                    )
                    continue
                try:
                    config.set(name, value)
                except ConfigError as exc:
                    raise ConfigError(f"{args.config}: {exc}") from None
        for item in args.set:  # after the file: --set wins
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"--set expects key=value, got {item!r}")
            if name.strip() in LOG_DIR_SETTINGS:
                found["set", name.strip()] = value
                continue
            config.set(name.strip(), value)
        shortcuts = (
            ("etcd.endpoints", getattr(args, "etcd", None)),
            ("node.id", getattr(args, "node_id", None)),
            ("broker.rack", getattr(args, "rack", None)),
        )
        for name, value in shortcuts:
            if value is not None:  # the dedicated flags win over --set and the file
                config.set(name, str(value))
        config.check()
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    for key in (("set", "log.dirs"), ("set", "log.dir"), ("file", "log.dirs"), ("file", "log.dir")):
        if found.get(key, "").strip():
            return config, found[key]
    return config, None


def log_directories(args: argparse.Namespace, log_dirs: str | None) -> list[Path]:
    """The log directories: --data-dir, else log.dirs, else the default (one-line errors)."""
    from odradek.broker.log_dirs import LogDirError, parse_log_dir_list

    given = args.data_dir or ([log_dirs] if log_dirs else [DEFAULT_DATA_DIR])
    try:
        return parse_log_dir_list(given)
    except LogDirError as exc:
        option = "--data-dir" if args.data_dir else "log.dirs"
        raise CliError(f"{option}: {exc}") from None


def _metrics(args: argparse.Namespace) -> tuple[tuple[str, int] | None, str | None]:
    from odradek.broker.security.metrics_http import is_loopback

    token = None
    if args.metrics_token_file:
        try:
            token = Path(args.metrics_token_file).read_text().strip()
        except OSError as exc:
            raise CliError(f"--metrics-token-file: {exc.strerror or exc}") from None
        if not token:
            raise CliError("--metrics-token-file is empty")
    if not args.metrics:
        return None, token
    text = args.metrics if ":" in args.metrics else f"127.0.0.1:{args.metrics}"
    address = parse_address(text, "--metrics")
    if token is None and not is_loopback(address[0]):
        raise CliError(
            f"--metrics {args.metrics}: a non-loopback address needs --metrics-token-file "
            "(metrics name topics, groups and clients)"
        )
    return address, token


def _console(
    args: argparse.Namespace,
) -> tuple[tuple[str, int] | None, dict[str, str] | None]:
    """--console's address and --console-users' users, checked before the broker starts."""
    if not args.console:
        if args.console_users:
            raise CliError("--console-users goes with --console")
        return None, None
    from odradek.console.command import check_embedded, embedded_address, load_users

    address = embedded_address(args.console)
    users = load_users(args.console_users, "--console-users")
    check_embedded(address[0], users)
    return address, users


def run(args: argparse.Namespace) -> int:
    from odradek.broker.allocator import tune_allocator
    from odradek.broker.collector import freeze_imported_objects
    from odradek.broker.config import ConfigError
    from odradek.broker.event_loop import (
        EventLoopUnavailable,
        chosen_event_loop,
        event_loop_factory,
    )
    from odradek.broker.log_dirs import LogDirError
    from odradek.broker.security.credentials import parse_add_scram
    from odradek.broker.server import WILDCARD_HOSTS, run_broker
    from odradek.cli.common import Failed
    from odradek.extras import MissingExtra
    from odradek.log.dir_lock import DirectoryInUseError
    from odradek.protocol.scram import ScramError
    from odradek.wiring import new_broker

    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config, log_dirs = _settings(args)
    try:
        event_loop = chosen_event_loop(
            str(config["event.loop"]), explicit=not config.is_default("event.loop")
        )
    except (EventLoopUnavailable, MissingExtra) as exc:
        raise CliError(str(exc)) from None
    if args.listen and not config.is_default("listeners"):
        raise CliError("give --listen or the listeners setting, not both")
    host, port = parse_address(args.listen or DEFAULT_LISTEN, "--listen")
    # Without --advertise the broker advertises the listen host, or its own name
    # when that is a wildcard (0.0.0.0 / ::), which no client can connect to.
    advertised: tuple[str | None, int] = (None, port)
    if args.advertise:
        if not config.is_default("listeners"):
            raise CliError(
                "--advertise goes with --listen; with listeners use advertised.listeners"
            )
        advertised = parse_address(args.advertise, "--advertise")
        if advertised[0] in WILDCARD_HOSTS:
            raise CliError(f"--advertise needs an address clients can reach, not {advertised[0]}")
    metrics, token = _metrics(args)
    try:
        initial_users = [parse_add_scram(spec) for spec in args.add_scram]
    except ScramError as exc:
        raise CliError(str(exc)) from None
    data_dirs = log_directories(args, log_dirs)
    console_at, console_users = _console(args)
    tune_allocator()
    freeze_imported_objects()  # before the broker opens its logs
    try:
        broker = new_broker(
            data_dirs,
            config,
            host=host,
            port=port,
            advertised_host=advertised[0],
            advertised_port=advertised[1],
            metrics_address=metrics,
            metrics_token=token,
        )
        broker.security.add_initial_users(initial_users)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    except DirectoryInUseError as exc:
        raise Failed(str(exc)) from None
    except LogDirError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        where = exc.filename or ",".join(str(d) for d in data_dirs)
        raise CliError(f"cannot use data dir {where}: {exc.strerror or exc}") from None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        console = None
        broker_stop = stop
        try:
            if console_at is not None:
                # In this loop, beside the broker; its clients reach the broker once it listens.
                from odradek.console.command import embedded_server

                console = embedded_server(broker, console_users, data_dirs[0])
                await console.start(*console_at)
                broker_stop = console.stopped_first(stop)  # while the broker still answers it
            await run_broker(broker, broker_stop)
        except OSError as exc:
            raise CliError(f"cannot listen: {exc.strerror or exc}") from None
        except Exception as exc:
            if type(exc).__name__ == "ClusterJoinError":  # no import: aetcd is optional
                raise CliError(str(exc)) from None
            raise
        finally:
            if console is not None:
                await console.stop()

    logging.getLogger("odradek.broker").info("event loop: %s", event_loop)
    with asyncio.Runner(loop_factory=event_loop_factory(event_loop)) as runner:
        runner.run(main())
    return 0
