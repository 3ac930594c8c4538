"""Durable partitioned log: segments, sparse indexes, recovery, retention, idempotence.

See ``odradek.log.partition_log`` for the durability / flush policy and recovery.
"""

from odradek.log.compaction import CompactionStats
from odradek.log.config import LogConfig
from odradek.log.errors import (
    CorruptRecordError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    LogError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from odradek.log.partition_log import AppendInfo, PartitionLog
from odradek.log.producer_state import BatchMetadata, ProducerEntry, ProducerStateManager

__all__ = [
    "AppendInfo",
    "BatchMetadata",
    "CompactionStats",
    "CorruptRecordError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "LogConfig",
    "LogError",
    "MessageTooLargeError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionLog",
    "ProducerEntry",
    "ProducerStateManager",
    "UnknownProducerIdError",
]
