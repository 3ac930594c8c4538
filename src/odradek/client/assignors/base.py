"""The partition-assignor interface and helpers shared by the built-in assignors.

An assignor runs on the group leader: it gets the partition count of every topic the group
subscribes to and each member's :class:`Subscription`, and returns one :class:`Assignment`
per member. It is a pure function of its input (no I/O, no clock, no randomness); the only
state an assignor keeps is what :meth:`Assignor.on_assignment` tells it about its own last
assignment, which it may put into its next subscription's user data.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from odradek.protocol.consumer_protocol import (
    Assignment,
    Subscription,
    TopicPartitionPair,
)

Cluster = Mapping[str, int]
"""Topic name -> partition count (partitions are 0 .. count-1)."""


class RebalanceProtocol(enum.IntEnum):
    """Java's ``ConsumerPartitionAssignor.RebalanceProtocol`` (ids as in Java)."""

    EAGER = 0
    COOPERATIVE = 1


@runtime_checkable
class Assignor(Protocol):
    """What the consumer needs from a partition assignor (custom ones implement this).

    ``name`` is the protocol name sent in JoinGroup; ``supported_protocols`` lists the
    rebalance protocols the assignor can run under. Plain class attributes satisfy both.
    """

    @property
    def name(self) -> str: ...

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]: ...

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        """User data to put into this member's next subscription (None = null)."""
        ...

    def assign(
        self, cluster: Cluster, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """Leader only: one assignment per member id in ``subscriptions``."""
        ...

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        """Called on every member when SyncGroup hands it its assignment."""
        ...


class AbstractAssignor(ABC):
    """Convenience base: implement :meth:`assign_partitions` on flat (topic, partition) pairs.

    Like Java's ``AbstractPartitionAssignor``, topics a member subscribes to that are not in
    ``cluster`` (no metadata yet) are skipped, and every member gets an assignment, possibly
    empty. Partitions in the returned assignments are grouped by topic, topics and partitions
    in ascending order.
    """

    name: str = ""
    supported_protocols: tuple[RebalanceProtocol, ...] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        return None

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        return None

    @abstractmethod
    def assign_partitions(
        self, cluster: Cluster, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartitionPair]]:
        """Member id -> the (topic, partition) pairs it gets."""

    def assign(
        self, cluster: Cluster, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        raw = self.assign_partitions(cluster, subscriptions)
        return {
            member: to_assignment(raw.get(member, ()), self.assignment_user_data(member))
            for member in subscriptions
        }

    def assignment_user_data(self, member_id: str) -> bytes | None:
        """User data to put into ``member_id``'s assignment (None = null)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def to_assignment(partitions: Iterable[TopicPartitionPair], user_data: bytes | None) -> Assignment:
    """An Assignment with partitions grouped by topic, both sorted."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        lst = by_topic.get(topic)
        if lst is None:
            by_topic[topic] = [p]
        else:
            lst.append(p)
    grouped = tuple(
        (topic, tuple(sorted(by_topic[topic]))) for topic in sorted(by_topic, key=java_key)
    )
    return Assignment(grouped, user_data)


def java_key(s: str) -> bytes:
    """Sort key ordering strings like Java's ``String.compareTo`` (UTF-16 code units)."""
    return s.encode("utf-16-be", "surrogatepass")


def member_sort_key(member_id: str, group_instance_id: str | None) -> tuple[int, bytes]:
    """Java's ``MemberInfo`` order: static members (by instance id) before dynamic (by id)."""
    if group_instance_id is not None:
        return (0, java_key(group_instance_id))
    return (1, java_key(member_id))


def sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Member ids in Java's ``MemberInfo`` order."""
    return sorted(
        subscriptions, key=lambda m: member_sort_key(m, subscriptions[m].group_instance_id)
    )


def partitions_for(cluster: Cluster, topic: str) -> int:
    """Partition count of ``topic``; 0 when the cluster does not know it."""
    n = cluster.get(topic)
    return n if n is not None and n > 0 else 0


def select_rebalance_protocol(assignors: Sequence[Assignor]) -> RebalanceProtocol:
    """The protocol a consumer with these assignors uses (Java's ConsumerCoordinator rule).

    The highest protocol that every configured assignor supports; an error when none is
    common to all.
    """
    if not assignors:
        raise ValueError("no partition assignor configured")
    common = set(RebalanceProtocol)
    for a in assignors:
        common &= set(a.supported_protocols)
    if not common:
        names = [a.name for a in assignors]
        raise ValueError(f"assignors {names} support no common rebalance protocol")
    return max(common)


def cooperative_violations(
    subscriptions: Mapping[str, Subscription], assignments: Mapping[str, Assignment]
) -> dict[TopicPartitionPair, tuple[str, str]]:
    """Partitions added to a member while another member still owns them.

    This is the check Java's leader runs for the COOPERATIVE protocol
    (``ConsumerCoordinator.validateCooperativeAssignment``): a partition newly assigned to
    member X (not in X's owned partitions) must not be in any other member's owned
    partitions, because that member has not revoked it yet. Returns
    ``{partition: (new_owner, current_owner)}``; empty means the assignment is valid.
    """
    claims: dict[TopicPartitionPair, list[str]] = {}
    for member, sub in subscriptions.items():
        for tp in sub.owned():
            claims.setdefault(tp, []).append(member)
    bad: dict[TopicPartitionPair, tuple[str, str]] = {}
    for member, assignment in assignments.items():
        for tp in assignment.topic_partitions():
            holders = claims.get(tp)
            if holders and member not in holders:
                bad[tp] = (member, holders[0])
    return bad
