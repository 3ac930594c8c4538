"""A group's rebalance history, read from the group's own ``__consumer_offsets`` partition.

Odradek's coordinator writes every event of a group as a record of the partition that
holds the group (``odradek.coordinator.history``; docs/coordinator.md, "The group's
history"), so the history is where the group is, replicated with it on a cluster and
moved with its coordinator. Here that partition is read from its log start to its end
with Odradek's own client (assign mode, from the partition's leader, nothing committed),
keeping the group's event records. Other Kafka-compatible brokers write none: there
``groups history`` finds no events, and ``groups describe`` reports generation and
leader as unknown (DescribeGroups carries neither).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from odradek.cli.common import (
    Failed,
    api_timeout_ms,
    client_settings,
    deadline_of,
    describe_error,
)
from odradek.coordinator.history import GroupHistoryReader, member_count
from odradek.coordinator.routing import OFFSETS_TOPIC, partition_for

STATE_TRANSITION = "state_transition"
REBALANCE_COMPLETED = "rebalance_completed"
MEMBER_REMOVED = "member_removed"
STATIC_MEMBER_REPLACED = "static_member_replaced"
JOIN_PHASE_EXTENDED = "join_phase_extended"
OFFSETS_EXPIRED = "offsets_expired"
GROUP_LOADED = "group_loaded"
# Consumer-protocol (KIP-848) groups.
GROUP_EPOCH_BUMPED = "group_epoch_bumped"
TARGET_ASSIGNMENT_COMPUTED = "target_assignment_computed"
MEMBER_RECONCILED = "member_reconciled"
GROUP_CONVERTED = "group_converted"
# States a group is in while it rebalances: classic, then consumer-protocol groups.
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
POLL_S = 0.5
MAX_POLL_RECORDS = 20_000
FETCH_BYTES = 16 * 1024 * 1024  # the partition is read whole: take it in large fetches

Event = dict[str, Any]
TOPIC_AUTHORIZATION_FAILED = 29


class HistoryNotReadable(Failed):
    """The client may not read ``__consumer_offsets`` (no READ on it in the ACLs)."""


def _failure(what: str, exc: Any) -> Failed:
    if getattr(exc, "code", None) == TOPIC_AUTHORIZATION_FAILED:
        return HistoryNotReadable(f"{what}: not authorized to read {OFFSETS_TOPIC}")
    return Failed(f"{what}: {describe_error(exc)}")


def group_partition(args: argparse.Namespace, admin: Any, group: str) -> int | None:
    """The ``__consumer_offsets`` partition holding ``group`` (the coordinator's own
    routing); None while the cluster has no such topic (no group has had a coordinator)."""
    from odradek.client.errors import KafkaError, UnknownTopicOrPartitionError

    try:
        described = admin.describe_topics([OFFSETS_TOPIC], include_offsets=False)
    except UnknownTopicOrPartitionError:
        return None
    except KafkaError as exc:
        raise _failure(f"cannot look up {OFFSETS_TOPIC}", exc) from None
    return partition_for(group, len(described[OFFSETS_TOPIC].partitions))


def read_events(
    args: argparse.Namespace,
    admin: Any,
    group: str,
    *,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Event]:
    """The group's events, oldest first, as its partition holds them now.

    ``on_progress(done, total)`` is told how many of the partition's offsets are read.
    Bounded by the command's --timeout; a failure names the partition.
    """
    from odradek.client import Consumer, TopicPartition
    from odradek.client.errors import KafkaError, KafkaTimeoutError

    partition = group_partition(args, admin, group)
    if partition is None:
        return []
    deadline = deadline_of(args)
    what = f"reading the history of group '{group}' from {OFFSETS_TOPIC}-{partition}"
    tp = TopicPartition(OFFSETS_TOPIC, partition)
    reader = GroupHistoryReader(group)
    consumer = Consumer(
        auto_offset_reset="earliest",
        allow_auto_create_topics=False,
        max_poll_records=MAX_POLL_RECORDS,
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=FETCH_BYTES,
        default_api_timeout_ms=api_timeout_ms(args),
        **client_settings(args),
    )
    try:
        consumer.assign([tp])
        low = consumer.beginning_offsets([tp], deadline.remaining_s(what))[tp]
        high = consumer.end_offsets([tp], deadline.remaining_s(what))[tp]
        position = max(low, 0)
        consumer.seek(tp, position)
        while position < high:
            records = consumer.poll(min(POLL_S, deadline.remaining_s(what)))
            for r in records:
                if r.offset >= high:
                    position = high
                    break
                position = r.offset + 1
                reader.add(r.key, r.value)
            if not records:
                # A compacted range ends in no record: the fetch position still moves on.
                position = max(position, consumer.position(tp, deadline.remaining_s(what)))
            if on_progress is not None:
                on_progress(min(position, high) - low, high - low)
    except KafkaTimeoutError:
        raise deadline.timed_out(what) from None
    except KafkaError as exc:
        raise _failure(what, exc) from None
    finally:
        consumer.close()
    return [event.as_dict() for event in reader.events()]


def latest_facts(events: list[Event]) -> dict[str, Any]:
    """Generation and leader from the group's newest events ({} when they have none)."""
    facts: dict[str, Any] = {}
    for event in reversed(events):
        if "generation" not in facts and isinstance(event.get("generation"), int):
            facts["generation"] = event["generation"]
            facts["at_ms"] = event.get("at_ms")
        if "leader" not in facts and event.get("kind") == STATE_TRANSITION:
            facts["leader"] = event.get("leader")
        if "generation" in facts and "leader" in facts:
            break
    return facts


