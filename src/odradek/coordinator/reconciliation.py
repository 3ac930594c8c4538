"""How one member moves towards its target assignment (Kafka's CurrentAssignmentBuilder).

The rule that makes KIP-848 safe without a group-wide barrier: **a partition is
given to a member only once its previous owner has revoked it**. So the
member's next state, from its current one, the target (epoch and partitions),
who owns what (``partition_epoch``: -1 for a free partition) and what the
member says it owns (its heartbeat's ``owned``; None when the heartbeat did
not say, which counts as "still owns everything"):

* ``kept = current ∩ target``; ``revoke = current - target``;
  ``assign = target - kept - (partitions another member still owns)``.
* Something to revoke that the member still owns → UNREVOKED_PARTITIONS at
  its **current** epoch, with only ``kept`` assigned: the member revokes, and
  its next heartbeat without those partitions lets it move on.
* Else it moves to the target epoch with ``kept + assign``: STABLE, or
  UNRELEASED_PARTITIONS while some of its target is still owned by others
  (it gets them on a later heartbeat, once they are released).

A member subscribed to neither a topic by name nor by a resolved regex gets
an empty target for it, even before the target assignment catches up.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from odradek.coordinator.consumer_group import ConsumerGroupMember, MemberState
from odradek.coordinator.metadata import Assignment, normalize

PartitionEpoch = Callable[[uuid.UUID, int], int]


class FencedMemberError(Exception):
    """The member must drop every partition and rejoin (FENCED_MEMBER_EPOCH)."""


def owns_any(owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None, revoke: Assignment) -> bool:
    """True if the member may still own one of ``revoke`` (None: it did not say)."""
    if owned is None:
        return True
    for topic_id, partitions in owned:
        pending = revoke.get(topic_id)
        if pending and any(p in pending for p in partitions):
            return True
    return False


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None,
    subscribed_topic_ids: set[uuid.UUID],
) -> ConsumerGroupMember:
    """The member's next state (the same object when nothing changes)."""
    owned_list = None if owned is None else [(t, list(ps)) for t, ps in owned]
    state = member.state
    epoch = member.member_epoch
    if state is MemberState.STABLE and epoch == target_epoch:
        return member
    if state is MemberState.UNREVOKED_PARTITIONS and owns_any(
        owned_list, member.pending_revocation
    ):
        return member  # still revoking
    if state is MemberState.UNKNOWN:
        # Written by a newer coordinator: start over from nothing.
        if owned_list is None or owned_list:
            raise FencedMemberError(
                f"member {member.member_id} is in an unknown state: it must drop its partitions"
            )
        epoch = target_epoch
    return _next(
        member, epoch, target_epoch, target, partition_epoch, owned_list, subscribed_topic_ids
    )


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: PartitionEpoch,
    owned: list[tuple[uuid.UUID, list[int]]] | None,
    subscribed_topic_ids: set[uuid.UUID],
) -> ConsumerGroupMember:
    current = member.assigned
    pending_by_me = member.pending_revocation
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    assign: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(current):
        wanted = (
            target.get(topic_id, frozenset()) if topic_id in subscribed_topic_ids else frozenset()
        )
        have = current.get(topic_id, frozenset())
        keep = have & wanted
        kept[topic_id] = keep
        revoke[topic_id] = have - keep
        mine_pending = pending_by_me.get(topic_id, frozenset())
        free = set()
        for p in wanted - keep:
            # A partition this member itself is revoking is not "someone else's".
            if partition_epoch(topic_id, p) != -1 and p not in mine_pending:
                unreleased = True
            else:
                free.add(p)
        assign[topic_id] = frozenset(free)
    kept_n, revoke_n, assign_n = normalize(kept), normalize(revoke), normalize(assign)
    if revoke_n and owns_any(owned, revoke_n):
        return member.move_to(member_epoch, MemberState.UNREVOKED_PARTITIONS, kept_n, revoke_n)
    assigned = dict(kept_n)
    for topic_id, partitions in assign_n.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.move_to(target_epoch, state, normalize(assigned), {})
