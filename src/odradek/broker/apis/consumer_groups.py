"""The consumer group APIs of KIP-848: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Versions are Kafka 4.x's: ConsumerGroupHeartbeat v0-1 (v1: SubscribedTopicRegex, and the
member generates its own id, KIP-1082), ConsumerGroupDescribe v0-1 (v1: MemberType).

Authorization as Kafka's KafkaApis (KAFKA-18813): a heartbeat needs READ on the group
and DESCRIBE on every topic it subscribes to by name; topics a regex matches are
filtered by the member's DESCRIBE permission when the coordinator resolves it. Describe
needs DESCRIBE on the group, and a group whose members own or target a topic the caller
may not DESCRIBE is refused with TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.apis.groups import AUTHORIZED_OPERATIONS_OMITTED, duration_ms, groups_by_shard
from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.coordinator import ErrorCode
from odradek.coordinator import types as core
from odradek.protocol.apikeys import ApiKey


def _heartbeat_refused(ctx: RequestContext, code: int, message: str | None) -> Any:
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": code,
            "error_message": message,
            "member_id": None,
            "member_epoch": -1,
            "heartbeat_interval": 0,
            "assignment": None,
        },
    )


def _describable_topics(ctx: RequestContext) -> frozenset[str] | None:
    """The topics the principal may DESCRIBE (None: no authorizer, all of them)."""
    if ctx.broker.security.authorizer is None:
        return None
    return frozenset(
        t.name
        for t in ctx.broker.topics
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
    )


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    group_id = request.group_id
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return _heartbeat_refused(ctx, ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    names = request.subscribed_topic_names
    if names:
        denied = [
            n for n in names if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, n)
        ]
        if denied:
            return _heartbeat_refused(
                ctx,
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                f"The member is not authorized to describe topics {sorted(denied)}.",
            )
    regex = getattr(request, "subscribed_topic_regex", None)
    owned = request.topic_partitions
    beat = core.ConsumerGroupHeartbeatRequest(
        group_id=group_id,
        member_id=request.member_id,
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=duration_ms(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=regex,
        server_assignor=request.server_assignor,
        owned=(
            None
            if owned is None
            else tuple((t.topic_id, tuple(int(p) for p in t.partitions)) for t in owned)
        ),
        client_id=ctx.header.client_id or "",
        client_host=f"/{ctx.client_host}",
        member_id_required=ctx.version >= 1,
        describable_topics=_describable_topics(ctx) if regex else None,
    )
    response = await ctx.broker.groups.call(group_id, beat)
    assert isinstance(response, core.ConsumerGroupHeartbeatResponse)
    assignment = None
    if response.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": list(partitions)}
                for topic_id, partitions in response.assignment
            ]
        }
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": response.error_code,
            "error_message": response.error_message,
            "member_id": response.member_id,
            "member_epoch": response.member_epoch,
            "heartbeat_interval": response.heartbeat_interval_ms,
            "assignment": assignment,
        },
    )


def _described_partitions(partitions: tuple[core.DescribedTopicPartitions, ...]) -> list[Any]:
    return [
        {"topic_id": t.topic_id, "topic_name": t.topic_name, "partitions": list(t.partitions)}
        for t in partitions
    ]


def _hides_topics(ctx: RequestContext, group: core.DescribedConsumerGroup) -> bool:
    """A member owns or targets a topic the caller may not DESCRIBE."""
    names = {t.topic_name for m in group.members for t in (*m.assignment, *m.target_assignment)}
    return any(not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name) for name in names)


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    described: dict[str, core.DescribedConsumerGroup] = {}
    allowed = []
    for gid in request.group_ids:
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, gid):
            allowed.append(gid)
        else:
            described[gid] = core.DescribedConsumerGroup(ErrorCode.GROUP_AUTHORIZATION_FAILED, gid)
    for gids in groups_by_shard(ctx, allowed).values():
        response = await ctx.broker.groups.call(
            gids[0], core.ConsumerGroupDescribeRequest(tuple(gids))
        )
        assert isinstance(response, core.ConsumerGroupDescribeResponse)
        for group in response.groups:
            if not group.error_code and _hides_topics(ctx, group):
                group = core.DescribedConsumerGroup(
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    group.group_id,
                    "The group has assigned topic partitions that are not authorized.",
                )
            described[group.group_id] = group
    with_operations = bool(request.include_authorized_operations)
    groups = []
    for gid in request.group_ids:
        g = described[gid]
        groups.append(
            {
                "error_code": g.error_code,
                "error_message": g.error_message,
                "group_id": g.group_id,
                "group_state": g.state,
                "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch,
                "assignor_name": g.assignor_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_topic_names),
                        "subscribed_topic_regex": m.subscribed_topic_regex,
                        "assignment": {"topic_partitions": _described_partitions(m.assignment)},
                        "target_assignment": {
                            "topic_partitions": _described_partitions(m.target_assignment)
                        },
                        "member_type": m.member_type,
                    }
                    for m in g.members
                ],
                "authorized_operations": (
                    ctx.authorized_operations(ResourceType.GROUP, gid)
                    if with_operations and g.error_code == int(ErrorCode.NONE)
                    else AUTHORIZED_OPERATIONS_OMITTED
                ),
            }
        )
    return respond(ctx, {"throttle_time": NO_THROTTLE, "groups": groups})