# --------------------------------------------------------------------- the timeline


def rebalances(events: list[Event]) -> list[dict[str, Any]]:
    """Completed rebalances, numbered, with the transitions that led to each."""
    out: list[dict[str, Any]] = []
    transitions: list[Event] = []
    started: int | None = None
    for e in events:
        kind = e.get("kind")
        if kind == STATE_TRANSITION:
            if started is None and e.get("to_state") in ("PreparingRebalance", "Assigning"):
                started = e.get("at_ms")
            transitions.append(e)
        elif kind == REBALANCE_COMPLETED:
            out.append(
                {
                    "number": len(out) + 1,
                    "generation": e.get("generation"),
                    "state": e.get("state"),
                    "started_ms": started
                    if started is not None
                    else e.get("at_ms", 0) - e.get("duration_ms", 0),
                    "completed_ms": e.get("at_ms"),
                    "duration_ms": e.get("duration_ms"),
                    "joined": list(e.get("joined") or ()),
                    "left": list(e.get("left") or ()),
                    "kept": list(e.get("kept") or ()),
                    "reasons": list(e.get("reasons") or ()),
                    "states": _state_path(transitions),
                }
            )
            transitions = []
            started = None
    return out


def _state_path(transitions: list[Event]) -> list[str]:
    if not transitions:
        return []
    path = [str(transitions[0].get("from_state"))]
    path += [str(t.get("to_state")) for t in transitions]
    return path


def protocol(events: list[Event]) -> str:
    """The group's rebalance protocol as of its newest event: "classic" or "consumer"."""
    for e in reversed(events):
        if e.get("kind") == GROUP_CONVERTED:
            return str(e.get("to_protocol") or "classic")
        if e.get("kind") in (STATE_TRANSITION, GROUP_LOADED, REBALANCE_COMPLETED):
            return str(e.get("protocol") or "classic")
    return "consumer" if any(e.get("kind") == GROUP_EPOCH_BUMPED for e in events) else "classic"


