"""ListOffsets: earliest, latest (the log end offset), max timestamp, or by time.

With ``isolation_level=1`` (read_committed, v2+) latest is the last stable
offset and a lookup by time or max timestamp finds only offsets below it, as
Kafka answers.

Only the partition's leader answers, in the leader epoch the request names, and
latest is at most its high watermark (the replica layer's answers; a lone node's
is its log end).

v8 adds earliest-local (-4) and v9 latest-tiered (-5) for tiered storage (KIP-405,
KIP-1005). Odradek has no tiered storage, so it answers as Kafka does for a topic
without it: the local log start is the log start, and nothing is tiered (-1).
"""

from __future__ import annotations

from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_COMMITTED = 1


def _lookup(
    ctx: RequestContext,
    topic: str,
    requested: Any,
    describable: bool,
    read_committed: bool,
) -> dict[str, Any]:
    partition = int(requested.partition_index)
    timestamp = int(requested.timestamp)
    entry: dict[str, Any] = {
        "partition_index": partition,
        "error_code": 0,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": 0,
        "old_style_offsets": (),
    }
    if not describable:
        entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        entry["leader_epoch"] = -1
        return entry
    plog = ctx.broker.topics.partition(topic, partition)
    if plog is None:
        entry["error_code"] = ctx.broker.topics.absent_error(topic, partition)
        entry["leader_epoch"] = -1
        return entry
    current_epoch = int(getattr(requested, "current_leader_epoch", -1))
    replica, refusal = ctx.broker.replicas.leader_for(topic, partition, current_epoch)
    if replica is None:
        entry["error_code"] = refusal
        entry["leader_epoch"] = -1
        return entry
    fetchable = plog.last_stable_offset if read_committed else plog.end_offset
    fetchable = min(fetchable, replica.high_watermark)
    entry["leader_epoch"] = replica.leader_epoch
    if timestamp == LATEST:
        entry["offset"] = fetchable
    elif timestamp in (EARLIEST, EARLIEST_LOCAL):
        entry["offset"] = plog.start_offset
    elif timestamp == LATEST_TIERED:
        entry["leader_epoch"] = -1
    else:
        found = (
            plog.max_timestamp()
            if timestamp == MAX_TIMESTAMP
            else plog.offset_for_timestamp(timestamp)
        )
        if found is not None and found[0] < fetchable:
            entry["offset"], entry["timestamp"] = found
    return entry


@handles(ApiKey.LIST_OFFSETS, 1, 10)
def list_offsets(ctx: RequestContext, request: Any) -> Any:
    read_committed = int(getattr(request, "isolation_level", 0)) == READ_COMMITTED
    topics = []
    for t in request.topics:
        describable = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        partitions = [_lookup(ctx, t.name, p, describable, read_committed) for p in t.partitions]
        topics.append({"name": t.name, "partitions": partitions})
    return respond(ctx, {"throttle_time": NO_THROTTLE, "topics": topics})
