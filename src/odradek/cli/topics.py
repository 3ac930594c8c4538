"""`odradek topics create|list|describe|delete|alter|delete-records`: topics, partitions,
configs, and the records a partition keeps."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from odradek.cli.common import (
    Failed,
    add_connection_options,
    add_format_option,
    admin_client,
    describe_error,
    failures_as_messages,
    key_value,
    non_negative_int,
    positive_int,
)
from odradek.cli.errors import CliError


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "topics",
        help="create, list, describe, delete and alter topics",
        description="Manage topics: partitions, configs, and per-partition log offsets.",
    )
    sub = parser.add_subparsers(dest="topics_command", metavar="ACTION")
    sub.required = True

    create = sub.add_parser(
        "create",
        help="create topics",
        description="Create one or more topics.",
        epilog="Example: odradek topics create orders --partitions 3 "
        "--config retention.ms=86400000",
    )
    create.add_argument("topics", nargs="+", metavar="TOPIC", help="topic name(s)")
    create.add_argument(
        "--partitions",
        "-p",
        type=positive_int,
        metavar="N",
        help="number of partitions (default: the broker's num.partitions)",
    )
    create.add_argument(
        "--replication-factor",
        "-r",
        type=positive_int,
        metavar="N",
        help="copies of each partition (default: the broker's default.replication.factor)",
    )
    create.add_argument(
        "--config",
        "-c",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="a topic config, e.g. cleanup.policy=compact (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="a topic that already exists is not an error"
    )
    add_connection_options(create)
    create.set_defaults(run=run_create)

    listing = sub.add_parser(
        "list",
        help="list topics with partition and record counts",
        description="List topics: partitions and records held (log end minus log start, "
        "summed over partitions).",
    )
    listing.add_argument(
        "--internal",
        action="store_true",
        help="include internal topics (__consumer_offsets, __transaction_state)",
    )
    add_format_option(listing)
    add_connection_options(listing)
    listing.set_defaults(run=run_list)

    describe = sub.add_parser(
        "describe",
        help="partitions, leaders, log start / end offsets and configs",
        description="Describe topics: each partition's leader, replicas, in-sync replicas, "
        "log start and log end offsets, and the topic's configs (those that differ "
        "from the defaults, or all with --all-configs); and any range of a partition's "
        "log its leader quarantined (offsets that answer CORRUPT_MESSAGE) or skipped "
        "(docs/operations.md, Recovery). No TOPIC: every topic.",
    )
    describe.add_argument("topics", nargs="*", metavar="TOPIC", help="topic name(s)")
    describe.add_argument(
        "--all-configs", action="store_true", help="show every config, defaults included"
    )
    describe.add_argument(
        "--log-dirs",
        action="store_true",
        help="also show each partition's size on disk and its log directory (DescribeLogDirs)",
    )
    describe.add_argument(
        "--under-replicated",
        action="store_true",
        help="only partitions whose ISR is smaller than their replicas, or without a leader "
        "(kafka-topics' --under-replicated-partitions and --unavailable-partitions)",
    )
    add_format_option(describe)
    add_connection_options(describe)
    describe.set_defaults(run=run_describe)

    delete = sub.add_parser(
        "delete",
        help="delete topics and their data",
        description="Delete topics. Their data is gone for good.",
    )
    delete.add_argument("topics", nargs="+", metavar="TOPIC", help="topic name(s)")
    delete.add_argument(
        "--if-exists", action="store_true", help="a topic that does not exist is not an error"
    )
    add_connection_options(delete)
    delete.set_defaults(run=run_delete)

    alter = sub.add_parser(
        "alter",
        help="add partitions, set or remove configs",
        description="Change a topic: raise its partition count (partitions can only be "
        "added) and set or remove configs.",
        epilog="Example: odradek topics alter orders --partitions 6 "
        "--config retention.ms=3600000 --delete-config cleanup.policy",
    )
    alter.add_argument("topic", metavar="TOPIC")
    alter.add_argument(
        "--partitions", "-p", type=positive_int, metavar="N", help="new total partition count"
    )
    alter.add_argument(
        "--config",
        "-c",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="set a config (repeatable)",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove a config, back to the broker default (repeatable)",
    )
    add_connection_options(alter)
    alter.set_defaults(run=run_alter)

    delete_records = sub.add_parser(
        "delete-records",
        help="delete a topic's oldest records (advance the log start offset)",
        description="Delete every record below OFFSET in the topic's partitions (all of "
        "them, or those given with --partition), as kafka-delete-records.sh does. The "
        "log start offset moves up; consumers that were further back restart from it.",
        epilog="Example: odradek topics delete-records orders --partition 0 --offset 1000",
    )
    delete_records.add_argument("topic", metavar="TOPIC")
    delete_records.add_argument(
        "--offset",
        required=True,
        type=_record_offset,
        metavar="OFFSET",
        help="delete the records below this offset; 'end' deletes them all",
    )
    delete_records.add_argument(
        "--partition",
        action="append",
        type=non_negative_int,
        default=[],
        metavar="N",
        help="only this partition (repeatable; default: every partition)",
    )
    add_connection_options(delete_records)
    delete_records.set_defaults(run=run_delete_records)


def _record_offset(text: str) -> int:
    """An offset for delete-records: a number, or 'end' (the high watermark)."""
    if text.strip().lower() == "end":
        return -1
    return non_negative_int(text)


# --------------------------------------------------------------------- helpers


def _finish(done: list[str], failures: list[str]) -> int:
    """Print what worked; one failure is a one-line error, several are one line each."""
    for line in done:
        print(line)
    if not failures:
        return 0
    if len(failures) == 1:
        raise Failed(failures[0])
    for line in failures:
        print(f"odradek: {line}", file=sys.stderr)
    return Failed.exit_code


DAMAGE_TIMEOUT_MS = 5_000  # describe's own look at damaged ranges never holds it up long


def _records(start: int, end: int) -> int | None:
    return end - start if start >= 0 and end >= 0 else None


def _describe(admin: Any, names: list[str] | None) -> dict[str, Any]:
    from odradek.client.errors import UnknownTopicOrPartitionError

    try:
        return admin.describe_topics(names)
    except UnknownTopicOrPartitionError:
        missing = [n for n in names or () if n not in admin.list_topics(include_internal=True)]
        which = ", ".join(repr(n) for n in missing) or "a topic"
        raise Failed(
            f"topic {which} does not exist" if len(missing) <= 1 else f"topics {which} do not exist"
        ) from None


# --------------------------------------------------------------------- create


# A cluster's other brokers learn of a new topic from etcd's watch a moment after the
# one that created it answered (as Kafka's brokers learn from the metadata log): the
# describe that follows a creation may ask one of them before it has.
CREATED_VISIBLE_S = 10.0


def _describe_created(admin: Any, names: list[str]) -> dict[str, Any]:
    from odradek.client.errors import UnknownTopicOrPartitionError

    deadline = time.monotonic() + CREATED_VISIBLE_S
    while True:
        try:
            return dict(admin.describe_topics(names, include_offsets=False))
        except UnknownTopicOrPartitionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def run_create(args: argparse.Namespace) -> int:
    from odradek.client import NewTopic
    from odradek.client.errors import TopicAlreadyExistsError

    configs = dict(args.config)
    specs = [
        NewTopic(
            name,
            args.partitions or -1,
            args.replication_factor or -1,
            config=configs or None,
        )
        for name in args.topics
    ]
    done: list[str] = []
    failures: list[str] = []
    with admin_client(args) as admin:
        results = admin.create_topics(specs)
        created = []
        for name, future in results.items():
            try:
                future.result()
                created.append(name)
            except TopicAlreadyExistsError:
                if args.if_not_exists:
                    done.append(f"Topic '{name}' already exists.")
                else:
                    failures.append(f"topic '{name}' already exists")
            except Exception as exc:
                failures.append(f"cannot create topic '{name}': {describe_error(exc)}")
        if created:
            with failures_as_messages("created, but cannot describe"):
                described = _describe_created(admin, created)
            for name in created:
                count = len(described[name].partitions)
                plural = "partition" if count == 1 else "partitions"
                done.append(f"Created topic '{name}' with {count} {plural}.")
    return _finish(done, failures)


# --------------------------------------------------------------------- list


def run_list(args: argparse.Namespace) -> int:
    from odradek.cli import render

    with admin_client(args) as admin, failures_as_messages("cannot list topics"):
        described = admin.describe_topics(None)
    rows = [
        d
        for d in sorted(described.values(), key=lambda d: d.name)
        if args.internal or not d.internal
    ]
    if args.format == "json":
        render.print_json(
            [
                {
                    "name": d.name,
                    "internal": d.internal,
                    "partitions": len(d.partitions),
                    "records": _sum(
                        _records(p.log_start_offset, p.log_end_offset) for p in d.partitions
                    ),
                }
                for d in rows
            ]
        )
        return 0
    out = render.output()
    if not rows:
        out.print("No topics." + ("" if args.internal else " (--internal shows internal ones)"))
        return 0
    t = render.table("TOPIC", "PARTITIONS", "RECORDS", numeric=("PARTITIONS", "RECORDS"))
    for d in rows:
        records = _sum(_records(p.log_start_offset, p.log_end_offset) for p in d.partitions)
        name = render.text(d.name, "dim" if d.internal else "")
        t.add_row(name, str(len(d.partitions)), render.number(records))
    out.print(t)
    return 0


def _sum(values: Any) -> int | None:
    total = 0
    for v in values:
        if v is None:
            return None
        total += v
    return total


# --------------------------------------------------------------------- describe


def run_describe(args: argparse.Namespace) -> int:
    from odradek.cli import render
    from odradek.client import ConfigResource
    from odradek.client.errors import KafkaError

    names = list(dict.fromkeys(args.topics)) or None
    with admin_client(args) as admin:
        described = _describe(admin, names)
        with failures_as_messages("cannot read topic configs"):
            configs = (
                admin.describe_configs([ConfigResource.topic(n) for n in described])
                if described
                else {}
            )
        replicas: dict[tuple[str, int], Any] | None = {}
        if described:
            if args.log_dirs:
                with failures_as_messages("cannot read log directories"):
                    replicas = _leader_replicas(admin, described)
            else:  # damaged ranges are worth a short request, not a failure (not authorized)
                try:
                    replicas = _leader_replicas(admin, described, timeout_ms=DAMAGE_TIMEOUT_MS)
                except KafkaError:
                    replicas = None
    topics = []
    for name, d in described.items():
        entries = configs.get(ConfigResource.topic(name), {})
        partitions = []
        for p in d.partitions:
            partition: dict[str, Any] = {
                "partition": p.partition,
                "leader": p.leader,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "under_replicated": len(p.isr) < len(p.replicas),
                "offline": p.leader < 0,
                "log_start_offset": p.log_start_offset,
                "log_end_offset": p.log_end_offset,
                "records": _records(p.log_start_offset, p.log_end_offset),
            }
            found = replicas.get((name, p.partition)) if replicas is not None else None
            if args.log_dirs:
                partition["log_dir"] = found[0] if found else None
                partition["size_bytes"] = found[1].size if found else None
            # None: the leader did not say (not an Odradek broker, or not authorized).
            damage = found[1].damage if found else None if replicas is None else ()
            partition["quarantined"] = _ranges(damage, quarantined=True)
            partition["skipped"] = _ranges(damage, quarantined=False)
            if args.under_replicated and not (
                partition["under_replicated"] or partition["offline"]
            ):
                continue
            partitions.append(partition)
        topics.append(
            {
                "name": name,
                "topic_id": None if d.topic_id is None else str(d.topic_id),
                "internal": d.internal,
                "partitions": partitions,
                "configs": {
                    e.name: {
                        "value": None if e.is_sensitive else e.value,
                        "source": e.source.name,
                        "default": e.is_default,
                        "read_only": e.read_only,
                        "sensitive": e.is_sensitive,
                    }
                    for e in sorted(entries.values(), key=lambda e: e.name)
                },
            }
        )
    if args.format == "json":
        render.print_json(topics)
        return 0
    out = render.output()
    if not topics:
        out.print("No topics.")
    for i, topic in enumerate(topics):
        if i:
            out.print()
        _print_topic(out, topic, all_configs=args.all_configs)
    return 0


def _partition_state(partition: dict[str, Any]) -> str:
    if partition["offline"]:
        return "offline"
    if partition["under_replicated"]:
        return "under-replicated"
    return "quarantined" if partition["quarantined"] else ""


def _leader_replicas(
    admin: Any, described: dict[str, Any], *, timeout_ms: int | None = None
) -> dict[tuple[str, int], tuple[str, Any]]:
    """(topic, partition) -> (log dir, ReplicaLogDirInfo) of the leader's replica, asked
    of the leaders only (a broker that is down leads nothing)."""
    leaders = {(name, p.partition): p.leader for name, d in described.items() for p in d.partitions}
    brokers = sorted({node for node in leaders.values() if node >= 0})
    if not brokers:
        return {}
    out: dict[tuple[str, int], tuple[str, Any]] = {}
    answers = admin.describe_log_dirs(list(described), brokers=brokers, timeout_ms=timeout_ms)
    for node, dirs in answers.items():
        for path, description in dirs.items():
            for tp, info in description.replicas.items():
                if leaders.get((tp.topic, tp.partition)) == node and not info.is_future:
                    out[(tp.topic, tp.partition)] = (path, info)
    return out


def _ranges(damage: Any, *, quarantined: bool) -> list[dict[str, Any]] | None:
    """The leader's quarantined (or skipped) ranges of a partition, for output."""
    if damage is None:
        return None
    return [
        {
            "first_offset": d.first_offset,
            "last_offset": d.end_offset - 1,
            "segment": d.segment,
            "position": d.position,
            "end_position": d.end_position,
            "reason": d.reason,
        }
        for d in damage
        if d.quarantined == quarantined
    ]


