"""`odradek consume TOPIC`: print records, from chosen partitions or as a group member."""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from odradek.cli.common import (
    PARTITION_SHORT_FLAG_MOVED,
    Failed,
    add_connection_options,
    admin_client,
    api_timeout_ms,
    client_settings,
    describe_error,
    non_negative_int,
    positive_float,
    positive_int,
    reject_short_flag,
)
from odradek.cli.errors import CliError

FORMATS = ("raw", "kv", "json")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
POLL_S = 0.5


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "consume",
        help="print records of a topic",
        description="Print the records of TOPIC as they arrive, one per line, until "
        "Ctrl-C, --max-messages or --timeout. Without --group or --partition every "
        "partition is read and no offsets are committed. With --group the command "
        "joins that consumer group (partitions are shared with the group's other "
        "members and progress is committed), so running it in two terminals splits "
        "the partitions between them.",
        epilog="Examples: odradek consume orders --from-beginning --max-messages 10;  "
        "odradek consume orders --group billing --format json",
    )
    parser.add_argument("topic", metavar="TOPIC")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--group",
        "-g",
        metavar="GROUP",
        help="consume as a member of this consumer group, committing offsets",
    )
    source.add_argument(
        "--partition",
        action="append",
        type=non_negative_int,
        metavar="N",
        help="read only partition N (repeatable; default: every partition)",
    )
    parser.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the oldest record (default: only new records; with --group, "
        "this applies only to partitions the group has no committed offset for)",
    )
    parser.add_argument(
        "--max-messages",
        "-n",
        type=positive_int,
        metavar="N",
        help="stop after N records (a progress bar shows when the output is redirected)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        metavar="SECONDS",
        help="stop when no record has arrived for this long (also the longest wait for "
        "the brokers' other answers; default: follow the topic until Ctrl-C)",
    )
    parser.add_argument(
        "--format",
        "-o",
        choices=FORMATS,
        default="raw",
        help="raw: the value (default); kv: key, separator, value; json: one object per "
        "line with topic, partition, offset, timestamp, key, value and headers",
    )
    parser.add_argument(
        "--isolation",
        choices=ISOLATION_LEVELS,
        default="read_uncommitted",
        help="read_committed: only records of committed transactions, up to the last "
        "stable offset (default read_uncommitted: everything written)",
    )
    parser.add_argument(
        "--key-separator",
        default="\t",
        metavar="SEP",
        help="what --format kv puts between key and value (default: a tab)",
    )
    reject_short_flag(parser, "-p", PARTITION_SHORT_FLAG_MOVED)
    add_connection_options(parser, timeout=False)  # its --timeout is the idle time
    parser.set_defaults(run=run)


# --------------------------------------------------------------------- formatting


def _text(data: bytes | None) -> tuple[str | None, bool]:
    """(text, is_base64): UTF-8 when it decodes, else base64."""
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def as_json(record: Any) -> dict[str, Any]:
    key, key_b64 = _text(record.key)
    value, value_b64 = _text(record.value)
    out: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": "LogAppendTime" if record.timestamp_type == 1 else "CreateTime",
        "key": key,
        "value": value,
        "headers": [[k, _text(v)[0]] for k, v in record.headers],
    }
    if key_b64:
        out["key_encoding"] = "base64"
    if value_b64:
        out["value_encoding"] = "base64"
    return out


def formatter(fmt: str, separator: bytes) -> Any:
    def null(data: bytes | None) -> bytes:
        return b"null" if data is None else data

    if fmt == "raw":
        return lambda r: null(r.value) + b"\n"
    if fmt == "kv":
        return lambda r: null(r.key) + separator + null(r.value) + b"\n"
    return lambda r: json.dumps(as_json(r), ensure_ascii=False).encode() + b"\n"


# --------------------------------------------------------------------- run


def _partitions(tps: Any) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return "; ".join(f"{t} {', '.join(map(str, ps))}" for t, ps in by_topic.items())


