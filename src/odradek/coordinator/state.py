"""Classic group states and the table of legal transitions (Kafka's ``validPreviousStates``)."""

from __future__ import annotations

from enum import StrEnum


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

VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
}


class IllegalStateTransition(RuntimeError):
    """A transition not in ``VALID_PREVIOUS_STATES``: a coordinator bug."""


def is_legal_transition(src: GroupState, dst: GroupState) -> bool:
    return src in VALID_PREVIOUS_STATES[dst]


def check_transition(src: GroupState, dst: GroupState) -> None:
    if not is_legal_transition(src, dst):
        raise IllegalStateTransition(f"illegal group state transition {src.value} -> {dst.value}")
