"""Planning a consumer group's offset reset: ``odradek groups reset-offsets`` and the web
console's reset share it.

A reset is planned, shown, and only then committed. Kafka's tool (and Odradek's broker)
refuse the commit while the group has members, so the plan is refused up front too:
``refusal`` says why in one sentence. ``plan`` is pure: it takes the log bounds the
caller read (``read_bounds``) and the committed offsets, and keeps every new offset
within [log start, log end], as Kafka's ``kafka-consumer-groups --reset-offsets`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

# States in which a group's offsets may change: no member can commit over the reset.
INACTIVE_STATES = ("Empty", "Dead")
EARLIEST = -2  # ListOffsets' timestamps
LATEST = -1

TargetKind = Literal["earliest", "latest", "offset", "datetime", "shift"]
TARGET_KINDS: tuple[TargetKind, ...] = ("earliest", "latest", "offset", "datetime", "shift")


class ResetError(ValueError):
    """The reset cannot be planned (the message says why, in one line)."""


@dataclass(frozen=True, slots=True)
class ResetTarget:
    """Where to move each offset: ``value`` is the offset (``offset``), epoch milliseconds
    (``datetime``) or the distance (``shift``); unused for ``earliest`` and ``latest``."""

    kind: TargetKind
    value: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise ResetError(f"unknown reset target {self.kind!r}")
        if self.kind in ("offset", "datetime", "shift") and self.value is None:
            raise ResetError(f"a reset to {self.kind} needs a value")
        if self.kind == "offset" and self.value is not None and self.value < 0:
            raise ResetError("an offset is 0 or more")


def scope_partitions(
    scope: Mapping[str, list[int] | None], partition_counts: Mapping[str, int]
) -> list[tuple[str, int]]:
    """The (topic, partition) pairs a reset scope names (None: every partition of the
    topic), in order; a partition the topic does not have is a ResetError."""
    out = []
    for topic, wanted in scope.items():
        count = partition_counts[topic]
        for p in wanted if wanted is not None else range(count):
            if not 0 <= p < count:
                raise ResetError(f"topic '{topic}' has partitions 0-{count - 1}, not {p}")
            out.append((topic, p))
    return out


def parse_datetime(text: str) -> int:
    """An ISO 8601 time as epoch milliseconds (local time when it has no offset)."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ResetError(
            f"expected an ISO 8601 time like 2026-01-31T09:00:00, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def refusal(
    group_id: str, state: str, members: int, action: str = "reset the offsets"
) -> str | None:
    """Why the offsets of a group in ``state`` with ``members`` members may not change now,
    or None when they may."""
    if state in INACTIVE_STATES:
        return None
    return (
        f"cannot {action} of group '{group_id}': it is {state} with {members} "
        f"member{'s' if members != 1 else ''}; offsets can only be changed while the group "
        "is inactive (Empty): stop its consumers first"
    )


@dataclass(frozen=True, slots=True)
class LogBounds:
    """Per partition: log start, log end and (for a ``datetime`` target) the first offset
    at or after that time (None: no record that late)."""

    starts: Mapping[Any, int | None]
    ends: Mapping[Any, int | None]
    by_time: Mapping[Any, int | None]


def read_bounds(admin: Any, tps: Iterable[Any], target: ResetTarget) -> LogBounds:
    """The log bounds ``plan`` needs, with ListOffsets (client errors propagate)."""
    wanted = list(tps)

    def offsets(timestamp: int) -> dict[Any, int | None]:
        found = admin.list_offsets(dict.fromkeys(wanted, timestamp))
        return {tp: (o.offset if o is not None else None) for tp, o in found.items()}

    by_time = offsets(int(target.value or 0)) if target.kind == "datetime" else {}
    return LogBounds(offsets(EARLIEST), offsets(LATEST), by_time)


def plan(
    group_id: str,
    tps: Iterable[Any],
    target: ResetTarget,
    bounds: LogBounds,
    committed: Mapping[Any, int],
) -> dict[Any, int]:
    """The new offset of each partition of ``tps`` (objects with ``topic`` and
    ``partition``), kept within [log start, log end]. ``committed`` maps a partition to
    the group's committed offset; a shift needs one for every partition."""
    out: dict[Any, int] = {}
    for tp in tps:
        start = bounds.starts.get(tp)
        end = bounds.ends.get(tp)
        start = 0 if start is None else start
        end = 0 if end is None else end
        if target.kind == "earliest":
            new = start
        elif target.kind == "latest":
            new = end
        elif target.kind == "offset":
            new = int(target.value or 0)
        elif target.kind == "datetime":
            found = bounds.by_time.get(tp)
            new = end if found is None else found
        else:
            if tp not in committed:
                raise ResetError(
                    f"cannot shift {tp.topic}:{tp.partition}: group '{group_id}' has no "
                    "committed offset there"
                )
            new = committed[tp] + int(target.value or 0)
        out[tp] = min(max(new, start), end)
    return out