def _listener(consumer: Any, group: str) -> Any:
    """Tells the person at the terminal what each rebalance did to this member."""
    from odradek.client import ConsumerRebalanceListener

    class Announce(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            if revoked:
                print(f"odradek: rebalance: giving up {_partitions(revoked)}", file=sys.stderr)

        def on_partitions_assigned(self, assigned: Any) -> None:
            generation = getattr(consumer, "generation_id", -1)
            where = f"group '{group}'" + (f", generation {generation}" if generation >= 0 else "")
            what = (
                _partitions(assigned)
                if assigned
                else "no partitions (more members than partitions)"
            )
            print(f"odradek: {where}: reading {what}", file=sys.stderr)

    return Announce()


def _stop_on_sigterm() -> Any:
    """SIGTERM ends a consume like Ctrl-C: the member leaves its group and commits.
    Returns what undoes it."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _joined(consumer: Any) -> bool:
    """Whether a group member has completed a join (it may have no partitions)."""
    return bool(consumer.assignment()) or getattr(consumer, "generation_id", 0) >= 0


def run(args: argparse.Namespace) -> int:
    from odradek.cli import render
    from odradek.client import Consumer, TopicPartition
    from odradek.client.errors import KafkaError, UnknownTopicOrPartitionError

    with admin_client(args) as admin:
        try:
            described = admin.describe_topics([args.topic], include_offsets=False)
        except UnknownTopicOrPartitionError:
            raise Failed(f"topic '{args.topic}' does not exist") from None
        except KafkaError as exc:
            raise Failed(f"cannot look up topic '{args.topic}': {describe_error(exc)}") from None
    available = [p.partition for p in described[args.topic].partitions]
    wanted = list(dict.fromkeys(args.partition or available))
    bad = [p for p in wanted if p not in available]
    if bad:
        raise CliError(
            f"--partition {bad[0]}: topic '{args.topic}' has partitions 0-{len(available) - 1}"
        )
    if args.group is not None and not hasattr(Consumer, "subscribe"):
        raise CliError(
            "--group needs the group consumer, which this build of the Odradek client "
            "does not have yet; use --partition"
        )
    settings = client_settings(args)
    settings["client_id"] = f"odradek-consume-{os.getpid()}"
    settings["isolation_level"] = args.isolation
    reset = "earliest" if args.from_beginning else "latest"
    if args.group is not None:
        consumer = Consumer(
            group_id=args.group,
            auto_offset_reset=reset,
            enable_auto_commit=True,
            allow_auto_create_topics=False,
            default_api_timeout_ms=api_timeout_ms(args),
            **settings,
        )
    else:
        consumer = Consumer(
            auto_offset_reset=reset,
            allow_auto_create_topics=False,
            default_api_timeout_ms=api_timeout_ms(args),
            **settings,
        )
    restore = _stop_on_sigterm()
    write = formatter(args.format, args.key_separator.encode())
    out = sys.stdout.buffer
    count = 0
    try:
        if args.group is not None:
            consumer.subscribe([args.topic], listener=_listener(consumer, args.group))
        else:
            tps = [TopicPartition(args.topic, p) for p in wanted]
            consumer.assign(tps)
            if args.from_beginning:
                consumer.seek_to_beginning(tps)
            else:
                consumer.seek_to_end(tps)
        with render.progress(
            f"Consuming {args.topic}",
            total=args.max_messages,
            enabled=args.max_messages is not None and render.progress_wanted(data_on_stdout=True),
            unit="records",
        ) as bar:
            last = time.monotonic()
            while args.max_messages is None or count < args.max_messages:
                limit = None if args.max_messages is None else args.max_messages - count
                wait = POLL_S
                if args.timeout is not None:
                    wait = max(0.0, min(POLL_S, last + args.timeout - time.monotonic()))
                records = consumer.poll(wait, max_records=limit)
                if records:
                    out.write(b"".join(write(r) for r in records))
                    out.flush()
                    count += len(records)
                    bar.advance(len(records))
                    last = time.monotonic()
                elif args.group is not None and not _joined(consumer):
                    last = time.monotonic()  # joining the group is not idleness
                elif args.timeout is not None and time.monotonic() - last >= args.timeout:
                    break
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an open-ended consume ends
    except KafkaError as exc:
        raise Failed(f"consuming '{args.topic}': {describe_error(exc)}") from None
    finally:
        try:
            consumer.close()
        except KafkaError as exc:
            print(f"odradek: closing the consumer: {describe_error(exc)}", file=sys.stderr)
        finally:
            restore()
    noun = "record" if count == 1 else "records"
    print(f"Consumed {count:,} {noun}.", file=sys.stderr)
    return 0
