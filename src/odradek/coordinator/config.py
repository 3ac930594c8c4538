"""Coordinator configuration, with Kafka's property names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

JAVA_INT_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Knobs of the group coordinator (classic and consumer groups). Defaults are Kafka 4.0's."""

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
    # offsets.topic.num.partitions: the core never reads it (the runtime routes with its
    # own count); kept only while broker/group_runtime.py still passes it.
    offsets_topic_num_partitions: int = 50
    # max.message.bytes of the group's __consumer_offsets partition (the runtime passes
    # the partition's own): the largest batch one call may write. A classic group's
    # record must fit it (JoinGroup answers GROUP_MAX_SIZE_REACHED to a member that
    # would not); events are written only while they fit beside the call's records.
    max_message_bytes: int = 1_048_588
    # group.history.retention.ms (Odradek's): events older than this are tombstoned
    group_history_retention_ms: int = 7 * 24 * 3_600_000

    # --- consumer groups (KIP-848) ---
    # group.consumer.session.timeout.ms
    consumer_group_session_timeout_ms: int = 45_000
    # group.consumer.heartbeat.interval.ms
    consumer_group_heartbeat_interval_ms: int = 5_000
    # group.consumer.max.size
    consumer_group_max_size: int = JAVA_INT_MAX
    # group.consumer.assignors: the server-side assignors; the first is the default
    consumer_group_assignors: tuple[str, ...] = ("uniform", "range")
    # group.consumer.migration.policy: disabled, upgrade, downgrade or bidirectional
    consumer_group_migration_policy: str = "bidirectional"

    def __post_init__(self) -> None:
        if self.consumer_group_migration_policy not in MIGRATION_POLICIES:
            raise ValueError(
                f"group.consumer.migration.policy must be one of {sorted(MIGRATION_POLICIES)}, "
                f"not {self.consumer_group_migration_policy!r}"
            )
        if not self.consumer_group_assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")

    @property
    def upgrade_enabled(self) -> bool:
        """A classic group may become a consumer group when a consumer-protocol member joins."""
        return self.consumer_group_migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        """A consumer group whose last consumer-protocol member leaves becomes classic again."""
        return self.consumer_group_migration_policy in ("downgrade", "bidirectional")


MIGRATION_POLICIES = frozenset({"disabled", "upgrade", "downgrade", "bidirectional"})
