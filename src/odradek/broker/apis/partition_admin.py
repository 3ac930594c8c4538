"""AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders (KIP-455, KIP-460).

The control plane decides (`reassign`, `reassignments`, `elect`). In a cluster these
move replicas between brokers and leadership between replicas (the controller
completes a reassignment once its whole target is in the ISR). A lone node holds the
one replica of every partition: a reassignment to anything but itself is
INVALID_REPLICA_ASSIGNMENT, none is ever in progress, and no election is needed.

Each needs what Kafka asks: ALTER on the cluster for the two that change
anything, DESCRIBE on the cluster to list reassignments.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.replication.decisions import DecisionError, ElectionNotNeeded

PREFERRED = 0


async def _reassign_one(ctx: RequestContext, topic: str, partition: Any) -> dict[str, Any]:
    index = int(partition.partition_index)
    target = None if partition.replicas is None else [int(b) for b in partition.replicas]
    entry: dict[str, Any] = {"partition_index": index, "error_code": 0, "error_message": None}
    try:
        await ctx.broker.control.reassign(topic, index, target)
    except LookupError as exc:
        entry.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=str(exc))
    except DecisionError as exc:
        entry.update(error_code=exc.error_code, error_message=str(exc))
    return entry


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0)
async def alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": None,
                "responses": [],
            },
        )
    responses = []
    for topic in request.topics:
        partitions = [await _reassign_one(ctx, topic.name, p) for p in topic.partitions]
        responses.append({"name": topic.name, "partitions": partitions})
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": 0,
            "error_message": None,
            "responses": responses,
        },
    )


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
def list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": None,
                "topics": [],
            },
        )
    ongoing = ctx.broker.control.reassignments()
    if request.topics is not None:
        wanted = {(t.name, int(p)) for t in request.topics for p in t.partition_indexes}
        ongoing = {k: v for k, v in ongoing.items() if k in wanted}
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, partition), reassignment in sorted(ongoing.items()):
        topics.setdefault(name, []).append(
            {
                "partition_index": partition,
                "replicas": reassignment.replicas,
                "adding_replicas": reassignment.adding,
                "removing_replicas": reassignment.removing,
            }
        )
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": 0,
            "error_message": None,
            "topics": [{"name": n, "partitions": p} for n, p in topics.items()],
        },
    )


async def _elect_one(
    ctx: RequestContext, topic: str, partition: int, preferred: bool
) -> dict[str, Any]:
    entry: dict[str, Any] = {"partition_id": partition, "error_code": 0, "error_message": None}
    try:
        await ctx.broker.control.elect(topic, partition, preferred=preferred)
    except LookupError as exc:
        entry.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=str(exc))
    except DecisionError as exc:
        entry.update(error_code=exc.error_code, error_message=str(exc))
    return entry


@handles(ApiKey.ELECT_LEADERS, 0, 2)
async def elect_leaders(ctx: RequestContext, request: Any) -> Any:
    preferred = int(getattr(request, "election_type", PREFERRED)) == PREFERRED
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "replica_election_results": [],
            },
        )
    if request.topic_partitions is None:  # every partition
        wanted = [(t.name, list(range(len(t.partitions)))) for t in ctx.broker.topics]
    else:
        wanted = [(t.topic, [int(p) for p in t.partitions]) for t in request.topic_partitions]
    results = []
    for topic, partitions in wanted:
        entries = [await _elect_one(ctx, topic, p, preferred) for p in partitions]
        if request.topic_partitions is None:  # as Kafka: only partitions an election was for
            entries = [e for e in entries if e["error_code"] != ElectionNotNeeded.error_code]
        if entries:
            results.append({"topic": topic, "partition_result": entries})
    return respond(
        ctx,
        {"throttle_time": NO_THROTTLE, "error_code": 0, "replica_election_results": results},
    )
