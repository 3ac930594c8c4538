"""Odradek's transaction coordinator core: pure, deterministic, event-sourced.

One :class:`TransactionCoordinatorShard` owns the transactional ids of one
``__transaction_state`` partition (``partition_for(transactional_id, n)``, as
Kafka routes them). Like the group coordinator it performs no I/O and reads no
clock: ``now_ms`` (monotonic, for deadlines and timers) and ``wall_ms`` (for
timestamps in records and id expiration) come in on every call, timers go out
through an injected ``Timer``, producer ids come from an injected
``ProducerIdSource``. Records are Kafka's ``TransactionLogKey`` /
``TransactionLogValue``; state is what replaying them gives. See
``odradek.transaction.shard`` for the calling convention and
``odradek.broker.txn_runtime`` for the runtime that appends records and writes
transaction markers.
"""

from odradek.coordinator.routing import partition_for
from odradek.protocol.errors import ErrorCode
from odradek.transaction.shard import (
    ProducerIdSource,
    TransactionCoordinatorShard,
    TxnMetadata,
    error_response,
    loading_response,
)
from odradek.transaction.state import TXN_TRANSITIONS, TxnState
from odradek.transaction.types import TxnConfig, TxnRecord, TxnResult

# The runtimes' former name of the one table of error codes, kept until broker/ imports
# ``ErrorCode`` itself: an alias, not a second table.
TxnError = ErrorCode

__all__ = [
    "TXN_TRANSITIONS",
    "ErrorCode",
    "ProducerIdSource",
    "TransactionCoordinatorShard",
    "TxnConfig",
    "TxnError",
    "TxnMetadata",
    "TxnRecord",
    "TxnResult",
    "TxnState",
    "error_response",
    "loading_response",
    "partition_for",
]