def summary(events: list[Event]) -> dict[str, Any]:
    done = rebalances(events)
    last_transition = next((e for e in reversed(events) if e.get("kind") == STATE_TRANSITION), None)
    generation = next(
        (e["generation"] for e in reversed(events) if isinstance(e.get("generation"), int)),
        None,
    )
    state = last_transition.get("to_state") if last_transition else None
    loaded = next((e for e in reversed(events) if e.get("kind") == GROUP_LOADED), None)
    if loaded is not None and (
        last_transition is None or loaded["at_ms"] >= last_transition["at_ms"]
    ):
        state = loaded.get("state")
    in_progress = state in REBALANCING
    return {
        "protocol": protocol(events),
        "events": len(events),
        "rebalances": len(done),
        "rebalances_to_stable": sum(1 for r in done if r["state"] == "Stable"),
        "longest_rebalance_ms": max((r["duration_ms"] or 0 for r in done), default=None),
        "state": state,
        "generation": generation,
        "members": None if last_transition is None else member_count(last_transition, "members"),
        "rebalance_in_progress": in_progress,
        "first_ms": events[0].get("at_ms") if events else None,
        "last_ms": events[-1].get("at_ms") if events else None,
    }


def _names(e: Event, field: str, shorten: Callable[[str], str]) -> str:
    """The event's list ``field`` as prose; a list the record shortened says how much."""
    ids = [shorten(str(i)) for i in e.get(field) or ()]
    more = member_count(e, field) - len(ids)
    if more > 0:
        ids.append(f"and {more:,} more")
    return ", ".join(ids) if ids else "-"


def _prose(fields: dict[str, Any]) -> str:
    """An event of a kind this version does not know, as "name: value; ..." text."""
    parts = []
    for name, value in fields.items():
        if isinstance(value, list | tuple):
            value = ", ".join(map(str, value)) or "-"
        elif isinstance(value, dict):
            value = json.dumps(value, default=str)
        parts.append(f"{name.replace('_', ' ')}: {value}")
    return "; ".join(parts)


def describe_event(
    e: Event, shorten: Callable[[str], str], numbers: dict[int, int]
) -> tuple[str, str, str, str, str]:
    """(event, generation, members, took, detail) cells of one event."""
    kind = e.get("kind")
    gen = "" if e.get("generation") is None else str(e.get("generation"))
    if kind == STATE_TRANSITION:
        members = str(member_count(e, "members"))
        detail = shorten(str(e.get("reason") or ""))
        if e.get("to_state") == "CompletingRebalance" and e.get("leader"):
            detail += f" (leader {shorten(e['leader'])})"
        return f"{e.get('from_state')} → {e.get('to_state')}", gen, members, "", detail
    if kind == REBALANCE_COMPLETED:
        count = member_count(e, "joined") + member_count(e, "kept")
        parts = [
            f"{label}: {_names(e, label, shorten)}"
            for label in ("joined", "left", "kept")
            if member_count(e, label)
        ]
        from odradek.cli.render import duration

        number = numbers.get(id(e), 0)
        return (
            f"✔ rebalance #{number} done → {e.get('state')}",
            gen,
            str(count),
            duration(e.get("duration_ms")),
            " · ".join(parts) or "no members",
        )
    if kind == MEMBER_REMOVED:
        who = shorten(str(e.get("member_id")))
        if e.get("group_instance_id"):
            who += f" (instance {e['group_instance_id']})"
        return "member removed", gen, "", "", f"{who}: {shorten(str(e.get('reason') or ''))}"
    if kind == STATIC_MEMBER_REPLACED:
        return (
            "static member rejoined",
            gen,
            "",
            "",
            f"instance {e.get('instance_id')}: {shorten(str(e.get('old_member_id')))} → "
            f"{shorten(str(e.get('new_member_id')))} (in {e.get('state')})",
        )
    if kind == JOIN_PHASE_EXTENDED:
        return (
            "join phase extended",
            gen,
            str(member_count(e, "members")),
            "",
            "new members keep arriving: waiting for more",
        )
    if kind == GROUP_EPOCH_BUMPED:
        return (
            f"group epoch → {e.get('group_epoch')}",
            str(e.get("group_epoch", "")),
            str(e.get("members", "")),
            "",
            shorten("; ".join(e.get("reasons") or ())),
        )
    if kind == TARGET_ASSIGNMENT_COMPUTED:
        changed = e.get("members_changed", 0)
        return (
            "target assignment",
            str(e.get("assignment_epoch", "")),
            str(e.get("members", "")),
            "",
            f"by the {e.get('assignor')} assignor: {changed} member"
            f"{'s' if changed != 1 else ''} with a new target",
        )
    if kind == MEMBER_RECONCILED:
        owned = _assignment_label(e.get("assigned"))
        state = str(e.get("member_state") or "").replace("_", " ")
        detail = f"{shorten(str(e.get('member_id')))} {state}: owns {owned}"
        if e.get("revoking"):
            detail += f"; revoking {_assignment_label(e.get('revoking'))}"
        return "member reconciled", str(e.get("member_epoch", "")), "", "", detail
    if kind == GROUP_CONVERTED:
        epoch = e.get("group_epoch", e.get("generation"))
        detail = str(e.get("reason") or "online migration")
        return (
            f"converted {e.get('from_protocol')} → {e.get('to_protocol')}",
            "" if epoch is None else str(epoch),
            str(member_count(e, "members")),
            "",
            shorten(detail),
        )
    if kind == OFFSETS_EXPIRED:
        return "offsets expired", gen, "", "", _names(e, "partitions", str)
    if kind == GROUP_LOADED:
        return (
            "loaded by the coordinator",
            gen,
            str(member_count(e, "members")),
            "",
            f"{e.get('state')}, {e.get('offsets', 0)} committed offsets (broker start or failover)",
        )
    rest = {k: v for k, v in e.items() if k not in ("kind", "group", "at_ms", "sequence")}
    return str(kind).replace("_", " "), gen, "", "", shorten(_prose(rest))


