"""The plan shared by the sticky and cooperative-sticky assignors (Java's AbstractStickyAssignor).

Goals, in order: (1) balance — with identical subscriptions the member counts differ by at
most one; otherwise no partition can move to a member subscribed to its topic that has at
least two fewer partitions than its current owner (the check in Java's own tests);
(2) stickiness — keep as much of each member's previous assignment as possible.

Previous ownership comes from each member's :class:`MemberData` (user data for "sticky",
owned partitions for "cooperative-sticky"). Claims on topics a member no longer subscribes
to, on unknown topics or on partitions that no longer exist are dropped. When several members
claim one partition the one with the highest generation keeps it; when the highest
generation is shared, nobody keeps it (Java invalidates such claims the same way).

Identical subscriptions (Java's ``constrainedAssign``), with P partitions and C members,
q = P // C, r = P % C: members keep their owned partitions up to their quota — q + 1 for
the r members with the most owned partitions that have more than q, q for the rest — then
the unassigned partitions (in topic, partition order) are dealt round-robin to members below
q (sorted by id), and what is left goes one each to members holding exactly q. This keeps the
largest possible number of owned partitions, so the partitions that move are exactly those
that balance forces off their owners (plus those nobody owns).

Other subscriptions (Java's ``generalAssign``, by a different method): keep owned
partitions; deal each unassigned partition, topics with the fewest subscribers first, to the
subscriber with the fewest partitions; then, topic by topic, while the fullest holder of a
topic's partitions has two or more partitions more than the emptiest subscriber of the topic,
move one (a newly dealt one when the holder has any, so owned ones move last). Every move
lowers the sum of squared counts, so this ends, and it ends balanced in the sense above.
Everything is O((P + sum of subscriptions) log C) apart from the balancing moves.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from odradek.client.assignors.base import Cluster, java_key, partitions_for
from odradek.protocol.consumer_protocol import (
    DEFAULT_GENERATION,
    Subscription,
    TopicPartitionPair,
)


@dataclass(frozen=True, slots=True)
class MemberData:
    """What a member previously owned, and in which generation (None = unknown)."""

    partitions: Sequence[TopicPartitionPair]
    generation: int | None


def resolve_ownership(
    cluster: Cluster,
    members: Sequence[str],
    topics_of: Mapping[str, frozenset[str]],
    member_data: Mapping[str, MemberData],
) -> tuple[dict[str, list[TopicPartitionPair]], set[TopicPartitionPair]]:
    """Valid previous ownership per member, and the partitions with tied claims.

    Returns ``(owned, conflicted)``: ``owned[m]`` keeps m's claim order.
    """
    best: dict[TopicPartitionPair, tuple[int, str]] = {}
    conflicted: set[TopicPartitionPair] = set()
    claims: dict[str, list[TopicPartitionPair]] = {}
    for m in members:
        md = member_data[m]
        gen = DEFAULT_GENERATION if md.generation is None else md.generation
        subscribed = topics_of[m]
        valid: list[TopicPartitionPair] = []
        for tp in dict.fromkeys(md.partitions):
            topic, p = tp
            if topic not in subscribed or not 0 <= p < cluster[topic]:
                continue
            valid.append(tp)
            cur = best.get(tp)
            if cur is None or gen > cur[0]:
                best[tp] = (gen, m)
                conflicted.discard(tp)
            elif gen == cur[0]:
                conflicted.add(tp)
        claims[m] = valid
    owned = {
        m: [tp for tp in claims[m] if best[tp][1] == m and tp not in conflicted] for m in members
    }
    return owned, conflicted


def sticky_plan(
    cluster: Cluster,
    subscriptions: Mapping[str, Subscription],
    member_data: Mapping[str, MemberData],
) -> tuple[dict[str, list[TopicPartitionPair]], set[TopicPartitionPair]]:
    """The balanced, sticky assignment (before any cooperative adjustment).

    Returns ``(plan, conflicted)``; ``conflicted`` holds the partitions claimed by several
    members of the same (highest) generation.
    """
    members = sorted(subscriptions, key=java_key)
    if not members:
        return {}, set()
    topics_of = {
        m: frozenset(t for t in subscriptions[m].topics if partitions_for(cluster, t) > 0)
        for m in members
    }
    owned, conflicted = resolve_ownership(cluster, members, topics_of, member_data)
    first = topics_of[members[0]]
    if all(topics_of[m] == first for m in members):
        return _constrained(cluster, members, first, owned), conflicted
    return _general(cluster, members, topics_of, owned), conflicted


def _constrained(
    cluster: Cluster,
    members: list[str],
    topics: frozenset[str],
    owned: dict[str, list[TopicPartitionPair]],
) -> dict[str, list[TopicPartitionPair]]:
    all_partitions = [(t, p) for t in sorted(topics, key=java_key) for p in range(cluster[t])]
    quota, extra = divmod(len(all_partitions), len(members))
    assignment: dict[str, list[TopicPartitionPair]] = {}
    taken: set[TopicPartitionPair] = set()
    # Members owning the most get the q + 1 slots (stable sort keeps id order on ties).
    slots = extra
    for m in sorted(members, key=lambda m: -len(owned[m])):
        o = owned[m]
        keep = quota
        if len(o) > quota and slots > 0:
            keep = quota + 1
            slots -= 1
        kept = o[:keep]
        assignment[m] = kept
        taken.update(kept)
    unassigned = iter([tp for tp in all_partitions if tp not in taken])
    under = [m for m in members if len(assignment[m]) < quota]
    while under:
        still: list[str] = []
        for m in under:
            lst = assignment[m]
            lst.append(next(unassigned))
            if len(lst) < quota:
                still.append(m)
        under = still
    rest = list(unassigned)
    if rest:
        at_quota = (m for m in members if len(assignment[m]) == quota)
        for tp, m in zip(rest, at_quota, strict=False):
            assignment[m].append(tp)
    return {m: assignment[m] for m in members}


def _general(
    cluster: Cluster,
    members: list[str],
    topics_of: Mapping[str, frozenset[str]],
    owned: dict[str, list[TopicPartitionPair]],
) -> dict[str, list[TopicPartitionPair]]:
    keys = {m: java_key(m) for m in members}
    subscribers: dict[str, list[str]] = {}
    for m in members:
        for t in topics_of[m]:
            subscribers.setdefault(t, []).append(m)
    topic_order = sorted(subscribers, key=lambda t: (len(subscribers[t]), java_key(t)))

    count = {m: 0 for m in members}
    # Partition numbers each member holds per topic: previously owned, and newly dealt.
    kept: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    fresh: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    taken: set[TopicPartitionPair] = set()
    for m in members:
        for tp in owned[m]:
            kept[m].setdefault(tp[0], []).append(tp[1])
            taken.add(tp)
        count[m] = len(owned[m])

    # Deal unassigned partitions to the least loaded subscriber.
    for t in topic_order:
        free = [p for p in range(cluster[t]) if (t, p) not in taken]
        if not free:
            continue
        heap = [(count[m], keys[m], m) for m in subscribers[t]]
        heapq.heapify(heap)
        for p in free:
            c, k, m = heap[0]
            fresh[m].setdefault(t, []).append(p)
            count[m] = c + 1
            heapq.heapreplace(heap, (c + 1, k, m))

    def holds(m: str, t: str) -> bool:
        return bool(fresh[m].get(t)) or bool(kept[m].get(t))

    # Balance: move partitions of a topic from its fullest holder to its emptiest subscriber.
    moved = True
    while moved:
        moved = False
        for t in topic_order:
            subs = subscribers[t]
            if len(subs) < 2:
                continue
            low = [(count[m], keys[m], m) for m in subs]
            high = [(-count[m], keys[m], m) for m in subs if holds(m, t)]
            heapq.heapify(low)
            heapq.heapify(high)
            while True:
                while low and low[0][0] != count[low[0][2]]:
                    heapq.heappop(low)
                while high and (-high[0][0] != count[high[0][2]] or not holds(high[0][2], t)):
                    heapq.heappop(high)
                if not low or not high:
                    break
                b = low[0][2]
                a = high[0][2]
                if count[a] - count[b] < 2:
                    break
                src = fresh[a].get(t)
                if not src:
                    src = kept[a][t]
                p = src.pop()
                fresh[b].setdefault(t, []).append(p)
                count[a] -= 1
                count[b] += 1
                heapq.heappush(low, (count[a], keys[a], a))
                heapq.heappush(low, (count[b], keys[b], b))
                if holds(a, t):
                    heapq.heappush(high, (-count[a], keys[a], a))
                heapq.heappush(high, (-count[b], keys[b], b))
                moved = True

    out: dict[str, list[TopicPartitionPair]] = {}
    for m in members:
        lst: list[TopicPartitionPair] = []
        for t, ps in kept[m].items():
            lst.extend((t, p) for p in ps)
        for t, ps in fresh[m].items():
            lst.extend((t, p) for p in ps)
        out[m] = lst
    return out


def withhold_transfers(
    plan: Mapping[str, list[TopicPartitionPair]],
    member_data: Mapping[str, MemberData],
    conflicted: set[TopicPartitionPair],
) -> tuple[dict[str, list[TopicPartitionPair]], dict[TopicPartitionPair, str]]:
    """KIP-429: hold back the partitions whose current owner has to revoke them first.

    A partition is held back from member m when m did not own it and another member does
    (it is moving), or when several members of one generation claimed it (all of them must
    let go first, as in Java). Returns ``(round_one, transferring)``; ``transferring`` maps
    each held-back partition to the member it is planned for. Its owner finds it missing from
    its assignment, revokes it and rejoins, and the next rebalance hands it over.
    """
    claimed_by: dict[TopicPartitionPair, set[str]] = {}
    for m, md in member_data.items():
        for tp in md.partitions:
            holders = claimed_by.get(tp)
            if holders is None:
                claimed_by[tp] = {m}
            else:
                holders.add(m)
    round_one: dict[str, list[TopicPartitionPair]] = {}
    transferring: dict[TopicPartitionPair, str] = {}
    for m, lst in plan.items():
        keep: list[TopicPartitionPair] = []
        for tp in lst:
            holders = claimed_by.get(tp)
            if holders is None or (m in holders and tp not in conflicted):
                keep.append(tp)
            else:
                transferring[tp] = m
        round_one[m] = keep
    return round_one, transferring
