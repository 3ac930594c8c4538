"""Java's ``RoundRobinAssignor`` ("roundrobin").

All partitions of all subscribed topics, sorted by topic then partition, are dealt in turn
to the members sorted like Java's ``MemberInfo`` (static members by group instance id
first, then by member id), cycling through the members and skipping a member that does not
subscribe to the partition's topic. With identical subscriptions the counts differ by at
most one.
"""

from __future__ import annotations

from collections.abc import Mapping

from odradek.client.assignors.base import (
    AbstractAssignor,
    Cluster,
    RebalanceProtocol,
    java_key,
    partitions_for,
    sorted_members,
)
from odradek.protocol.consumer_protocol import Subscription, TopicPartitionPair


class RoundRobinAssignor(AbstractAssignor):
    name = "roundrobin"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def assign_partitions(
        self, cluster: Cluster, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartitionPair]]:
        out: dict[str, list[TopicPartitionPair]] = {m: [] for m in subscriptions}
        members = sorted_members(subscriptions)
        if not members:
            return out
        topic_sets = [frozenset(subscriptions[m].topics) for m in members]
        all_topics = sorted(frozenset().union(*topic_sets), key=java_key)
        lists = [out[m] for m in members]
        size = len(members)
        pos = 0  # the circular iterator's cursor
        for topic in all_topics:
            n = partitions_for(cluster, topic)
            for p in range(n):
                # Someone subscribes to every topic in all_topics, so this terminates.
                while topic not in topic_sets[pos]:
                    pos = (pos + 1) % size
                lists[pos].append((topic, p))
                pos = (pos + 1) % size
        return out
