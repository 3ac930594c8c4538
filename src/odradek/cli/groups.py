"""`odradek groups list|describe|delete|reset-offsets|delete-offsets|history`."""

from __future__ import annotations

import argparse
from typing import Any

from odradek.cli.common import (
    Failed,
    add_connection_options,
    add_format_option,
    admin_client,
    describe_error,
    failures_as_messages,
    int_arg,
    non_negative_int,
)
from odradek.cli.errors import CliError

# Classic groups' states, then those only consumer-protocol (KIP-848) groups have.
STATES = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Assigning",
    "Reconciling",
    "Stable",
    "Dead",
)
TYPES = ("classic", "consumer")
INACTIVE = ("Empty", "Dead")

GENERATION_HELP = (
    "Generation and leader are not part of Kafka's DescribeGroups answer: they are taken "
    "from the group's newest events, which Odradek's coordinator keeps in the group's own "
    "__consumer_offsets partition, and reported as unknown on brokers that keep none."
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "groups",
        help="consumer groups: members, lag, offset resets, rebalance history",
        description="Inspect and manage consumer groups.",
    )
    sub = parser.add_subparsers(dest="groups_command", metavar="ACTION")
    sub.required = True

    listing = sub.add_parser(
        "list",
        help="list consumer groups and their states",
        description="List the consumer groups of every broker with their states.",
    )
    listing.add_argument(
        "--state",
        action="append",
        choices=STATES,
        default=[],
        metavar="STATE",
        help=f"only groups in this state (repeatable): {', '.join(STATES)}",
    )
    listing.add_argument(
        "--type",
        action="append",
        choices=TYPES,
        default=[],
        metavar="TYPE",
        help="only groups of this rebalance protocol (repeatable): classic (JoinGroup and "
        "SyncGroup) or consumer (KIP-848, group.protocol=consumer)",
    )
    add_format_option(listing)
    add_connection_options(listing)
    listing.set_defaults(run=run_list)

    describe = sub.add_parser(
        "describe",
        help="state, members, assignments, committed offsets and lag",
        description="Describe a group: its state, protocol, generation, leader and "
        "coordinator; every member (id, instance id, client id, host, assigned "
        "partitions); and for each partition it has committed or been assigned, the "
        "committed offset, the log end offset and the lag (log end minus committed), "
        "with totals. A consumer-protocol (KIP-848) group shows its group epoch, the "
        "epoch of its target assignment and the server-side assignor instead of "
        "generation and leader, and each member's epoch, current and target "
        "assignment. " + GENERATION_HELP,
    )
    describe.add_argument("group", metavar="GROUP")
    describe.add_argument(
        "--wide", action="store_true", help="print member ids in full (default: shortened)"
    )
    add_format_option(describe)
    add_connection_options(describe)
    describe.set_defaults(run=run_describe)

    delete = sub.add_parser(
        "delete",
        help="delete groups and their committed offsets",
        description="Delete consumer groups with their committed offsets. Only a group "
        "without members (Empty) can be deleted: stop its consumers first.",
    )
    delete.add_argument("groups", nargs="+", metavar="GROUP")
    add_connection_options(delete)
    delete.set_defaults(run=run_delete)

    reset = sub.add_parser(
        "reset-offsets",
        help="move a group's committed offsets (dry run unless --execute)",
        description="Compute new committed offsets for a group and, with --execute, "
        "commit them. Without --execute nothing changes: the plan is printed. As in "
        "Kafka, the group must be inactive (Empty): stop its consumers first. Offsets "
        "are kept within each partition's log start and log end.",
        epilog="Examples: odradek groups reset-offsets billing --to-earliest --execute;  "
        "odradek groups reset-offsets billing --topic orders:0,1 --shift-by -100;  "
        "odradek groups reset-offsets billing --to-datetime 2026-01-31T09:00:00",
    )
    reset.add_argument("group", metavar="GROUP")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--to-earliest", action="store_true", help="the oldest offset still in each log"
    )
    target.add_argument(
        "--to-latest", action="store_true", help="each log's end: skip everything unread"
    )
    target.add_argument(
        "--to-offset", type=non_negative_int, metavar="N", help="offset N in every partition"
    )
    target.add_argument(
        "--to-datetime",
        metavar="ISO",
        help="the first record at or after this time, e.g. 2026-01-31T09:00:00 (local "
        "time) or 2026-01-31T08:00:00Z",
    )
    target.add_argument(
        "--shift-by",
        type=int_arg,
        metavar="N",
        help="move each committed offset by N (negative: re-read N records)",
    )
    _add_scope(reset)
    reset.add_argument(
        "--execute", action="store_true", help="commit the new offsets (default: dry run)"
    )
    add_format_option(reset)
    add_connection_options(reset)
    reset.set_defaults(run=run_reset)

    forget = sub.add_parser(
        "delete-offsets",
        help="forget a group's committed offsets for some topics",
        description="Delete the group's committed offsets for the given topics or "
        "partitions. A group still subscribed to a topic refuses.",
    )
    forget.add_argument("group", metavar="GROUP")
    forget.add_argument(
        "--topic",
        "-t",
        action="append",
        required=True,
        metavar="TOPIC[:P,P...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    add_connection_options(forget)
    forget.set_defaults(run=run_delete_offsets)

    history = sub.add_parser(
        "history",
        help="the group's rebalance timeline",
        description="Show the group's rebalance timeline as the coordinator recorded it "
        "in the group's own __consumer_offsets partition (on a cluster too: the history "
        "is replicated and moves with the group's coordinator; each group keeps its last "
        "512 events, for up to group.history.retention.ms): every state transition (time, "
        "from -> to, generation, members, reason) and every completed rebalance (how "
        "long it took; members joined, left and kept); for a consumer-protocol "
        "(KIP-848) group also each group epoch, target assignment and member "
        "reconciliation, and conversions between the protocols. Odradek brokers only.",
    )
    history.add_argument("group", metavar="GROUP")
    history.add_argument(
        "--wide", action="store_true", help="print member ids in full (default: shortened)"
    )
    add_format_option(history)
    add_connection_options(history)
    history.set_defaults(run=run_history)


def _add_scope(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--topic",
        "-t",
        action="append",
        metavar="TOPIC[:P,P...]",
        help="only this topic, or these of its partitions (repeatable)",
    )
    scope.add_argument(
        "--all-topics",
        action="store_true",
        help="every topic the group has committed offsets for (the default)",
    )


# --------------------------------------------------------------------- helpers


def parse_scope(specs: list[str]) -> dict[str, list[int] | None]:
    """``["orders", "audit:0,2"]`` -> ``{"orders": None, "audit": [0, 2]}``."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise CliError(f"--topic expects TOPIC or TOPIC:P,P..., got {spec!r}")
        if not sep:
            out[topic] = None
            continue
        try:
            partitions = sorted({int(p) for p in parts.split(",") if p.strip()})
        except ValueError:
            raise CliError(
                f"--topic expects TOPIC:P,P... with partition numbers, got {spec!r}"
            ) from None
        if not partitions or partitions[0] < 0:
            raise CliError(f"--topic expects TOPIC:P,P... with partition numbers, got {spec!r}")
        previous = out.get(topic, [])
        out[topic] = None if previous is None and topic in out else sorted({*previous, *partitions})
    return out


def parse_datetime(text: str) -> int:
    """An ISO 8601 time as epoch milliseconds (local time when it has no offset)."""
    from odradek.offset_reset import ResetError
    from odradek.offset_reset import parse_datetime as parse

    try:
        return parse(text)
    except ResetError as exc:
        raise CliError(f"--to-datetime {exc}") from None


def _describe_group(admin: Any, group: str) -> Any:
    with failures_as_messages(f"cannot describe group '{group}'"):
        return admin.describe_consumer_groups([group])[group]


def _committed(admin: Any, group: str) -> dict[Any, Any]:
    with failures_as_messages(f"cannot read the committed offsets of group '{group}'"):
        return admin.list_consumer_group_offsets(group)


def _topic_offsets(admin: Any, topics: set[str]) -> dict[str, Any]:
    """describe_topics for those of ``topics`` that exist (deleted ones are left out)."""
    if not topics:
        return {}
    with failures_as_messages("cannot read log offsets"):
        existing = set(admin.list_topics(include_internal=True))
        present = sorted(topics & existing)
        return admin.describe_topics(present) if present else {}


def _partition_label(tps: Any) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return "; ".join(f"{t}: {', '.join(map(str, ps))}" for t, ps in by_topic.items()) or "-"


# --------------------------------------------------------------------- list


def run_list(args: argparse.Namespace) -> int:
    from odradek.cli import render

    with admin_client(args) as admin, failures_as_messages("cannot list groups"):
        groups = admin.list_consumer_groups(states=args.state, types=args.type)
    if args.format == "json":
        render.print_json(
            [
                {
                    "group": g.group_id,
                    "state": g.state or None,
                    "protocol_type": g.protocol_type,
                    "type": g.type,
                    "coordinator": g.coordinator,
                }
                for g in groups
            ]
        )
        return 0
    out = render.output()
    if not groups:
        filtered = " in that state" if args.state else ""
        filtered += " of that type" if args.type else ""
        out.print(f"No consumer groups{filtered}.")
        return 0
    t = render.table("GROUP", "STATE", "TYPE", "PROTOCOL", "COORDINATOR", numeric=("COORDINATOR",))
    for g in groups:
        t.add_row(
            render.text(g.group_id),
            render.state(g.state),
            render.text(g.protocol_type or "simple"),
            render.text(g.type),
            str(g.coordinator),
        )
    out.print(t)
    return 0


# --------------------------------------------------------------------- describe


def group_report(args: argparse.Namespace, admin: Any, group: str) -> dict[str, Any]:
    """Everything ``groups describe`` shows, as JSON-ready data."""
    from odradek.cli import history

    description = _describe_group(admin, group)
    committed = _committed(admin, group)
    if not description.exists and not committed:
        raise Failed(f"group '{group}' does not exist")
    owner: dict[Any, str] = {}
    for m in description.members:
        for tp in m.assignment:
            owner[tp] = m.member_id
    partitions = set(committed) | set(owner)
    topics = _topic_offsets(admin, {tp.topic for tp in partitions})
    consumer_group = description.type == "consumer"
    never_joined = not consumer_group and not description.protocol_type
    # A consumer-protocol group's epoch is in its description; it has no leader. A group
    # that never had members (offsets only) has neither.
    facts: dict[str, Any] = {}
    unreadable = None
    if not consumer_group and not never_joined:
        try:
            facts = history.latest_facts(history.read_events(args, admin, group))
        except history.HistoryNotReadable as exc:
            unreadable = str(exc)  # the rest of the description does not need it
    rows = []
    for tp in sorted(partitions):
        topic = topics.get(tp.topic)
        log_end = None
        if topic is not None:
            match = [p for p in topic.partitions if p.partition == tp.partition]
            if match and match[0].log_end_offset >= 0:
                log_end = match[0].log_end_offset
        offset = committed[tp].offset if tp in committed else None
        lag = log_end - offset if log_end is not None and offset is not None else None
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "committed_offset": offset,
                "log_end_offset": log_end,
                "lag": lag,
                "member_id": owner.get(tp),
            }
        )

    def total(key: str) -> int:
        return sum(r[key] for r in rows if r[key] is not None)

    leader = facts.get("leader") if facts else None
    member_ids = {m.member_id for m in description.members}
    if leader is not None and leader not in member_ids:
        leader = None  # the history's leader has left since
    coordinator = description.coordinator
    generation = facts.get("generation")
    source = "history" if "generation" in facts else "unknown"
    if consumer_group:
        generation, source = description.group_epoch, "group epoch"
    elif never_joined:
        source = "no members ever"

    def partition_list(tps: Any) -> list[dict[str, Any]]:
        return [{"topic": tp.topic, "partition": tp.partition} for tp in tps]

    def member(m: Any) -> dict[str, Any]:
        out = {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "host": m.host,
            "leader": m.member_id == leader,
            "assignment": partition_list(m.assignment),
            "subscription": list(m.subscription),
        }
        if consumer_group:
            out["member_epoch"] = m.member_epoch
            out["member_type"] = m.member_type
            out["target_assignment"] = partition_list(m.target_assignment or ())
            out["subscription_regex"] = m.subscription_regex
        return out

    report: dict[str, Any] = {
        "group": group,
        "type": description.type,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol or None,
        "generation": generation,
        "leader": leader,
        "generation_source": source,
    }
    if unreadable is not None:
        report["history_error"] = unreadable
    if consumer_group:
        report["group_epoch"] = description.group_epoch
        report["assignment_epoch"] = description.assignment_epoch
    return report | {
        "coordinator": None
        if coordinator is None
        else {"id": coordinator.node_id, "host": coordinator.host, "port": coordinator.port},
        "members": [member(m) for m in description.members],
        "partitions": rows,
        "totals": {
            "committed_offset": total("committed_offset"),
            "log_end_offset": total("log_end_offset"),
            "lag": total("lag"),
        },
    }


def run_describe(args: argparse.Namespace) -> int:
    from odradek.cli import history, render
    from odradek.client import TopicPartition

    with admin_client(args) as admin:
        report = group_report(args, admin, args.group)
    if args.format == "json":
        render.print_json(report)
        return 0
    shorten = (lambda s: s) if args.wide else render.short_ids
    out = render.output()
    consumer_group = report["type"] == "consumer"
    c = report["coordinator"]
    coordinator = f"node {c['id']} at {c['host']}:{c['port']}" if c else "-"
    if consumer_group:
        protocol = "consumer (KIP-848)"
        if report["protocol"]:
            protocol += f", server-side assignor {report['protocol']}"
        heading = [
            ("Group", render.text(report["group"], "bold")),
            ("State", render.state(report["state"])),
            ("Protocol", protocol),
            ("Group epoch", str(report["group_epoch"])),
            ("Assignment epoch", str(report["assignment_epoch"])),
        ]
    else:
        protocol = report["protocol_type"] or "simple (offsets only, no members ever joined)"
        if report["protocol"]:
            protocol += f" / {report['protocol']}"
        why = "the group's history has none"
        if report.get("history_error"):
            why = f"this client may not read the group's history in {history.OFFSETS_TOPIC}"
        generation: Any = render.text(
            f"unknown (DescribeGroups does not carry it, and {why})", "dim"
        )
        if report["generation_source"] == "no members ever":
            generation = render.text("none (no member has ever joined this group)", "dim")
        elif report["generation"] is not None:
            generation = str(report["generation"])
        leader = render.text(shorten(report["leader"]) if report["leader"] else "-")
        if report["leader"] is None and report["members"]:
            leader = render.text("unknown", "dim")
        heading = [
            ("Group", render.text(report["group"], "bold")),
            ("State", render.state(report["state"])),
            ("Protocol", protocol),
            ("Generation", generation),
            ("Leader", leader),
        ]
    heading += [("Coordinator", coordinator), ("Members", str(len(report["members"])))]
    out.print(render.key_values(heading))

    def label(assignment: list[dict[str, Any]]) -> str:
        return _partition_label(TopicPartition(a["topic"], a["partition"]) for a in assignment)

    if report["members"] and consumer_group:
        t = render.table(
            "MEMBER",
            "INSTANCE",
            "CLIENT",
            "HOST",
            "EPOCH",
            "PARTITIONS",
            "TARGET",
            title="Members",
            numeric=("EPOCH",),
        )
        for m in report["members"]:
            name = shorten(m["member_id"])
            if m["member_type"] == "classic":
                name += " (classic)"
            target = m["target_assignment"]
            same = {(a["topic"], a["partition"]) for a in target} == {
                (a["topic"], a["partition"]) for a in m["assignment"]
            }
            t.add_row(
                render.text(name),
                render.text(m["group_instance_id"]),
                render.text(m["client_id"]),
                render.text(m["host"]),
                str(m["member_epoch"]),
                render.text(label(m["assignment"])),
                render.text("= current", "dim") if same else render.text(label(target), "yellow"),
            )
        out.print()
        out.print(t)
    elif report["members"]:
        t = render.table("MEMBER", "INSTANCE", "CLIENT", "HOST", "PARTITIONS", title="Members")
        for m in report["members"]:
            name = shorten(m["member_id"]) + (" (leader)" if m["leader"] else "")
            t.add_row(
                render.text(name),
                render.text(m["group_instance_id"]),
                render.text(m["client_id"]),
                render.text(m["host"]),
                render.text(label(m["assignment"])),
            )
        out.print()
        out.print(t)
    rows = report["partitions"]
    out.print()
    if not rows:
        out.print("No committed offsets and no assigned partitions.")
        return 0
    numeric = ("PARTITION", "COMMITTED", "LOG END", "LAG")
    t = render.table(
        "TOPIC",
        "PARTITION",
        "COMMITTED",
        "LOG END",
        "LAG",
        "MEMBER",
        title="Offsets",
        numeric=numeric,
        show_footer=True,
    )
    for r in rows:
        lag = r["lag"]
        t.add_row(
            render.text(r["topic"]),
            str(r["partition"]),
            render.number(r["committed_offset"]),
            render.number(r["log_end_offset"]),
            render.text(render.number(lag), "yellow" if lag else ""),
            render.text(shorten(r["member_id"]) if r["member_id"] else None),
        )
    totals = report["totals"]
    t.columns[0].footer = "TOTAL"
    t.columns[2].footer = render.number(totals["committed_offset"])
    t.columns[3].footer = render.number(totals["log_end_offset"])
    t.columns[4].footer = render.number(totals["lag"])
    out.print(t)
    return 0


# --------------------------------------------------------------------- delete


def run_delete(args: argparse.Namespace) -> int:
    import sys

    from odradek.client.errors import GroupIdNotFoundError, NonEmptyGroupError

    failures = []
    with admin_client(args) as admin:
        for group, future in admin.delete_consumer_groups(args.groups).items():
            try:
                future.result()
                print(f"Deleted group '{group}'.")
            except GroupIdNotFoundError:
                failures.append(f"group '{group}' does not exist")
            except NonEmptyGroupError:
                failures.append(
                    f"group '{group}' still has members: only an Empty group can be "
                    "deleted (stop its consumers first)"
                )
            except Exception as exc:
                failures.append(f"cannot delete group '{group}': {describe_error(exc)}")
    if len(failures) == 1:
        raise Failed(failures[0])
    for line in failures:
        print(f"odradek: {line}", file=sys.stderr)
    return Failed.exit_code if failures else 0


# --------------------------------------------------------------------- reset-offsets


def _refuse_if_active(description: Any, action: str) -> None:
    from odradek.offset_reset import refusal

    why = refusal(description.group_id, description.state, len(description.members), action)
    if why is not None:
        raise Failed(why)


def _describe_scope(admin: Any, scope: dict[str, list[int] | None]) -> dict[str, Any]:
    from odradek.client.errors import KafkaError, UnknownTopicOrPartitionError

    try:
        return admin.describe_topics(list(scope), include_offsets=False)
    except UnknownTopicOrPartitionError:
        existing = set(admin.list_topics(include_internal=True))
        missing = [t for t in scope if t not in existing] or list(scope)
        raise Failed(f"topic '{missing[0]}' does not exist") from None
    except KafkaError as exc:
        raise Failed(f"cannot describe topics: {describe_error(exc)}") from None


def _scope_partitions(
    admin: Any, group: str, specs: list[str] | None, committed: dict[Any, Any]
) -> list[Any]:
    """The partitions --topic names (checked), or every committed one."""
    from odradek.client import TopicPartition

    if not specs:
        if not committed:
            raise Failed(f"group '{group}' has no committed offsets: name the topics with --topic")
        return sorted(committed)
    scope = parse_scope(specs)
    described = _describe_scope(admin, scope)
    from odradek.offset_reset import ResetError, scope_partitions

    counts = {topic: len(described[topic].partitions) for topic in scope}
    try:
        return [TopicPartition(t, p) for t, p in scope_partitions(scope, counts)]
    except ResetError as exc:
        raise CliError(f"--topic: {exc}") from None


def reset_target(args: argparse.Namespace) -> Any:
    """The --to-* / --shift-by option as an ``offset_reset.ResetTarget``."""
    from odradek.offset_reset import ResetTarget

    if args.to_earliest:
        return ResetTarget("earliest")
    if args.to_latest:
        return ResetTarget("latest")
    if args.to_offset is not None:
        return ResetTarget("offset", args.to_offset)
    if args.to_datetime is not None:
        return ResetTarget("datetime", parse_datetime(args.to_datetime))
    return ResetTarget("shift", args.shift_by)


def plan_reset(
    args: argparse.Namespace, admin: Any, tps: list[Any], committed: dict[Any, Any]
) -> dict[Any, int]:
    """The new offset of each partition, kept within [log start, log end]."""
    from odradek.offset_reset import ResetError, plan, read_bounds

    target = reset_target(args)
    with failures_as_messages("cannot read log offsets"):
        bounds = read_bounds(admin, tps, target)
    try:
        return plan(args.group, tps, target, bounds, {tp: c.offset for tp, c in committed.items()})
    except ResetError as exc:
        raise Failed(f"{exc} (use --to-earliest, --to-latest or --to-offset)") from None


def run_reset(args: argparse.Namespace) -> int:
    from odradek.cli import render

    if args.to_datetime is not None:
        parse_datetime(args.to_datetime)  # bad input is a usage error, before connecting
    if args.topic:
        parse_scope(args.topic)
    with admin_client(args) as admin:
        description = _describe_group(admin, args.group)
        _refuse_if_active(description, "reset the offsets")
        committed = _committed(admin, args.group)
        tps = _scope_partitions(admin, args.group, args.topic, committed)
        plan = plan_reset(args, admin, tps, committed)
        if args.execute:
            # The group may have come alive since: the commit is refused then.
            results = admin.alter_consumer_group_offsets(args.group, plan)
            errors = []
            for tp, future in results.items():
                try:
                    future.result()
                except Exception as exc:
                    errors.append((tp, exc))
            if errors:
                from odradek.client.errors import UnknownMemberIdError

                tp, exc = errors[0]
                if isinstance(exc, UnknownMemberIdError):
                    raise Failed(
                        f"group '{args.group}' became active: offsets were not reset "
                        "(stop its consumers first)"
                    )
                raise Failed(
                    f"could not commit {len(errors)} of {len(plan)} offsets: {describe_error(exc)}"
                )
    rows = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "current_offset": committed[tp].offset if tp in committed else None,
            "new_offset": new,
        }
        for tp, new in sorted(plan.items())
    ]
    if args.format == "json":
        render.print_json({"group": args.group, "executed": args.execute, "partitions": rows})
        return 0
    out = render.output()
    title = "New offsets" if args.execute else "New offsets (dry run)"
    t = render.table(
        "TOPIC",
        "PARTITION",
        "CURRENT",
        "NEW",
        "CHANGE",
        title=title,
        numeric=("PARTITION", "CURRENT", "NEW", "CHANGE"),
    )
    for r in rows:
        change = None if r["current_offset"] is None else r["new_offset"] - r["current_offset"]
        t.add_row(
            render.text(r["topic"]),
            str(r["partition"]),
            render.number(r["current_offset"]),
            render.number(r["new_offset"]),
            "-" if change is None else f"{change:+,}",
        )
    out.print(t)
    if args.execute:
        out.print(
            f"Committed {len(rows)} offset{'s' if len(rows) != 1 else ''} for group '{args.group}'."
        )
    else:
        out.print("Dry run: nothing was changed. Add --execute to commit these offsets.")
    return 0


# --------------------------------------------------------------------- delete-offsets


def run_delete_offsets(args: argparse.Namespace) -> int:
    from odradek.client.errors import (
        GroupIdNotFoundError,
        GroupSubscribedToTopicError,
        NonEmptyGroupError,
    )

    parse_scope(args.topic)
    with admin_client(args) as admin:
        committed = _committed(admin, args.group)
        tps = _scope_partitions(admin, args.group, args.topic, committed)
        results = admin.delete_consumer_group_offsets(args.group, tps)
        deleted = 0
        for tp, future in results.items():
            try:
                future.result()
                deleted += tp in committed
            except GroupIdNotFoundError:
                raise Failed(f"group '{args.group}' does not exist") from None
            except GroupSubscribedToTopicError:
                raise Failed(
                    f"group '{args.group}' is subscribed to topic '{tp.topic}': its "
                    "consumers must unsubscribe (or stop) first"
                ) from None
            except NonEmptyGroupError:
                raise Failed(
                    f"group '{args.group}' is not empty: stop its consumers first"
                ) from None
            except Exception as exc:
                raise Failed(f"cannot delete offsets: {describe_error(exc)}") from None
    print(
        f"Deleted {deleted} committed offset{'s' if deleted != 1 else ''} of group '{args.group}'."
    )
    return 0


# --------------------------------------------------------------------- history


def run_history(args: argparse.Namespace) -> int:
    from odradek.cli import history, render

    with (
        admin_client(args) as admin,
        render.progress(
            f"Reading the history of '{args.group}' from {history.OFFSETS_TOPIC}",
            total=None,
            enabled=render.progress_wanted(),
            unit="records",
        ) as bar,
    ):
        seen = [0]

        def advance(done: int, total: int) -> None:
            bar.advance(done - seen[0])
            seen[0] = done

        events = history.read_events(args, admin, args.group, on_progress=advance)
    if args.format == "json":
        render.print_json(
            {
                "group": args.group,
                "events": events,
                "rebalances": history.rebalances(events),
                "summary": history.summary(events),
            }
        )
        return 0
    history.render_timeline(render.output(), args.group, events, wide=args.wide)
    return 0
