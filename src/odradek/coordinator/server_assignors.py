"""The server-side assignors of consumer groups (``group.consumer.assignors``).

Pure functions from the members (their subscribed topic ids and their current
target, for stickiness) and the subscribed topics' partition counts to a new
target assignment. Behaviour follows Kafka 4.0's assignors:

* ``uniform`` (the default): every partition of every subscribed topic goes to
  one member subscribed to its topic, the members' counts differ by at most one
  where their subscriptions allow it, and a member keeps as many of its
  current partitions as that balance lets it (sticky), so a member joining or
  leaving moves only the partitions it must.
* ``range``: per topic, the members subscribed to it (static members first by
  instance id, then by member id) get consecutive ranges of its partitions,
  the first ``partitions % members`` one more. Co-partitioned topics land on
  the same member; it is not sticky.

Ties are broken by member id and topic id so the result is deterministic.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from odradek.coordinator.metadata import Assignment

UNIFORM = "uniform"
RANGE = "range"


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    topics: frozenset[uuid.UUID]  # the existing topics it subscribes to
    current: Assignment = field(default_factory=dict)  # its current target


Partition = tuple[uuid.UUID, int]
ServerAssignor = Callable[
    [Mapping[str, MemberSpec], Mapping[uuid.UUID, int]], dict[str, Assignment]
]


def _freeze(owned: Mapping[str, list[Partition]]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for member_id, parts in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, p in parts:
            by_topic.setdefault(topic_id, set()).add(p)
        out[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


def _topic_key(topic_id: uuid.UUID) -> bytes:
    return topic_id.bytes


# --- uniform ----------------------------------------------------------------------------


def uniform(
    members: Mapping[str, MemberSpec], partition_counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    if not members:
        return {}
    subscriptions = {frozenset(m.topics & partition_counts.keys()) for m in members.values()}
    if len(subscriptions) == 1:
        return _uniform_homogeneous(members, partition_counts, subscriptions.pop())
    return _uniform_heterogeneous(members, partition_counts)


def _all_partitions(
    topics: frozenset[uuid.UUID] | set[uuid.UUID], counts: Mapping[uuid.UUID, int]
) -> list[Partition]:
    return [(t, p) for t in sorted(topics, key=_topic_key) for p in range(counts[t])]


def _uniform_homogeneous(
    members: Mapping[str, MemberSpec],
    counts: Mapping[uuid.UUID, int],
    topics: frozenset[uuid.UUID],
) -> dict[str, Assignment]:
    order = sorted(members)
    partitions = _all_partitions(topics, counts)
    valid = set(partitions)
    min_quota, extra = divmod(len(partitions), len(order))
    owned: dict[str, list[Partition]] = {m: [] for m in order}
    taken: set[Partition] = set()
    leftovers: dict[str, list[Partition]] = {}
    # Stickiness: each member keeps up to its quota of what it has.
    for m in order:
        current = sorted(
            (tp for t, ps in members[m].current.items() for tp in ((t, p) for p in ps)),
            key=lambda tp: (_topic_key(tp[0]), tp[1]),
        )
        mine = [tp for tp in current if tp in valid and tp not in taken]
        keep, rest = mine[:min_quota], mine[min_quota:]
        owned[m] = keep
        taken.update(keep)
        if rest:
            leftovers[m] = rest
    # The members with more than the minimum keep one more, while extra slots remain.
    for m in order:
        if extra == 0:
            break
        rest = leftovers.get(m)
        if rest and rest[0] not in taken:
            owned[m].append(rest[0])
            taken.add(rest[0])
            extra -= 1
    free = [tp for tp in partitions if tp not in taken]
    # Fill everyone up to the minimum, then hand the remaining extras out one each.
    it = iter(free)
    for m in order:
        while len(owned[m]) < min_quota:
            owned[m].append(next(it))
    for m in order:
        if extra == 0:
            break
        if len(owned[m]) == min_quota:
            tp = next(it, None)
            if tp is None:
                break
            owned[m].append(tp)
            extra -= 1
    return _freeze(owned)


def _uniform_heterogeneous(
    members: Mapping[str, MemberSpec], counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    order = sorted(members)
    subscribers: dict[uuid.UUID, list[str]] = {}
    for m in order:
        for t in members[m].topics:
            if t in counts:
                subscribers.setdefault(t, []).append(m)
    partitions = _all_partitions(set(subscribers), counts)
    owner: dict[Partition, str] = {}
    load = dict.fromkeys(order, 0)
    # Stickiness first: current partitions a member may still have.
    for m in order:
        for t, ps in members[m].current.items():
            if t not in subscribers or m not in subscribers[t]:
                continue
            for p in ps:
                tp = (t, p)
                if p < counts[t] and tp not in owner:
                    owner[tp] = m
                    load[m] += 1
    # Then the free partitions, each to its least loaded subscriber.
    for tp in partitions:
        if tp not in owner:
            m = min(subscribers[tp[0]], key=lambda x: (load[x], x))
            owner[tp] = m
            load[m] += 1
    # Balance: move a partition from a member to an eligible one with two fewer,
    # until no such move exists (each move lowers the sum of squared loads).
    by_member: dict[str, list[Partition]] = {m: [] for m in order}
    for tp in partitions:
        by_member[owner[tp]].append(tp)
    moved = True
    while moved:
        moved = False
        for m in sorted(order, key=lambda x: (-load[x], x)):
            for tp in list(by_member[m]):
                target = min(subscribers[tp[0]], key=lambda x: (load[x], x))
                if load[target] + 1 < load[m]:
                    by_member[m].remove(tp)
                    by_member[target].append(tp)
                    load[m] -= 1
                    load[target] += 1
                    moved = True
    return _freeze(by_member)


# --- range ------------------------------------------------------------------------------


def _range_order(members: Mapping[str, MemberSpec], member_ids: list[str]) -> list[str]:
    def key(m: str) -> tuple[int, str]:
        instance = members[m].instance_id
        return (0, instance) if instance is not None else (1, m)

    return sorted(member_ids, key=key)


def range_(
    members: Mapping[str, MemberSpec], partition_counts: Mapping[uuid.UUID, int]
) -> dict[str, Assignment]:
    owned: dict[str, list[Partition]] = {m: [] for m in members}
    subscribers: dict[uuid.UUID, list[str]] = {}
    for m, spec in members.items():
        for t in spec.topics:
            if t in partition_counts:
                subscribers.setdefault(t, []).append(m)
    for t in sorted(subscribers, key=_topic_key):
        order = _range_order(members, subscribers[t])
        quota, extra = divmod(partition_counts[t], len(order))
        start = 0
        for i, m in enumerate(order):
            n = quota + (1 if i < extra else 0)
            owned[m].extend((t, p) for p in range(start, start + n))
            start += n
    return _freeze(owned)


ASSIGNORS: dict[str, ServerAssignor] = {UNIFORM: uniform, RANGE: range_}


def get_server_assignor(name: str) -> ServerAssignor:
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise ValueError(
            f"unknown server assignor {name!r} (known: {', '.join(sorted(ASSIGNORS))})"
        ) from None
