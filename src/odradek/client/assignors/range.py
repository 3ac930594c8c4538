"""Java's ``RangeAssignor`` ("range").

Per topic, the members subscribed to it are sorted (static members by group instance id
first, then dynamic ones by member id) and the partitions 0..n-1 are cut into contiguous
ranges: with n partitions and c members each gets n // c, and the first n % c members get
one extra. Topics are handled independently, so with several topics the first members can
end up with several extra partitions (the well-known imbalance of this assignor).
Rack-aware range assignment (Java 3.5+) is not implemented.
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


class RangeAssignor(AbstractAssignor):
    name = "range"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def assign_partitions(
        self, cluster: Cluster, subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartitionPair]]:
        out: dict[str, list[TopicPartitionPair]] = {m: [] for m in subscriptions}
        members_per_topic: dict[str, list[str]] = {}
        for member in sorted_members(subscriptions):
            for topic in dict.fromkeys(subscriptions[member].topics):
                members_per_topic.setdefault(topic, []).append(member)
        for topic in sorted(members_per_topic, key=java_key):
            n = partitions_for(cluster, topic)
            if n == 0:
                continue
            members = members_per_topic[topic]
            per_member, extra = divmod(n, len(members))
            start = 0
            for i, member in enumerate(members):
                length = per_member + (1 if i < extra else 0)
                out[member].extend((topic, p) for p in range(start, start + length))
                start += length
        return out
