"""The rebalance listener interface (callbacks run by the group coordinator)."""

from __future__ import annotations

from odradek.client.structs import TopicPartition


class ConsumerRebalanceListener:
    """Override what you need; the defaults do nothing.

    Called on the consumer's thread inside ``poll``. ``on_partitions_lost``
    defaults to ``on_partitions_revoked``, as in the Java client.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Partitions taken away in a rebalance (commit their offsets here)."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Partitions added by a rebalance (seek here to restore external offsets)."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Partitions lost without a clean revocation (another member may own them now)."""
        self.on_partitions_revoked(lost)
