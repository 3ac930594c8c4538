"""A group's rebalance history, read from the broker's ``__odradek_group_events`` topic.

An Odradek broker appends every coordinator event to that topic as a JSON record keyed by
group id (docs/operations.md, "Rebalance history"), so any consumer can read it; here it is
read with Odradek's own client, in assign mode, without committing anything. Other
Kafka-compatible brokers have no such topic: ``groups history`` then says so, and
``groups describe`` reports generation and leader as unknown (DescribeGroups carries
neither).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from odradek.cli.common import API_TIMEOUT_S, Failed, client_settings, describe_error

EVENTS_TOPIC = "__odradek_group_events"

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

Event = dict[str, Any]


class NoHistory(Failed):
    """The broker keeps no history topic (not an Odradek broker)."""


def history_range(admin: Any) -> tuple[int, int]:
    """(log start, log end) of the history partition; NoHistory if there is no such topic."""
    from odradek.client.errors import KafkaError, UnknownTopicOrPartitionError

    try:
        described = admin.describe_topics([EVENTS_TOPIC])
    except UnknownTopicOrPartitionError:
        raise NoHistory(
            f"this broker keeps no rebalance history (it has no {EVENTS_TOPIC} topic; "
            "only Odradek brokers record one)"
        ) from None
    except KafkaError as exc:
        raise Failed(f"cannot read {EVENTS_TOPIC}: {describe_error(exc)}") from None
    part = described[EVENTS_TOPIC].partitions[0]
    return max(0, part.log_start_offset), max(0, part.log_end_offset)


def read_events(
    args: argparse.Namespace,
    group: str,
    start: int,
    stop: int,
    *,
    on_progress: Callable[[int], None] | None = None,
) -> list[Event]:
    """The group's events among offsets [start, stop) of the history topic, in order."""
    from odradek.client import Consumer, TopicPartition
    from odradek.client.errors import KafkaError

    if stop <= start:
        return []
    key = group.encode()
    tp = TopicPartition(EVENTS_TOPIC, 0)
    consumer = Consumer(
        auto_offset_reset="earliest",
        allow_auto_create_topics=False,
        max_poll_records=5_000,
        default_api_timeout_ms=int(API_TIMEOUT_S * 1000),
        **client_settings(args),
    )
    events: list[Event] = []
    position = start
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + API_TIMEOUT_S
        while position < stop:
            if time.monotonic() > deadline:
                raise Failed(f"reading {EVENTS_TOPIC} stalled at offset {position:,} of {stop:,}")
            records = consumer.poll(0.5)
            for r in records:
                if r.offset >= stop:
                    position = stop
                    break
                position = r.offset + 1
                if r.key != key:
                    continue
                try:
                    event = json.loads(r.value)
                except (TypeError, ValueError):
                    continue
                if isinstance(event, dict) and event.get("group", group) == group:
                    events.append(event)
            if records:
                deadline = time.monotonic() + API_TIMEOUT_S
                if on_progress is not None:
                    on_progress(position)
            else:
                position = max(position, consumer.position(tp))
    except KafkaError as exc:
        raise Failed(f"cannot read {EVENTS_TOPIC}: {describe_error(exc)}") from None
    finally:
        consumer.close()
    return events


def latest_facts(args: argparse.Namespace, admin: Any, group: str) -> dict[str, Any] | None:
    """Generation and leader from the group's newest events, reading the history topic
    backwards in growing windows (so a long history costs little). None when the broker
    keeps no history or it holds nothing on the group."""
    try:
        low, high = history_range(admin)
    except NoHistory:
        return None
    window = 1_000
    stop = high
    facts: dict[str, Any] = {}
    while stop > low:
        start = max(low, stop - window)
        for event in reversed(read_events(args, group, start, stop)):
            if "generation" not in facts and isinstance(event.get("generation"), int):
                facts["generation"] = event["generation"]
                facts["at_ms"] = event.get("at_ms")
            if "leader" not in facts and event.get("kind") == STATE_TRANSITION:
                facts["leader"] = event.get("leader")
            if "generation" in facts and "leader" in facts:
                return facts
        stop = start
        window *= 4
    return facts or None


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
        "members": None if last_transition is None else len(last_transition.get("members") or ()),
        "rebalance_in_progress": in_progress,
        "first_ms": events[0].get("at_ms") if events else None,
        "last_ms": events[-1].get("at_ms") if events else None,
    }


def _names(ids: list[str], shorten: Callable[[str], str]) -> str:
    return ", ".join(shorten(i) for i in ids) if ids else "-"


def describe_event(
    e: Event, shorten: Callable[[str], str], numbers: dict[int, int]
) -> tuple[str, str, str, str, str]:
    """(event, generation, members, took, detail) cells of one event."""
    kind = e.get("kind")
    gen = "" if e.get("generation") is None else str(e.get("generation"))
    if kind == STATE_TRANSITION:
        members = e.get("members") or []
        detail = shorten(str(e.get("reason") or ""))
        if e.get("to_state") == "CompletingRebalance" and e.get("leader"):
            detail += f" (leader {shorten(e['leader'])})"
        return f"{e.get('from_state')} → {e.get('to_state')}", gen, str(len(members)), "", detail
    if kind == REBALANCE_COMPLETED:
        members = len(e.get("joined") or ()) + len(e.get("kept") or ())
        parts = [
            f"{label}: {_names(e.get(label) or [], shorten)}"
            for label in ("joined", "left", "kept")
            if e.get(label)
        ]
        from odradek.cli.render import duration

        number = numbers.get(id(e), 0)
        return (
            f"✔ rebalance #{number} done → {e.get('state')}",
            gen,
            str(members),
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
            str(len(e.get("members") or ())),
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
            str(len(e.get("members") or ())),
            "",
            shorten(detail),
        )
    if kind == OFFSETS_EXPIRED:
        parts = e.get("partitions") or []
        return "offsets expired", gen, "", "", ", ".join(map(str, parts))
    if kind == GROUP_LOADED:
        return (
            "loaded by the coordinator",
            gen,
            str(len(e.get("members") or ())),
            "",
            f"{e.get('state')}, {e.get('offsets', 0)} committed offsets (broker start or failover)",
        )
    rest = {k: v for k, v in e.items() if k not in ("kind", "group", "at_ms")}
    return str(kind), gen, "", "", shorten(json.dumps(rest, default=str))


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
