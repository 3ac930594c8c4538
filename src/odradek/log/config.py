"""Per-partition log configuration, named after the Kafka topic configs it mirrors."""

from __future__ import annotations

from dataclasses import dataclass

from odradek.protocol.records import DEFAULT_MAX_DECOMPRESSED_BYTES

__all__ = ["LogConfig"]

_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class LogConfig:
    """Immutable log settings; the broker maps ``--set segment.bytes=...`` onto these."""

    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms
    retention_ms: int = 604800000  # retention.ms (-1 = keep forever)
    retention_bytes: int = -1  # retention.bytes (-1 = unlimited)
    index_interval_bytes: int = 4096  # index.interval.bytes
    flush_messages: int = _LONG_MAX  # flush.messages (fsync after this many messages)
    flush_ms: int = _LONG_MAX  # flush.ms
    max_message_bytes: int = 1048588  # max.message.bytes
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type: or "LogAppendTime"
    # cleanup.policy: "delete" | "compact" | "compact,delete" | "" (neither: kept forever)
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86400000  # delete.retention.ms: how long tombstones survive
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    # message.decompressed.max.bytes (broker-wide, no Kafka equivalent): the most one
    # compressed batch may inflate to, at produce time and wherever the log decodes one
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES

    def __post_init__(self) -> None:
        if self.segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        if self.segment_bytes > 2**31 - 1:
            raise ValueError("segment_bytes must fit a u32 index position (Kafka: int32)")
        if self.segment_ms < 1:
            raise ValueError("segment_ms must be positive")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError(f"unknown message_timestamp_type {self.message_timestamp_type!r}")
        if self.max_decompressed_bytes < 1:
            raise ValueError("max_decompressed_bytes must be positive")
        if self.delete_retention_ms < 0:
            raise ValueError("delete_retention_ms must be >= 0")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError("min_cleanable_dirty_ratio must be within [0, 1]")
        policies = {p.strip() for p in self.cleanup_policy.split(",") if p.strip()}
        if not policies <= {"delete", "compact"}:
            raise ValueError(f"unknown cleanup_policy {self.cleanup_policy!r}")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def delete_enabled(self) -> bool:
        """Time/size retention applies only when the policy includes ``delete``."""
        return "delete" in self.cleanup_policy

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self.cleanup_policy
