"""Where a partition's leader is now, told with a "not the leader here" answer (KIP-951).

A Produce (v10+) or Fetch (v16+) refused with NOT_LEADER_OR_FOLLOWER (Fetch also
FENCED_LEADER_EPOCH) names the partition's current leader and epoch, and the response
lists those leaders' endpoints on the request's listener, so a client moves to the
new leader without a Metadata round trip first. As Kafka 4.1's KafkaApis
(getCurrentLeader): the leader as this broker's metadata knows it, -1 / -1 when the
partition is unknown, and an endpoint only for a live leader with that listener.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode

PRODUCE_HINTS_FROM = 10
FETCH_HINTS_FROM = 16
PRODUCE_HINTED = frozenset({int(ErrorCode.NOT_LEADER_OR_FOLLOWER)})
FETCH_HINTED = frozenset(
    {int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH)}
)


@dataclass
class LeaderHints:
    """The leaders named in one response, and their endpoints (by node id)."""

    ctx: RequestContext
    endpoints: dict[int, dict[str, Any]] = field(default_factory=dict)

    def current_leader(self, topic: str, partition: int) -> dict[str, int]:
        """{leader_id, leader_epoch} of the partition; its leader's endpoint recorded."""
        control = self.ctx.broker.control
        if not control.lists_topic(topic):
            return {"leader_id": -1, "leader_epoch": -1}
        info = control.partition_info(topic, partition)
        if info.leader >= 0 and info.leader not in self.endpoints:
            for b in control.live_brokers(self.ctx.listener_name):
                if b.node_id == info.leader:
                    self.endpoints[b.node_id] = {
                        "node_id": b.node_id,
                        "host": b.host,
                        "port": b.port,
                        "rack": b.rack,
                    }
        return {"leader_id": info.leader, "leader_epoch": info.leader_epoch}

    def node_endpoints(self) -> list[dict[str, Any]]:
        return [self.endpoints[n] for n in sorted(self.endpoints)]
