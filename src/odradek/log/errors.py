"""Errors raised by the partition log, each carrying the Kafka error code to answer with.

``LogError`` is the same class as ``odradek.protocol.records.RecordError``: the
record-validation errors live in the protocol layer (which cannot import the log
package), and defining the base once keeps ``except LogError`` catching them too.
"""

from __future__ import annotations

from typing import ClassVar

from odradek.protocol.records import CorruptRecordError, InvalidRecordError
from odradek.protocol.records import RecordError as LogError

__all__ = [
    "CorruptRecordError",
    "CorruptSegmentError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTxnStateError",
    "LogClosedError",
    "LogError",
    "MessageTooLargeError",
    "OffsetMismatchError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "UnknownProducerIdError",
]


class CorruptSegmentError(CorruptRecordError):
    """CORRUPT_MESSAGE (2): the offset lies in a quarantined (corrupt) part of a segment.

    ``resume_offset`` is the first offset after the damage, where reading can go on
    (the coordinator's replay does; a fetch reports the error to the consumer).
    """

    def __init__(self, message: str, *, resume_offset: int) -> None:
        super().__init__(message)
        self.resume_offset = resume_offset


class OffsetOutOfRangeError(LogError):
    """OFFSET_OUT_OF_RANGE (1): the offset is below the log start or past the log end."""

    error_code: ClassVar[int] = 1


class OffsetMismatchError(LogError):
    """A follower's fetched batches do not continue its log: the first base offset is not
    the log end offset, or the batches' offsets overlap or leave a gap. Nothing was
    written. Internal to replication (Kafka's UnexpectedAppendOffsetException /
    OffsetsOutOfOrderException), so it maps to UNKNOWN_SERVER_ERROR."""


class LogClosedError(LogError, ValueError):
    """The partition's log was closed under the caller: a log-dir move swapped in its
    copy, or the replica was dropped. Nothing was written, so a producer may retry:
    NOT_LEADER_OR_FOLLOWER (6) sends it to refresh its metadata and send again (Kafka
    holds appends during the swap instead). A ValueError too, as before."""

    error_code: ClassVar[int] = 6


class MessageTooLargeError(LogError):
    """MESSAGE_TOO_LARGE (10): a batch is larger than max.message.bytes."""

    error_code: ClassVar[int] = 10


class InvalidTimestampError(LogError):
    """INVALID_TIMESTAMP (32): reserved for timestamp-difference checks."""

    error_code: ClassVar[int] = 32


class OutOfOrderSequenceError(LogError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER (45): idempotent producer skipped or reused a sequence."""

    error_code: ClassVar[int] = 45


class DuplicateSequenceError(LogError):
    """DUPLICATE_SEQUENCE_NUMBER (46): kept for completeness; duplicates are answered as success."""

    error_code: ClassVar[int] = 46


class InvalidProducerEpochError(LogError):
    """INVALID_PRODUCER_EPOCH (47): a batch from an older (fenced) producer epoch."""

    error_code: ClassVar[int] = 47


class UnknownProducerIdError(LogError):
    """UNKNOWN_PRODUCER_ID (59): kept for completeness; modern Kafka no longer returns it."""

    error_code: ClassVar[int] = 59


class InvalidTxnStateError(LogError):
    """INVALID_TXN_STATE (48): a producer's write does not fit its transaction state (a
    non-transactional batch inside an open transaction, or a transactional batch for a
    partition its coordinator never added to the transaction)."""

    error_code: ClassVar[int] = 48
