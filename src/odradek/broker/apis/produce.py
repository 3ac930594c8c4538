"""Produce: validate and append record batches; answer per partition.

acks=all and acks=1 are the same on one node: the reply is sent after the
batch is written to the partition's segment file (in the OS page cache, so a
killed broker process loses nothing acknowledged; see docs/operations.md for
the fsync policy). acks=0 gets no reply at all, as in Kafka.
"""

from __future__ import annotations

import logging
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import TopicError
from odradek.log.errors import LogError
from odradek.protocol.apikeys import ApiKey

log = logging.getLogger("odradek.produce")

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
INVALID_RECORD = 87
TOPIC_AUTHORIZATION_FAILED = 29
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TRANSACTIONS_UNSUPPORTED = 42  # INVALID_REQUEST: Odradek has no transaction coordinator yet


def _partition_result(
    index: int, error_code: int, message: str | None = None, **offsets: int
) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": error_code,
        "base_offset": offsets.get("base_offset", -1),
        "log_append_time": offsets.get("log_append_time", -1),
        "log_start_offset": offsets.get("log_start_offset", -1),
        "record_errors": (),
        "error_message": message,
    }


def _append(
    ctx: RequestContext, topic_name: str, index: int, records: bytes | None
) -> dict[str, Any]:
    broker = ctx.broker
    topic = broker.topics.get(topic_name)
    if (
        topic is None
        and broker.config["auto.create.topics.enable"]
        and _may_create(ctx, topic_name)
    ):
        try:
            topic = broker.topics.create(topic_name)
        except TopicError as exc:
            return _partition_result(index, exc.error_code, str(exc))
    if topic is None or not 0 <= index < len(topic.partitions):
        return _partition_result(index, UNKNOWN_TOPIC_OR_PARTITION, "unknown topic or partition")
    if topic.internal:
        return _partition_result(
            index, INVALID_TOPIC_EXCEPTION, "cannot produce to an internal topic"
        )
    if not records:
        return _partition_result(index, INVALID_RECORD, "no record batch in the request")
    plog = topic.partitions[index]
    try:
        info = plog.append(records)
    except LogError as exc:
        log.debug("append to %s-%d refused: %s", topic_name, index, exc)
        return _partition_result(
            index, exc.error_code, str(exc), log_start_offset=plog.start_offset
        )
    if not info.duplicate:
        broker.notify_append(topic_name, index)
    return _partition_result(
        index,
        0,
        base_offset=info.base_offset,
        log_append_time=info.log_append_time_ms,
        log_start_offset=info.log_start_offset,
    )


def _may_create(ctx: RequestContext, topic: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic (as Metadata's)."""
    return ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or ctx.authorize(
        AclOperation.CREATE, ResourceType.TOPIC, topic
    )


@handles(ApiKey.PRODUCE, 0, 9, parse_from=3)
def produce(ctx: RequestContext, request: Any) -> Any:
    acks = request.acks
    if acks not in (-1, 0, 1):
        error: tuple[int, str] | None = (
            INVALID_REQUIRED_ACKS,
            f"acks must be -1, 0 or 1, got {acks}",
        )
    elif request.transactional_id is not None:
        if not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        ):
            error = (
                TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "not authorized for the transactional id",
            )
        else:
            error = (
                TRANSACTIONS_UNSUPPORTED,
                "transactional produce is not supported by Odradek yet",
            )
    else:
        error = None
    responses = []
    for topic_data in request.topic_data:
        results = []
        writable = ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, topic_data.name)
        for part in topic_data.partition_data:
            if error is not None:
                results.append(_partition_result(part.index, *error))
            elif not writable:
                results.append(_partition_result(part.index, TOPIC_AUTHORIZATION_FAILED))
            else:
                results.append(_append(ctx, topic_data.name, part.index, part.records))
        responses.append({"name": topic_data.name, "partition_responses": results})
    if acks == 0:
        return None
    return respond(ctx, {"responses": responses, "throttle_time": NO_THROTTLE})