def _assignment_label(assignment: Any) -> str:
    """``{"orders": [0, 1]}`` -> ``orders: 0, 1``."""
    if not isinstance(assignment, dict) or not assignment:
        return "nothing"
    return "; ".join(f"{t}: {', '.join(map(str, ps))}" for t, ps in assignment.items())


def render_timeline(out: Any, group: str, events: list[Event], *, wide: bool) -> None:
    from odradek.cli import render

    shorten = (lambda s: s) if wide else render.short_ids
    if not events:
        out.print(f"No rebalance history for group '{group}'.")
        return
    stamps = [e.get("at_ms", 0) for e in events]
    same_day = render.local_time(min(stamps))[:10] == render.local_time(max(stamps))[:10]
    numbers: dict[int, int] = {}
    for e in events:
        if e.get("kind") == REBALANCE_COMPLETED:
            numbers[id(e)] = len(numbers) + 1
    title = f"Rebalance history of group '{group}'"
    if same_day:
        title += f" on {render.local_time(min(stamps))[:10]}"
    t = render.table(
        "TIME",
        "EVENT",
        "GEN",
        "MEMBERS",
        "TOOK",
        "DETAIL",
        title=title,
        numeric=("GEN", "MEMBERS", "TOOK"),
    )
    for e in events:
        event, gen, members, took, detail = describe_event(e, shorten, numbers)
        style = ""
        if e.get("kind") == REBALANCE_COMPLETED:
            style = "bold green" if e.get("state") == "Stable" else "bold"
        elif e.get("kind") == STATE_TRANSITION:
            style = render.STATE_STYLES.get(str(e.get("to_state")), "")
        t.add_row(
            render.local_time(e.get("at_ms", 0), with_date=not same_day),
            render.text(event, style),
            gen,
            members,
            took,
            render.text(detail),
        )
    out.print(t)
    s = summary(events)
    count = s["rebalances"]
    line = f"{count} rebalance{'s' if count != 1 else ''} completed"
    if count:
        to_empty = count - s["rebalances_to_stable"]
        if to_empty:
            line += f" ({to_empty} ended with no members)"
        line += f", the longest took {render.duration(s['longest_rebalance_ms'])}"
    line += "."
    if s["state"]:
        line += f" Now {s['state']}"
        if s["generation"] is not None:
            epoch = "group epoch" if s["protocol"] == "consumer" else "generation"
            line += f", {epoch} {s['generation']}"
        if s["members"] is not None:
            line += f", {s['members']} member{'s' if s['members'] != 1 else ''}"
        line += "."
    if s["rebalance_in_progress"]:
        line += " A rebalance is in progress."
    out.print(line)
