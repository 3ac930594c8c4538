"""Classic group states and their table of legal transitions (Kafka's ``ClassicGroupState``)."""

from __future__ import annotations

from enum import StrEnum

from odradek.coordinator.transitions import TransitionTable


class GroupState(StrEnum):
    # No members; offsets may remain. A new member's join moves to PreparingRebalance.
    EMPTY = "Empty"
    # Waiting for members to (re)join; JoinGroup responses are parked.
    PREPARING_REBALANCE = "PreparingRebalance"
    # Join phase done; waiting for the leader's SyncGroup with the assignment.
    COMPLETING_REBALANCE = "CompletingRebalance"
    # Assignment stored and handed out; heartbeats keep members alive.
    STABLE = "Stable"
    # Deleted, expired or unloaded; the group is about to disappear.
    DEAD = "Dead"


S = GroupState

# Kafka's validPreviousStates, by target state. ``ClassicGroup.transition_to`` checks
# every change against it. A group starts Empty; one rebuilt from its record (a
# load) or from a consumer group (a downgrade) starts Stable, or Empty without
# members, as Kafka's ``fromRecord`` / ``fromConsumerGroup`` build them.
CLASSIC_GROUP_TRANSITIONS: TransitionTable[GroupState] = TransitionTable(
    "classic group",
    {
        S.EMPTY: {S.PREPARING_REBALANCE},  # the join phase ended with nobody
        S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},  # a rebalance
        S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},  # every member rejoined
        S.STABLE: {S.COMPLETING_REBALANCE},  # the leader's SyncGroup
        # Deleted (Empty), or unloaded from any state.
        S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
    },
    initial={S.EMPTY, S.STABLE},
    label=lambda state: state.value,
)


def can_rebalance(state: GroupState) -> bool:
    """Whether a group in ``state`` may start a rebalance (Kafka's ``canRebalance``)."""
    return CLASSIC_GROUP_TRANSITIONS.allows(state, S.PREPARING_REBALANCE)
