"""`odradek serve`: run a broker in the foreground until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

DEFAULT_LISTEN = "127.0.0.1:9092"
DEFAULT_DATA_DIR = "odradek-data"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "serve",
        help="run a broker",
        description="Run an Odradek broker in the foreground. Stops cleanly on SIGTERM or Ctrl-C.",
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to listen on and advertise (default {DEFAULT_LISTEN}); a wildcard"
        " host (0.0.0.0, ::) advertises this machine's name",
    )
    parser.add_argument(
        "--advertise",
        metavar="HOST:PORT",
        help="address clients should use, when it differs from --listen",
    )
    parser.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help=f"where partition logs and metadata live (default ./{DEFAULT_DATA_DIR})",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a broker setting by its Kafka name, e.g. num.partitions=6 (repeatable)",
    )
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics over HTTP at this address (off by default)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    parser.set_defaults(run=run)


def parse_address(text: str, option: str) -> tuple[str, int]:
    from odradek.cli.main import CliError

    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"{option} expects HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    from odradek.broker.allocator import tune_allocator
    from odradek.broker.config import BrokerConfig, ConfigError
    from odradek.broker.server import WILDCARD_HOSTS, Broker, run_broker
    from odradek.cli.main import CliError

    host, port = parse_address(args.listen, "--listen")
    # Without --advertise the broker advertises the listen host, or its own name
    # when that is a wildcard (0.0.0.0 / ::), which no client can connect to.
    advertised: tuple[str | None, int] = (None, port)
    if args.advertise:
        advertised = parse_address(args.advertise, "--advertise")
        if advertised[0] in WILDCARD_HOSTS:
            raise CliError(f"--advertise needs an address clients can reach, not {advertised[0]}")
    metrics = parse_address(args.metrics, "--metrics") if args.metrics else None
    try:
        config = BrokerConfig.from_assignments(args.set)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    level = getattr(logging, str(args.log_level).upper(), None)
    if not isinstance(level, int):
        raise CliError(f"--log-level expects DEBUG, INFO, WARNING or ERROR, got {args.log_level!r}")
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    tune_allocator()
    try:
        broker = Broker(
            Path(args.data_dir),
            config,
            host=host,
            port=port,
            advertised_host=advertised[0],
            advertised_port=advertised[1],
            metrics_address=metrics,
        )
    except OSError as exc:
        raise CliError(f"cannot use data dir {args.data_dir}: {exc}") from None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await run_broker(broker, stop)
        except OSError as exc:
            raise CliError(f"cannot listen: {exc.strerror or exc}") from None

    asyncio.run(main())
    return 0