def _print_damage(out: Any, parts: list[dict[str, Any]]) -> None:
    """What the leaders set aside, after the partition table (nothing when all is well)."""
    from odradek.cli import render

    for key, title in (
        (
            "quarantined",
            "Quarantined offsets (fetching them answers CORRUPT_MESSAGE; "
            "docs/operations.md, Recovery):",
        ),
        ("skipped", "Set aside (no offset is missing; readers pass them):"),
    ):
        lines = [
            f"  partition {p['partition']}: "
            + (f"offsets {r['first_offset']}-{r['last_offset']}, " if key == "quarantined" else "")
            + f"segment {r['segment']} bytes {r['position']}-{r['end_position']}: {r['reason']}"
            for p in parts
            for r in p[key] or ()
        ]
        if lines:
            out.print()
            out.print(render.text(title, "bold red" if key == "quarantined" else "bold"))
            out.print(render.text("\n".join(lines)))


def _print_topic(out: Any, topic: dict[str, Any], *, all_configs: bool) -> None:
    from odradek.cli import render

    parts = topic["partitions"]
    replication = max((len(p["replicas"]) for p in parts), default=0)
    heading = [
        ("Topic", render.text(topic["name"], "bold")),
        ("Id", topic["topic_id"]),
        ("Partitions", str(len(parts))),
        ("Replication", str(replication)),
    ]
    if topic["internal"]:
        heading.append(("Internal", "yes"))
    with_sizes = bool(parts) and "size_bytes" in parts[0]
    if with_sizes:
        dirs = sorted({p["log_dir"] for p in parts if p["log_dir"]})
        heading.append(("Log dirs", ", ".join(dirs) or "(unknown)"))
    shown = {k: v for k, v in topic["configs"].items() if all_configs or not v["default"]}
    if shown:
        width = max(len(k) for k in shown)
        lines = []
        for k, v in shown.items():
            value = "(sensitive)" if v["sensitive"] else v["value"]
            source = "" if not all_configs else f"  ({v['source'].lower().replace('_', ' ')})"
            lines.append(f"{k.ljust(width)} = {value}{source}")
        heading.append(("Configs", render.text("\n".join(lines))))
    else:
        heading.append(("Configs", render.text("(all defaults)", "dim")))
    out.print(render.key_values(heading))
    out.print()
    columns = ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG START", "LOG END", "RECORDS"]
    numeric = ("PARTITION", "LEADER", "LOG START", "LOG END", "RECORDS", "BYTES")
    # A STATE column only when some partition is under-replicated, offline (a cluster)
    # or has quarantined offsets.
    any_flagged = any(_partition_state(p) for p in parts)
    t = render.table(
        *columns,
        *(["BYTES"] if with_sizes else []),
        *(["STATE"] if any_flagged else []),
        numeric=numeric,
        show_footer=len(parts) > 1,
    )
    for p in parts:
        row = [
            str(p["partition"]),
            str(p["leader"]),
            ",".join(map(str, p["replicas"])),
            ",".join(map(str, p["isr"])),
            render.number(p["log_start_offset"] if p["log_start_offset"] >= 0 else None),
            render.number(p["log_end_offset"] if p["log_end_offset"] >= 0 else None),
            render.number(p["records"]),
        ]
        if with_sizes:
            row.append(render.number(p["size_bytes"]))
        if any_flagged:
            row.append(_partition_state(p))
        t.add_row(*row)
    if len(parts) > 1:
        t.columns[0].footer = "TOTAL"
        t.columns[6].footer = render.number(_sum(p["records"] for p in parts))
        if with_sizes:
            t.columns[7].footer = render.number(_sum(p["size_bytes"] for p in parts))
    out.print(t)
    _print_damage(out, parts)


