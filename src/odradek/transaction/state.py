"""The states of a transactional id (Kafka's ``TransactionState``): ids, names, transitions.

The id is what ``__transaction_state`` records store; the name is what
DescribeTransactions and ListTransactions report; ``TXN_TRANSITIONS`` is the table
of legal transitions.
"""

from __future__ import annotations

from enum import Enum

from odradek.coordinator.transitions import TransitionTable


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
        """Kafka's ``isExpirationAllowed``: an idle transactional id here may be forgotten
        (exactly the states it may die from)."""
        return TXN_TRANSITIONS.allows(self, TxnState.DEAD)

    @property
    def preparing(self) -> bool:
        """Ended by the producer or the coordinator; markers are being written."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


S = TxnState

# Kafka's validPreviousStates, by target state, for transaction version 1 (the one
# Odradek speaks: Kafka 4.1 also lets PrepareAbort follow Empty, CompleteCommit and
# CompleteAbort, for transaction version 2's EndTxn when the client is unsure).
# ``TxnMetadata.transit`` checks every change against it. Odradek fences a producer by
# going Ongoing -> PrepareAbort with the epoch bumped in one record, so
# PrepareEpochFence, which Kafka's records may hold, is in the table but never entered.
# Dead is never written either: an expired id's record is a tombstone, once its state
# allows it (``expirable``). A transactional id starts Empty.
TXN_TRANSITIONS: TransitionTable[TxnState] = TransitionTable(
    "transaction",
    {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},  # InitProducerId
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},  # AddPartitions
        S.PREPARE_COMMIT: {S.ONGOING},  # EndTxn(commit)
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},  # EndTxn(abort), a fence
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},  # every marker written
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},  # every marker written
        S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},  # expired
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    },
    initial={S.EMPTY},
    label=lambda state: state.label,
)
