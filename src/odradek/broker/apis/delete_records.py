"""DeleteRecords: advance partitions' log start offsets (kafka-delete-records.sh).

Records below the new log start offset are gone for readers at once: Fetch
answers OFFSET_OUT_OF_RANGE below it and ListOffsets earliest returns it.
Whole segments below it are deleted; the offset itself is kept in the
partition's `log-start-offset` file, so it survives a restart. As in Kafka,
offset -1 means the high watermark (delete everything), a larger offset is
OFFSET_OUT_OF_RANGE, internal topics are refused with INVALID_TOPIC_EXCEPTION,
and topics whose cleanup.policy lacks `delete` with POLICY_VIOLATION. With an
authorizer, DELETE on the topic is needed (TOPIC_AUTHORIZATION_FAILED). Only the
leader deletes, below its high watermark; followers follow its log start offset
from their fetches.
"""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.log.errors import LogError
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.delete_records")

HIGH_WATERMARK = -1


def _delete(ctx: RequestContext, name: str, index: int, offset: int) -> dict[str, Any]:
    result: dict[str, Any] = {"partition_index": index, "low_watermark": -1, "error_code": 0}
    if not ctx.authorize(AclOperation.DELETE, ResourceType.TOPIC, name):
        result["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return result
    topic = ctx.broker.topics.get(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return result
    if topic.internal:
        result["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
        return result
    plog = topic.partitions[index]
    if plog is None:  # no replica here: the client's metadata is stale
        result["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return result
    if not plog.config.delete_enabled:
        result["error_code"] = ErrorCode.POLICY_VIOLATION
        return result
    replica, refusal = ctx.broker.replicas.leader_for(name, index)
    if replica is None:
        result["error_code"] = refusal
        return result
    end = replica.high_watermark
    if offset > end:
        result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        return result
    target = end if offset == HIGH_WATERMARK else offset
    if target < 0:
        result["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        return result
    try:
        plog.delete_records_before(target)
    except LogError as exc:
        result["error_code"] = exc.error_code
        return result
    log.info("%s-%d: records before %d deleted (log start offset)", name, index, target)
    result["low_watermark"] = plog.start_offset
    return result


@handles(ApiKey.DELETE_RECORDS, 0, 2)
def delete_records(ctx: RequestContext, request: Any) -> Any:
    topics = [
        {
            "name": t.name,
            "partitions": [
                _delete(ctx, t.name, int(p.partition_index), int(p.offset)) for p in t.partitions
            ],
        }
        for t in request.topics
    ]
    return respond(ctx, {"throttle_time": NO_THROTTLE, "topics": topics})