# --------------------------------------------------------------------- delete


def run_delete(args: argparse.Namespace) -> int:
    from odradek.client.errors import UnknownTopicOrPartitionError

    done: list[str] = []
    failures: list[str] = []
    with admin_client(args) as admin:
        for name, future in admin.delete_topics(args.topics).items():
            try:
                future.result()
                done.append(f"Deleted topic '{name}'.")
            except UnknownTopicOrPartitionError:
                if args.if_exists:
                    done.append(f"Topic '{name}' does not exist.")
                else:
                    failures.append(f"topic '{name}' does not exist")
            except Exception as exc:
                failures.append(f"cannot delete topic '{name}': {describe_error(exc)}")
    return _finish(done, failures)


# --------------------------------------------------------------------- alter


def run_alter(args: argparse.Namespace) -> int:
    from odradek.client import AlterConfigOp, AlterConfigOpType, ConfigResource

    if args.partitions is None and not args.config and not args.delete_config:
        raise CliError(
            "topics alter: nothing to change (give --partitions, --config or --delete-config)"
        )
    done: list[str] = []
    failures: list[str] = []
    with admin_client(args) as admin:
        current = _describe(admin, [args.topic])[args.topic]
        if args.partitions is not None:
            have = len(current.partitions)
            if args.partitions == have:
                done.append(f"Topic '{args.topic}' already has {have} partitions.")
            elif args.partitions < have:
                failures.append(
                    f"topic '{args.topic}' has {have} partitions; partitions can only be added"
                )
            else:
                try:
                    admin.create_partitions({args.topic: args.partitions})[args.topic].result()
                    done.append(
                        f"Topic '{args.topic}' now has {args.partitions} partitions (was {have})."
                    )
                except Exception as exc:
                    failures.append(f"cannot add partitions: {describe_error(exc)}")
        ops = [AlterConfigOp(k, v) for k, v in args.config] + [
            AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in args.delete_config
        ]
        if ops:
            resource = ConfigResource.topic(args.topic)
            try:
                admin.incremental_alter_configs({resource: ops})[resource].result()
                for k, v in args.config:
                    done.append(f"Set {k}={v} on topic '{args.topic}'.")
                for k in args.delete_config:
                    done.append(f"Removed {k} from topic '{args.topic}' (back to the default).")
            except Exception as exc:
                failures.append(f"cannot change configs: {describe_error(exc)}")
    return _finish(done, failures)


# --------------------------------------------------------------------- delete-records


def run_delete_records(args: argparse.Namespace) -> int:
    from odradek.client import TopicPartition

    done: list[str] = []
    failures: list[str] = []
    with admin_client(args) as admin:
        current = _describe(admin, [args.topic])[args.topic]
        have = [p.partition for p in current.partitions]
        wanted = list(dict.fromkeys(args.partition)) or have
        missing = [p for p in wanted if p not in have]
        if missing:
            raise Failed(
                f"topic '{args.topic}' has no partition {missing[0]} "
                f"(it has {len(have)}: 0-{len(have) - 1})"
            )
        offsets = {TopicPartition(args.topic, p): args.offset for p in wanted}
        for tp, future in admin.delete_records(offsets).items():
            try:
                start = future.result()
                done.append(
                    f"Partition {tp.partition} of '{tp.topic}' now starts at offset {start}."
                )
            except Exception as exc:
                failures.append(
                    f"cannot delete records of '{tp.topic}' partition {tp.partition}: "
                    f"{describe_error(exc)}"
                )
    return _finish(done, failures)
