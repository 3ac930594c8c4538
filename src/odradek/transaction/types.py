"""Neutral requests, responses and results of the transaction coordinator core.

Not wire types: the broker translates each API version into them and back.
Error codes are Kafka's numbers (``odradek.protocol.errors.ErrorCode``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RequestToken = Any
TopicPartition = tuple[str, int]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32767  # Short.MaxValue: epochs stop one below it so a fence always fits


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The broker settings the core reads (Kafka's names in the comments)."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    expiration_check_interval_ms: int = 3_600_000  # ...remove.expired.transaction.cleanup...
    num_partitions: int = 50  # transaction.state.log.num.partitions


# --- requests -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    transactional_id: str
    timeout_ms: int
    # v3+ (KIP-360): the producer's current id and epoch, to bump after an error.
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class AddPartitionsRequest:
    """AddPartitionsToTxn, and AddOffsetsToTxn (the group's ``__consumer_offsets`` partition)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True, slots=True)
class DescribeTransactionsRequest:
    transactional_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListTransactionsRequest:
    states: tuple[str, ...] = ()
    producer_ids: tuple[int, ...] = ()
    duration_ms: int = -1  # v1: only transactions running longer than this
    id_pattern: str | None = None  # v2: a regular expression the id must match


Request = (
    InitProducerIdRequest
    | AddPartitionsRequest
    | EndTxnRequest
    | DescribeTransactionsRequest
    | ListTransactionsRequest
)


# --- responses ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class AddPartitionsResponse:
    """One error for every partition of the request (Kafka answers them all alike)."""

    error_code: int
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class EndTxnResponse:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    transactional_id: str
    error_code: int
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    start_ms: int = -1
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeTransactionsResponse:
    transactions: tuple[DescribedTransaction, ...]


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ListTransactionsResponse:
    error_code: int
    transactions: tuple[ListedTransaction, ...] = ()
    unknown_state_filters: tuple[str, ...] = ()


Response = (
    InitProducerIdResponse
    | AddPartitionsResponse
    | EndTxnResponse
    | DescribeTransactionsResponse
    | ListTransactionsResponse
)


# --- results ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """One ``__transaction_state`` record (None value: tombstone)."""

    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """COMMIT or ABORT markers to write to every partition of a transaction; when they all
    are, the runtime calls ``markers_written`` and the transaction completes."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class TxnEvent:
    """A structured observation (transaction ended, timed out, producer fenced...)."""

    kind: str
    transactional_id: str
    fields: dict[str, Any]


@dataclass(slots=True)
class TxnResult:
    """What one call produced. Append ``records`` (one batch if ``atomic``), replay each,
    then send ``responses`` and start ``markers``."""

    records: list[TxnRecord] = field(default_factory=list)
    responses: list[tuple[RequestToken, Response]] = field(default_factory=list)
    markers: list[MarkerJob] = field(default_factory=list)
    events: list[TxnEvent] = field(default_factory=list)
    atomic: bool = True
