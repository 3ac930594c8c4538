"""Java's ``StickyAssignor`` ("sticky") and ``CooperativeStickyAssignor`` ("cooperative-sticky").

Both compute the same balanced, sticky plan (see :mod:`._sticky`); they differ in where a
member's previous assignment comes from and in what the leader hands out:

* "sticky" (KIP-54, EAGER only): members revoke everything before joining, so the previous
  assignment and its generation travel in the subscription's user data
  (``StickyAssignorUserData`` v1, the format Java and kafka-python use). The plan is handed
  out as is.
* "cooperative-sticky" (KIP-429, COOPERATIVE and EAGER): members keep their partitions while
  rebalancing and report them in the subscription's ``owned_partitions`` with the
  ``generation_id`` (v2+; older subscriptions carry the generation as a 4-byte user data).
  A partition that moves from one member to another is left out of the new owner's
  assignment in this round: the old owner sees it gone, revokes it and rejoins, and the
  follow-up rebalance gives it to the new owner, who by then is its only claimant.

Rack-aware placement (Java 3.5+, KIP-881) is not implemented: the assignor input has no
partition replica racks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from odradek.client.assignors._sticky import (
    MemberData,
    sticky_plan,
    withhold_transfers,
)
from odradek.client.assignors.base import (
    AbstractAssignor,
    Cluster,
    RebalanceProtocol,
)
from odradek.protocol.consumer_protocol import (
    DEFAULT_GENERATION,
    Assignment,
    Subscription,
    TopicPartitionPair,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
)


class StickyAssignor(AbstractAssignor):
    """KIP-54 sticky assignor (EAGER)."""

    name = "sticky"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def __init__(self) -> None:
        self._member_assignment: list[TopicPartitionPair] | None = None
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        if self._member_assignment is None:
            return None
        return encode_sticky_user_data(self._member_assignment, self._generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self._member_assignment = assignment.topic_partitions()
        self._generation = generation

    @staticmethod
    def member_data(subscription: Subscription) -> MemberData:
        # An eager member has revoked everything before joining: only the user data counts.
        partitions, generation = decode_sticky_user_data(subscription.user_data)
        return MemberData(partitions, generation)

    def assign_partitions(
        self, cluster: Cluster, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartitionPair]]:
        data = {m: self.member_data(s) for m, s in subscriptions.items()}
        plan, _ = sticky_plan(cluster, subscriptions, data)
        return plan


@dataclass(frozen=True, slots=True)
class CooperativePlan:
    """What the cooperative-sticky leader decided in one rebalance."""

    target: dict[str, list[TopicPartitionPair]]
    """The balanced assignment the group converges to."""
    round_one: dict[str, list[TopicPartitionPair]]
    """What is handed out now: ``target`` minus the partitions still owned by others."""
    transferring: dict[TopicPartitionPair, str]
    """Held-back partition -> member it will go to after its owner revokes it."""


class CooperativeStickyAssignor(AbstractAssignor):
    """KIP-429 cooperative sticky assignor."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE)

    def __init__(self) -> None:
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        # Only read by leaders that get subscription v0/v1 (no generation_id field).
        return encode_cooperative_user_data(self._generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self._generation = generation

    @staticmethod
    def member_data(subscription: Subscription) -> MemberData:
        owned = subscription.owned()
        if subscription.generation is not None:
            return MemberData(owned, subscription.generation)
        return MemberData(owned, decode_cooperative_user_data(subscription.user_data))

    def plan(self, cluster: Cluster, subscriptions: Mapping[str, Subscription]) -> CooperativePlan:
        data = {m: self.member_data(s) for m, s in subscriptions.items()}
        target, conflicted = sticky_plan(cluster, subscriptions, data)
        round_one, transferring = withhold_transfers(target, data, conflicted)
        return CooperativePlan(target, round_one, transferring)

    def assign_partitions(
        self, cluster: Cluster, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartitionPair]]:
        return self.plan(cluster, subscriptions).round_one
