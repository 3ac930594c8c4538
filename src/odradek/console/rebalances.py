"""A group's rebalances as spans on a timeline, their causes, and who owned what when.

Two sources, one shape (``Span``):

* Odradek's coordinator records every event of a group in the group's own
  ``__consumer_offsets`` partition (``odradek.coordinator.history``); the spans are the
  CLI's reading of them (``odradek.cli.history.rebalances``), each with its reasons, which
  ``cause_of`` names.
* Any other Kafka-compatible broker records none, so, as monitoring tools do, the spans
  are inferred from what the console observed (``infer``): the states ListGroups and
  DescribeGroups reported, and the generations and member sets of the group's metadata
  records. A rebalance seen only through a new generation has an unknown start: its span
  is then the time between the two observations around it (``start_known`` is False).

``lanes`` turns ownership changes (a member owns these partitions from this moment)
into one swimlane per member, cut where a rebalance stopped the member's partitions:
all of them under an eager assignor, only those it gave up under a cooperative one.
Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Causes, in the words the timeline shows. A rebalance may have several.
JOIN = "join"
LEAVE = "leave"
SESSION_TIMEOUT = "session timeout"
POLL_TIMEOUT = "max.poll.interval exceeded"
METADATA_CHANGE = "metadata change"
STATIC_REPLACED = "static member replaced"
REBALANCE_TIMEOUT = "rebalance timeout"
OTHER = "other"
REBALANCING_STATES = frozenset(
    {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}
)
SETTLED_STATES = frozenset({"Stable", "Empty"})
COOPERATIVE_ASSIGNORS = frozenset({"cooperative-sticky"})


def cause_of(reason: str) -> str:
    """The cause a coordinator's reason for a rebalance names (Odradek's and Kafka's
    wordings; a client's own reason, e.g. Java's "consumer poll timeout has expired",
    follows "client reason:")."""
    r = reason.lower()
    if "poll timeout" in r or "max.poll.interval" in r or "max_poll_interval" in r:
        return POLL_TIMEOUT
    if "session timed out" in r or "session expired" in r or "session timeout" in r:
        return SESSION_TIMEOUT
    if "static member" in r and ("rejoined" in r or "replaced" in r):
        return STATIC_REPLACED
    if "left the group" in r or "leaving" in r:
        return LEAVE
    if "rebalance timeout" in r or "did not sync" in r or "did not rejoin" in r:
        return REBALANCE_TIMEOUT
    if (
        "protocol" in r
        or "subscription" in r
        or "subscribed" in r
        or "regex" in r
        or "metadata" in r
        or "partitions" in r
    ):
        return METADATA_CHANGE
    if (
        "new member" in r
        or "joined" in r
        or "joining" in r
        or "new group" in r
        or "re-joining" in r
    ):
        return JOIN
    return OTHER


def causes_of(reasons: Iterable[str]) -> list[str]:
    out: list[str] = []
    for reason in reasons:
        cause = cause_of(str(reason))
        if cause not in out:
            out.append(cause)
    return out


@dataclass(slots=True)
class Span:
    number: int
    generation: int | None
    started_ms: int
    completed_ms: int | None  # None: still in progress
    joined: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    state: str | None = None  # where it ended (Stable or Empty)
    start_known: bool = True
    source: str = "events"  # or "inferred"
    # Partitions of members removed by a timeout: when they were last committed, before
    # the rebalance began (they had stopped since then).
    stalled_since: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def duration_ms(self) -> int | None:
        return None if self.completed_ms is None else self.completed_ms - self.started_ms

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "generation": self.generation,
            "started_ms": self.started_ms,
            "completed_ms": self.completed_ms,
            "duration_ms": self.duration_ms,
            "state": self.state,
            "causes": list(self.causes),
            "reasons": list(self.reasons),
            "joined": list(self.joined),
            "left": list(self.left),
            "kept": list(self.kept),
            "start_known": self.start_known,
            "source": self.source,
            "stalled_since_ms": min(self.stalled_since.values(), default=None),
        }


def from_events(events: Sequence[dict[str, Any]]) -> list[Span]:
    """Spans from Odradek's recorded events (dicts as ``StoredEvent.as_dict`` gives), with
    the rebalance in progress, if any, as a last span without an end."""
    from odradek.cli.history import REBALANCE_COMPLETED, REBALANCING, STATE_TRANSITION, rebalances

    spans = []
    for r in rebalances(list(events)):
        spans.append(
            Span(
                number=r["number"],
                generation=r["generation"],
                started_ms=int(r["started_ms"] or 0),
                completed_ms=r["completed_ms"],
                joined=r["joined"],
                left=r["left"],
                kept=r["kept"],
                reasons=[str(x) for x in r["reasons"]],
                causes=causes_of(r["reasons"]),
                state=r["state"],
            )
        )
    # In progress: transitions since the last completed rebalance, the newest into a
    # rebalancing state. It started with the first of them.
    since = [
        e
        for e in events[_after_last(events, REBALANCE_COMPLETED) :]
        if e.get("kind") == STATE_TRANSITION
    ]
    if since and since[-1].get("to_state") in REBALANCING:
        reasons = [str(since[0].get("reason") or "")]
        spans.append(
            Span(
                number=len(spans) + 1,
                generation=since[-1].get("generation"),
                started_ms=int(since[0].get("at_ms") or 0),
                completed_ms=None,
                reasons=reasons,
                causes=causes_of(reasons),
            )
        )
    return spans


def _after_last(events: Sequence[dict[str, Any]], kind: str) -> int:
    """The index just after the last event of ``kind`` (0 if none)."""
    for i in range(len(events) - 1, -1, -1):
        if events[i].get("kind") == kind:
            return i + 1
    return 0


@dataclass(frozen=True, slots=True)
class Observation:
    """What the console saw of a group at one moment. ``members`` None: not known (a
    ListGroups answer carries states only)."""

    at_ms: int
    state: str
    generation: int | None = None
    members: frozenset[str] | None = None


def infer(observations: Sequence[Observation]) -> list[Span]:
    """Rebalances inferred from observations, oldest first (for brokers without events)."""
    spans: list[Span] = []
    settled_members: frozenset[str] | None = None
    settled_generation: int | None = None
    settled_at: int | None = None
    open_span: Span | None = None
    for o in sorted(observations, key=lambda o: o.at_ms):
        if o.state in REBALANCING_STATES:
            if open_span is None:
                open_span = Span(len(spans) + 1, None, o.at_ms, None, source="inferred", reasons=[])
            continue
        if o.state not in SETTLED_STATES:
            continue
        new_generation = (
            o.generation is not None
            and settled_generation is not None
            and o.generation > settled_generation
        )
        if open_span is None and new_generation and settled_at is not None:
            # Missed the rebalancing state between two polls: only its bounds are known.
            open_span = Span(
                len(spans) + 1, None, settled_at, None, source="inferred", start_known=False
            )
        if open_span is not None:
            open_span.completed_ms = o.at_ms
            open_span.generation = o.generation
            open_span.state = o.state
            if o.members is not None and settled_members is not None:
                open_span.joined = sorted(o.members - settled_members)
                open_span.left = sorted(settled_members - o.members)
                open_span.kept = sorted(o.members & settled_members)
            elif o.members is not None:
                open_span.joined = sorted(o.members)
            causes = []
            if open_span.joined:
                causes.append(JOIN)
            if open_span.left:
                causes.append(LEAVE)
            open_span.causes = causes or [METADATA_CHANGE]
            open_span.reasons = [
                "inferred from the member sets before and after"
                if o.members is not None and settled_members is not None
                else "inferred from the group's states"
            ]
            spans.append(open_span)
            open_span = None
        if o.members is not None:
            settled_members = o.members
        if o.generation is not None:
            settled_generation = o.generation
        settled_at = o.at_ms
    if open_span is not None:
        open_span.causes = [OTHER]
        open_span.reasons = ["in progress"]
        spans.append(open_span)
    return spans


# --- swimlanes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ownership:
    """From ``at_ms`` on, ``member`` owns ``partitions`` (empty: nothing, or gone)."""

    at_ms: int
    member: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Segment:
    start_ms: int
    end_ms: int
    partitions: tuple[tuple[str, int], ...]
    stopped: bool  # the partitions were not consumed: a rebalance had taken them


@dataclass(slots=True)
class Lane:
    member: str
    segments: list[Segment] = field(default_factory=list)


def owners_at(changes: Iterable[Ownership], at_ms: int) -> dict[str, tuple[tuple[str, int], ...]]:
    """Who owned what at ``at_ms`` (the changes in time order)."""
    owned: dict[str, tuple[tuple[str, int], ...]] = {}
    for c in sorted(changes, key=lambda c: c.at_ms):
        if c.at_ms > at_ms:
            break
        owned[c.member] = c.partitions
    return {m: tps for m, tps in owned.items() if tps}


def lanes(
    changes: Sequence[Ownership],
    spans: Sequence[Span],
    *,
    eager: bool,
    now_ms: int,
) -> list[Lane]:
    """One lane per member, oldest member first: owned segments between changes, and the
    parts of them a rebalance stopped (eager: everything the member owned, from the span's
    start to its end; cooperative: only what it gave up; a member a timeout removed: from
    its last commit)."""
    by_member: dict[str, list[Ownership]] = {}
    for c in sorted(changes, key=lambda c: c.at_ms):
        by_member.setdefault(c.member, []).append(c)
    out = []
    for member, owned in by_member.items():
        lane = Lane(member)
        for i, c in enumerate(owned):
            end = owned[i + 1].at_ms if i + 1 < len(owned) else now_ms
            after = owned[i + 1].partitions if i + 1 < len(owned) else c.partitions
            if not c.partitions or end <= c.at_ms:
                continue
            lane.segments.extend(_cut(c, end, after, spans, eager))
        out.append(lane)
    return out


def _cut(
    c: Ownership, end: int, after: tuple[tuple[str, int], ...], spans: Sequence[Span], eager: bool
) -> list[Segment]:
    """The segment [c.at_ms, end) split where a rebalance stopped some of its partitions."""
    pieces: list[Segment] = []
    cursor = c.at_ms
    for s in spans:
        stop_end = s.completed_ms if s.completed_ms is not None else end
        begin = s.started_ms
        if c.member in s.left:
            stalled = [s.stalled_since[tp] for tp in c.partitions if tp in s.stalled_since]
            begin = min([begin, *stalled])
        if stop_end <= cursor or begin >= end:
            continue
        start = max(begin, cursor)
        finish = min(stop_end, end)
        stopped = c.partitions if eager else tuple(p for p in c.partitions if p not in after)
        if not stopped or finish <= start:
            continue
        if start > cursor:
            pieces.append(Segment(cursor, start, c.partitions, False))
        running = tuple(p for p in c.partitions if p not in stopped)
        if running:
            pieces.append(Segment(start, finish, running, False))
        pieces.append(Segment(start, finish, stopped, True))
        cursor = finish
    if cursor < end:
        pieces.append(Segment(cursor, end, c.partitions, False))
    return pieces


# A sync's record may be stamped a little after the rebalance's completion event.
SETTLE_MS = 1_000


def stopped_partitions(
    changes: Sequence[Ownership], span: Span, *, eager: bool
) -> list[tuple[str, int]]:
    """The partitions ``span`` stopped: everything owned when it began under an eager
    assignor; under a cooperative one, those that had another owner (or none) after it."""
    if span.completed_ms is None:
        return []
    before = owners_at(changes, span.started_ms)
    after = owners_at(changes, span.completed_ms + SETTLE_MS)
    owner_before = {p: m for m, ps in before.items() for p in ps}
    owner_after = {p: m for m, ps in after.items() for p in ps}
    if eager:
        return sorted(owner_before)
    return sorted(p for p, m in owner_before.items() if owner_after.get(p) != m)
