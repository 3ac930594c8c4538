"""OffsetForLeaderEpoch: where a leader epoch ends in the leader's log (KIP-101, KIP-320).

A follower asks after a leader change, with the latest epoch in its own log, and
truncates what lies past the answer (a suffix the new leader never had). A
consumer asks after a leader change to check that its position still exists
(KIP-320). The answer is the largest epoch at most the one asked about, and the
start offset of the next higher epoch (the log end for the latest epoch), or -1
and -1 when the log knows nothing that old (`PartitionLog.end_offset_for_epoch`).

Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER otherwise), and a
request naming a current leader epoch other than the leader's is refused with
FENCED_LEADER_EPOCH (older) or UNKNOWN_LEADER_EPOCH (newer), as Fetch does.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode


def _answer(ctx: RequestContext, topic: str, partition: Any, refusal: int) -> dict[str, Any]:
    index = int(partition.partition)
    entry = {"error_code": refusal, "partition": index, "leader_epoch": -1, "end_offset": -1}
    if refusal:
        return entry
    plog = ctx.broker.topics.partition(topic, index)
    if plog is None:
        entry["error_code"] = ctx.broker.topics.absent_error(topic, index)
        return entry
    current = int(getattr(partition, "current_leader_epoch", -1))
    _, refused = ctx.broker.replicas.leader_for(topic, index, current)
    if refused:
        entry["error_code"] = refused
        return entry
    epoch, end = plog.end_offset_for_epoch(int(partition.leader_epoch))
    entry["leader_epoch"], entry["end_offset"] = epoch, end
    return entry


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    replica_id = int(getattr(request, "replica_id", -1))
    # Followers as for their Fetch (the inter-broker listener, CLUSTER_ACTION);
    # consumers DESCRIBE on the topic.
    follower_refused = replica_id >= 0 and not ctx.may_act_as_replica()
    topics = []
    for t in request.topics:
        if follower_refused:
            refusal = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        elif replica_id < 0 and not ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic
        ):
            refusal = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        else:
            refusal = ErrorCode.NONE
        topics.append(
            {
                "topic": t.topic,
                "partitions": [_answer(ctx, t.topic, p, refusal) for p in t.partitions],
            }
        )
    return respond(ctx, {"throttle_time": NO_THROTTLE, "topics": topics})
