"""Coordinator configuration, with Kafka's property names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

JAVA_INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Knobs of the classic group coordinator. Defaults are Kafka 4.0's."""

    # group.min.session.timeout.ms
    group_min_session_timeout_ms: int = 6_000
    # group.max.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000
    # group.initial.rebalance.delay.ms
    group_initial_rebalance_delay_ms: int = 3_000
    # group.max.size
    group_max_size: int = JAVA_INT_MAX
    # GroupCoordinator.NewMemberJoinTimeoutMs (a constant in Kafka, not a property)
    new_member_join_timeout_ms: int = 300_000
    # offsets.retention.minutes = 10080 (7 days), kept here in milliseconds
    offsets_retention_ms: int = 10_080 * 60_000
    # offsets.retention.check.interval.ms
    offsets_retention_check_interval_ms: int = 600_000
    # offset.metadata.max.bytes
    offset_metadata_max_bytes: int = 4_096
    # offsets.topic.num.partitions (used by the runtime for routing)
    offsets_topic_num_partitions: int = 50
