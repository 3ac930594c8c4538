"""The states of a transactional id (Kafka's ``TransactionState``), with their ids and names.

The id is what ``__transaction_state`` records store; the name is what
DescribeTransactions and ListTransactions report.
"""

from __future__ import annotations

from enum import Enum


class TxnState(Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def label(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_label(cls, label: str) -> TxnState | None:
        for state in cls:
            if state.label == label:
                return state
        return None

    @property
    def expirable(self) -> bool:
        """Kafka's ``isExpirationAllowed``: an idle transactional id here may be forgotten."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def preparing(self) -> bool:
        """Ended by the producer or the coordinator; markers are being written."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


S = TxnState

# Kafka's validPreviousStates, by target state.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class IllegalTransition(Exception):
    """A transition Kafka's state table does not allow: a bug, never a client error."""


def check_transition(src: TxnState, dst: TxnState) -> None:
    if src not in VALID_PREVIOUS[dst]:
        raise IllegalTransition(f"transaction state {src.label} cannot become {dst.label}")
