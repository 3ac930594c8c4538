"""`odradek produce TOPIC`: one record per line of standard input."""

from __future__ import annotations

import argparse
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

from odradek.cli.common import (
    PARTITION_SHORT_FLAG_MOVED,
    Failed,
    add_connection_options,
    admin_client,
    client_settings,
    describe_error,
    key_value,
    non_negative_int,
    reject_short_flag,
    timeout_s,
)
from odradek.cli.errors import CliError

ACKS = ("all", "1", "0")
COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "produce",
        help="send lines of standard input as records",
        description="Send each line of standard input to TOPIC as one record (the line "
        "without its newline). Type lines and end with Ctrl-D, or pipe a file in; a "
        "progress bar shows on a terminal while a large input is sent.",
        epilog="Examples: echo 'hello' | odradek produce orders;  "
        "odradek produce orders --key-separator : < orders.txt  (lines like alice:42)",
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument(
        "--key-separator",
        "-K",
        metavar="SEP",
        help="split each line at the first SEP into key and value (a line without SEP "
        "is an error); without it, lines are values with no key",
    )
    parser.add_argument(
        "--header",
        "-H",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="add this header to every record (repeatable)",
    )
    parser.add_argument(
        "--acks",
        choices=ACKS,
        default="all",
        help="all: every in-sync replica has it (default, idempotent); 1: the leader "
        "has it; 0: do not wait",
    )
    parser.add_argument(
        "--partition",
        type=non_negative_int,
        metavar="N",
        help="send every record to partition N (default: by key hash, or spread when no key)",
    )
    parser.add_argument(
        "--compression", choices=COMPRESSION, default="none", help="batch compression"
    )
    parser.add_argument(
        "--linger-ms",
        type=non_negative_int,
        default=5,
        metavar="MS",
        help="wait up to MS to fill batches (default 5)",
    )
    reject_short_flag(parser, "-p", PARTITION_SHORT_FLAG_MOVED)
    add_connection_options(
        parser,
        timeout_help="give up on brokers that have not answered within this long: the "
        "topic's metadata, room to send a record, the last acknowledgements (default "
        "{default:g})",
    )
    parser.set_defaults(run=run)


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


def _input_size(stream: BinaryIO) -> int | None:
    """Bytes left to read when stdin is a regular file (``< file``), else None."""
    try:
        fd = stream.fileno()
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            return max(0, info.st_size - os.lseek(fd, 0, os.SEEK_CUR))
    except (OSError, ValueError, AttributeError):
        pass
    return None


class _Deliveries:
    """Counts acknowledgements from the producer's sender thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.delivered = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.partitions: set[int] = set()

    def __call__(self, error: BaseException | None, metadata: Any) -> None:
        with self.lock:
            if error is None:
                self.delivered += 1
                self.partitions.add(metadata.partition)
            else:
                self.failed += 1
                if self.first_error is None:
                    self.first_error = error


def run(args: argparse.Namespace) -> int:
    from odradek.cli import render
    from odradek.client import Producer

    if args.key_separator == "":
        raise CliError("--key-separator must not be empty")
    separator = args.key_separator.encode() if args.key_separator is not None else None
    headers = [(k, v.encode()) for k, v in args.header]
    with admin_client(args) as admin:
        try:
            partitions = len(
                admin.describe_topics([args.topic], include_offsets=False)[args.topic].partitions
            )
        except Exception as exc:
            from odradek.client.errors import UnknownTopicOrPartitionError

            if isinstance(exc, UnknownTopicOrPartitionError):
                raise Failed(
                    f"topic '{args.topic}' does not exist "
                    f"(create it with: odradek topics create {args.topic})"
                ) from None
            raise Failed(f"cannot look up topic '{args.topic}': {describe_error(exc)}") from None
    if args.partition is not None and args.partition >= partitions:
        raise CliError(
            f"--partition {args.partition}: topic '{args.topic}' has partitions 0-{partitions - 1}"
        )
    stdin = sys.stdin.buffer
    interactive = stdin.isatty()
    if interactive and sys.stderr.isatty():
        print("Type one record per line; Ctrl-D sends and quits.", file=sys.stderr)
    size = _input_size(stdin)
    show = render.progress_wanted() and not interactive
    settings = client_settings(args)
    settings["client_id"] = "odradek-produce"
    producer = Producer(
        acks=args.acks,
        compression_type=args.compression,
        linger_ms=args.linger_ms,
        max_block_ms=settings["request_timeout_ms"],
        delivery_timeout_ms=settings["request_timeout_ms"] + args.linger_ms,
        **settings,
    )
    deliveries = _Deliveries()
    sent = 0
    started = time.monotonic()
    interrupted = False
    try:
        with render.progress(
            f"Producing to {args.topic}",
            total=size,
            enabled=show,
            unit="" if size else "records",
            bytes_total=size is not None,
        ) as bar:
            try:
                for number, line in enumerate(_lines(stdin), start=1):
                    key: bytes | None = None
                    value = line
                    if separator is not None:
                        key, sep, value = line.partition(separator)
                        if not sep:
                            raise CliError(
                                f"line {number} has no key separator {args.key_separator!r}"
                                + (f" ({sent:,} records before it were sent)" if sent else "")
                            )
                    try:
                        producer.send(
                            args.topic,
                            value,
                            key=key,
                            headers=headers,
                            partition=args.partition,
                            on_delivery=deliveries,
                        )
                    except Exception as exc:
                        raise Failed(f"line {number}: {describe_error(exc)}") from None
                    sent += 1
                    bar.advance(len(line) + 1 if size is not None else 1)
            except KeyboardInterrupt:
                interrupted = True
            bar.update(description=f"Waiting for {args.topic} to acknowledge")
            producer.flush(timeout_s(args))
    except Exception as exc:
        from odradek.client.errors import KafkaError

        if not isinstance(exc, KafkaError):
            raise
        raise Failed(f"producing to '{args.topic}': {describe_error(exc)}") from None
    finally:
        producer.close(timeout=5)
    elapsed = time.monotonic() - started
    with deliveries.lock:
        delivered, failed, error = deliveries.delivered, deliveries.failed, deliveries.first_error
    if failed or (delivered < sent and args.acks != "0"):
        lost = sent - delivered
        reason = describe_error(error) if error is not None else "not acknowledged in time"
        raise Failed(f"{lost:,} of {sent:,} records were not delivered: {reason}")
    noun = "record" if sent == 1 else "records"
    where = f"'{args.topic}'"
    if args.partition is not None:
        where += f" partition {args.partition}"
    print(f"Produced {sent:,} {noun} to {where} in {elapsed:.2f} s.", file=sys.stderr)
    return 130 if interrupted else 0
