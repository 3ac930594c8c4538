"""DescribeTopicPartitions (KIP-966): topics and their partitions, a page at a time.

Answered as Kafka 4.1's DescribeTopicPartitionsRequestHandler and
KRaftMetadataCache.describeTopicResponse answer it:

* The topics named (all of them when none is named), sorted by name, from the
  cursor's topic on; in that topic, from the cursor's partition on.
* At most ``min(response_partition_limit, max.request.partition.size.limit)``
  partitions (at least 1). A topic cut short sets ``next_cursor`` to its next
  partition; a page that ends exactly at a topic's end points the cursor at the
  next topic's partition 0. No cursor: nothing is left.
* Each partition as Metadata describes it (leader, epoch, replicas, ISR, offline
  replicas), plus the eligible leader replicas, which are none: Odradek elects
  from the ISR (and, unclean, any live replica), never from an ELR.
* A named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION
  (INVALID_TOPIC_EXCEPTION for an illegal name); one the principal may not
  DESCRIBE answers TOPIC_AUTHORIZATION_FAILED, after the others, with no id. In
  an all-topics request both are left out.
* A cursor naming a topic that is not among those named, or a negative
  partition, makes the request INVALID_REQUEST (every named topic answers it).
"""

from __future__ import annotations

import uuid
from typing import Any

from odradek.broker.apis.metadata import topic_entry
from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.broker.topics import TopicError, validate_topic_name
from odradek.protocol.apikeys import ApiKey

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_AUTHORIZATION_FAILED = 29
INVALID_REQUEST = 42
ZERO_UUID = uuid.UUID(int=0)


def _missing(name: str, code: int) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": ZERO_UUID,
        "is_internal": False,
        "partitions": [],
    }


def _unknown_code(name: str) -> int:
    try:
        validate_topic_name(name)
    except TopicError:
        return INVALID_TOPIC_EXCEPTION
    return UNKNOWN_TOPIC_OR_PARTITION


def _names(ctx: RequestContext, request: Any, cursor: Any) -> list[str] | None:
    """The candidate topic names, sorted, from the cursor's on; None: INVALID_REQUEST."""
    after = cursor.topic_name if cursor is not None else ""
    if request.topics:
        names = {str(t.name) for t in request.topics if str(t.name) >= after}
        if cursor is not None and cursor.topic_name not in names:
            return None
    else:
        cluster = ctx.broker.cluster
        names = {
            t.name
            for t in ctx.broker.topics
            if t.name >= after and (cluster is None or t.name in cluster.assignments)
        }
    if cursor is not None and cursor.partition_index < 0:
        return None
    return sorted(names)


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
def describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    cursor = request.cursor
    names = _names(ctx, request, cursor)
    if names is None:
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "topics": [_missing(str(t.name), INVALID_REQUEST) for t in request.topics],
                "next_cursor": None,
            },
        )
    every = not request.topics
    limit = int(ctx.broker.config["max.request.partition.size.limit"])
    remaining = max(min(limit, int(request.response_partition_limit)), 1)
    described: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    next_cursor = None
    for name in names:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            if not every:
                refused.append(_missing(name, TOPIC_AUTHORIZATION_FAILED))
            continue
        if remaining == 0:  # the page ended with the previous topic
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        topic = ctx.broker.topics.get(name)
        if topic is None:
            if not every:
                described.append(_missing(name, _unknown_code(name)))
            continue
        entry = topic_entry(ctx, topic)
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        count = len(topic.partitions)
        upper = min(count, start + remaining)
        entry["partitions"] = [
            {**p, "eligible_leader_replicas": (), "last_known_elr": ()}
            for p in entry["partitions"][start:upper]
        ]
        entry["topic_authorized_operations"] = ctx.authorized_operations(ResourceType.TOPIC, name)
        described.append(entry)
        if upper < count:
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= len(entry["partitions"])
    return respond(
        ctx,
        {"throttle_time": NO_THROTTLE, "topics": described + refused, "next_cursor": next_cursor},
    )
