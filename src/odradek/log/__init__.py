"""Durable partitioned log: segments, sparse indexes, recovery, retention, idempotence.

See ``odradek.log.partition_log`` for the durability / flush policy and recovery.
"""

from odradek.log.compaction import CompactionStats
from odradek.log.config import LogConfig
from odradek.log.errors import (
    CorruptRecordError,
    CorruptSegmentError,
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
from odradek.log.files import FileCache, set_max_open_files, shared_file_cache
from odradek.log.partition_log import AppendInfo, PartitionLog
from odradek.log.producer_state import BatchMetadata, ProducerEntry, ProducerStateManager
from odradek.log.segment import Damage

__all__ = [
    "AppendInfo",
    "BatchMetadata",
    "CompactionStats",
    "CorruptRecordError",
    "CorruptSegmentError",
    "Damage",
    "DuplicateSequenceError",
    "FileCache",
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
    "set_max_open_files",
    "shared_file_cache",
]
