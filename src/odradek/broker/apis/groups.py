"""The classic group APIs: translate each wire version to the core's neutral
requests, route them to the shard that owns the group, and translate back.

Version ranges are Kafka 4.0.1's (see docs/protocol.md): every classic group
API starts at v0 where Kafka does, because librdkafka before 2.11 enables its
consumer only when the broker's ranges include v0.

Authorization happens here, before the (pure) coordinator core, with Kafka's
checks: READ on the group to join, sync, heartbeat, leave and commit; DESCRIBE
to find its coordinator, fetch its offsets or describe it; DELETE to delete it
or its offsets; READ (commit, offset delete) or DESCRIBE (offset fetch) on each
topic. ListGroups shows every group to DESCRIBE on the cluster, else only the
groups the principal may describe.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.coordinator import ErrorCode, partition_for
from odradek.coordinator import types as core
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def _group_allowed(ctx: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return ctx.authorize(operation, ResourceType.GROUP, group_id)


def duration_ms(value: Any) -> int:
    """kio models durations as timedelta; the core takes integer milliseconds (shared with
    the KIP-848 handlers in consumer_groups.py)."""
    if hasattr(value, "total_seconds"):
        return round(value.total_seconds() * 1000)
    return int(value)


# --- FindCoordinator ---------------------------------------------------------------------


def _coordinator_entry(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    broker = ctx.broker
    host, port = ctx.advertised
    entry: dict[str, Any] = {
        "key": key,
        "node_id": broker.node_id,
        "host": host,
        "port": port,
        "error_code": 0,
        "error_message": None,
    }
    refusal = None
    if key_type == KEY_TYPE_GROUP and not _group_allowed(ctx, AclOperation.DESCRIBE, key):
        refusal = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif key_type == KEY_TYPE_TRANSACTION and not ctx.authorize(
        AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        refusal = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
        # Share groups (v6, KIP-932) and unknown types: INVALID_REQUEST, as Kafka
        # answers when it has no share coordinator.
        entry.update(
            node_id=-1,
            host="",
            port=-1,
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=f"no coordinator of key type {key_type}",
        )
    elif refusal is not None:
        entry.update(node_id=-1, host="", port=-1, error_code=refusal, error_message=None)
    return entry


async def _located(ctx: RequestContext, entry: dict[str, Any], key_type: int) -> dict[str, Any]:
    """The leader of the key's partition of the coordinator's topic (which the control
    plane creates on the first request, as Kafka does), at the address this client
    used when it is this broker; COORDINATOR_NOT_AVAILABLE while it has none."""
    if entry["error_code"]:
        return entry
    control = ctx.broker.control
    await control.wait_ready()
    if key_type == KEY_TYPE_GROUP:
        topic, partition = OFFSETS_TOPIC, ctx.broker.groups.partition_of(entry["key"])
    else:
        topic, partition = TRANSACTION_STATE_TOPIC, ctx.broker.txns.partition_of(entry["key"])
    error, leader, message = await control.coordinator_for(topic, partition)
    address: tuple[str, int] | None = None
    if not error:
        # Another broker at its address on this request's listener; one without that
        # listener is no coordinator for this client (Kafka: COORDINATOR_NOT_AVAILABLE).
        address = (
            ctx.advertised
            if leader == ctx.broker.node_id
            else control.address_of(leader, ctx.listener_name)
        )
    if address is None:
        entry.update(
            node_id=-1,
            host="",
            port=-1,
            error_code=error or ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message=message or None,
        )
    else:
        entry.update(node_id=leader, host=address[0], port=address[1])
    return entry


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: RequestContext, request: Any) -> Any:
    key_type = int(getattr(request, "key_type", KEY_TYPE_GROUP))
    if ctx.version >= 4:
        coordinators = [
            await _located(ctx, _coordinator_entry(ctx, k, key_type), key_type)
            for k in request.coordinator_keys
        ]
        return respond(ctx, {"throttle_time": NO_THROTTLE, "coordinators": coordinators})
    entry = await _located(ctx, _coordinator_entry(ctx, request.key, key_type), key_type)
    entry["throttle_time"] = NO_THROTTLE
    return respond(ctx, entry)


# --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup ----------------------------------


def _join_refused(ctx: RequestContext, error_code: int) -> Any:
    """Kafka's JoinGroupRequest.getErrorResponse."""
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": error_code,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": "" if ctx.version < 7 else None,
            "leader": "",
            "skip_assignment": False,
            "member_id": "",
            "members": [],
        },
    )


@handles(ApiKey.JOIN_GROUP, 0, 9)
async def join_group(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return _join_refused(ctx, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    session_ms = duration_ms(request.session_timeout)
    rebalance_ms = duration_ms(request.rebalance_timeout) if ctx.version >= 1 else session_ms
    joined = core.JoinGroupRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.header.client_id or "",
        client_host=f"/{ctx.client_host}",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        reason=getattr(request, "reason", None),
        require_known_member_id=ctx.version >= 4,
        supports_skip_assignment=ctx.version >= 9,
    )
    response = await ctx.broker.groups.call(request.group_id, joined)
    assert isinstance(response, core.JoinGroupResponse)
    protocol_name = response.protocol_name
    if protocol_name is None and ctx.version < 7:
        protocol_name = ""  # nullable only from v7
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": response.error_code,
            "generation_id": response.generation_id,
            "protocol_type": response.protocol_type,
            "protocol_name": protocol_name,
            "leader": response.leader,
            "skip_assignment": response.skip_assignment,
            "member_id": response.member_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata,
                }
                for m in response.members
            ],
        },
    )


@handles(ApiKey.SYNC_GROUP, 0, 5)
async def sync_group(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "protocol_type": None,
                "protocol_name": None,
                "assignment": b"",
            },
        )
    synced = core.SyncGroupRequest(
        group_id=request.group_id,
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
    )
    response = await ctx.broker.groups.call(request.group_id, synced)
    assert isinstance(response, core.SyncGroupResponse)
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": response.error_code,
            "protocol_type": response.protocol_type,
            "protocol_name": response.protocol_name,
            "assignment": response.assignment,
        },
    )


@handles(ApiKey.HEARTBEAT, 0, 4)
async def heartbeat(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return respond(
            ctx, {"throttle_time": NO_THROTTLE, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
        )
    beat = core.HeartbeatRequest(
        group_id=request.group_id,
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    response = await ctx.broker.groups.call(request.group_id, beat)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "error_code": response.error_code})


@handles(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "members": [],
            },
        )
    if ctx.version >= 3:
        members = tuple(
            core.LeaveGroupMember(m.member_id, m.group_instance_id, getattr(m, "reason", None))
            for m in request.members
        )
    else:
        members = (core.LeaveGroupMember(request.member_id),)
    response = await ctx.broker.groups.call(
        request.group_id, core.LeaveGroupRequest(request.group_id, members)
    )
    assert isinstance(response, core.LeaveGroupResponse)
    error_code = response.error_code
    if ctx.version < 3 and not error_code and response.members:
        error_code = response.members[0].error_code  # one member: its error is the answer
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": error_code,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "error_code": m.error_code,
                }
                for m in response.members
            ],
        },
    )


# --- offsets -----------------------------------------------------------------------------


def _commit_response(ctx: RequestContext, topics: list[dict[str, Any]]) -> Any:
    return respond(ctx, {"throttle_time": NO_THROTTLE, "topics": topics})


def _every_partition(request_topics: Any, error_code: int) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "partitions": [
                {"partition_index": p.partition_index, "error_code": error_code}
                for p in t.partitions
            ],
        }
        for t in request_topics
    ]


@handles(ApiKey.OFFSET_COMMIT, 2, 9)
async def offset_commit(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return _commit_response(
            ctx, _every_partition(request.topics, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        )
    # As KafkaApis does, partitions of topics the principal may not READ get
    # TOPIC_AUTHORIZATION_FAILED and those this broker does not have get
    # UNKNOWN_TOPIC_OR_PARTITION here, never reaching the coordinator (which knows
    # nothing of topics or ACLs); if none is left, the coordinator is not asked.
    topics = ctx.broker.topics
    errors: dict[tuple[str, int], int] = {}
    known: list[core.OffsetCommitTopic] = []
    for t in request.topics:
        readable = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)
        partitions = []
        for p in t.partitions:
            index = int(p.partition_index)
            if not readable:
                errors[(t.name, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if not topics.has_partition(t.name, index):
                errors[(t.name, index)] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            partitions.append(
                core.OffsetCommitPartition(
                    index,
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata,
                )
            )
        if partitions:
            known.append(core.OffsetCommitTopic(t.name, tuple(partitions)))
    if known:
        retention = getattr(request, "retention_time", None)
        commit = core.OffsetCommitRequest(
            group_id=request.group_id,
            topics=tuple(known),
            generation_id=int(request.generation_id_or_member_epoch),
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            retention_time_ms=duration_ms(retention) if retention is not None else -1,
            unknown_group_is_not_found=ctx.version >= 9,
        )
        response = await ctx.broker.groups.call(request.group_id, commit)
        assert isinstance(response, core.OffsetCommitResponse)
        for topic in response.topics:
            for part in topic.partitions:
                errors[(topic.name, part.partition)] = part.error_code
    answered = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": errors[(t.name, int(p.partition_index))],
                }
                for p in t.partitions
            ],
        }
        for t in request.topics
    ]
    return _commit_response(ctx, answered)


def _fetched_topics(
    response: core.OffsetFetchResponse, requested: Any, version: int
) -> list[dict[str, Any]]:
    if response.error_code and version < 2 and requested:
        # v0-1 have no group-level error: report it on every requested partition.
        return [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": response.error_code,
                    }
                    for p in t.partition_indexes
                ],
            }
            for t in requested
        ]
    return [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition,
                    "committed_offset": p.committed_offset,
                    "committed_leader_epoch": p.committed_leader_epoch,
                    "metadata": p.metadata,
                    "error_code": p.error_code,
                }
                for p in t.partitions
            ],
        }
        for t in response.topics
    ]


async def _fetch_one_group(
    ctx: RequestContext,
    group_id: str,
    topics: Any,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> core.OffsetFetchResponse:
    """Offsets the principal may see: DESCRIBE on the group (else the group error), and
    on each topic (named ones answer TOPIC_AUTHORIZATION_FAILED, "all" leaves them out)."""
    if not _group_allowed(ctx, AclOperation.DESCRIBE, group_id):
        return core.OffsetFetchResponse(ErrorCode.GROUP_AUTHORIZATION_FAILED, ())
    wanted = None
    refused: list[core.OffsetFetchTopicResponse] = []
    if topics is not None:
        allowed = []
        for t in topics:
            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name):
                allowed.append(
                    core.OffsetFetchTopic(t.name, tuple(int(p) for p in t.partition_indexes))
                )
            else:
                refused.append(
                    core.OffsetFetchTopicResponse(
                        t.name,
                        tuple(
                            core.OffsetFetchPartitionResponse(
                                int(p), -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED
                            )
                            for p in t.partition_indexes
                        ),
                    )
                )
        wanted = tuple(allowed)
    response = await ctx.broker.groups.call(
        group_id, core.OffsetFetchRequest(group_id, wanted, require_stable, *member)
    )
    assert isinstance(response, core.OffsetFetchResponse)
    if response.error_code:
        return response
    visible = tuple(
        t
        for t in response.topics
        if topics is not None or ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
    )
    return dataclasses.replace(response, topics=visible + tuple(refused))


@handles(ApiKey.OFFSET_FETCH, 1, 9)
async def offset_fetch(ctx: RequestContext, request: Any) -> Any:
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.version >= 8:
        groups = []
        for group in request.groups:
            # v9+ (KIP-848): a consumer-group member says who it is.
            member = (getattr(group, "member_id", None), int(getattr(group, "member_epoch", -1)))
            response = await _fetch_one_group(
                ctx, group.group_id, group.topics, require_stable, member
            )
            groups.append(
                {
                    "group_id": group.group_id,
                    "topics": _fetched_topics(response, group.topics, ctx.version),
                    "error_code": response.error_code,
                }
            )
        return respond(ctx, {"throttle_time": NO_THROTTLE, "groups": groups})
    response = await _fetch_one_group(ctx, request.group_id, request.topics, require_stable)
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "topics": _fetched_topics(response, request.topics, ctx.version),
            "error_code": response.error_code,
        },
    )


@handles(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.DELETE, request.group_id):
        return respond(
            ctx,
            {
                "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "throttle_time": NO_THROTTLE,
                "topics": [],
            },
        )
    readable = [
        t for t in request.topics if ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)
    ]
    refused = _every_partition(
        [t for t in request.topics if t not in readable], ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )
    error_code, deleted_topics = 0, []
    if readable:
        deleted = core.OffsetDeleteRequest(
            request.group_id,
            tuple(
                core.OffsetDeleteTopic(t.name, tuple(int(p.partition_index) for p in t.partitions))
                for t in readable
            ),
        )
        response = await ctx.broker.groups.call(request.group_id, deleted)
        assert isinstance(response, core.OffsetDeleteResponse)
        error_code = response.error_code
        deleted_topics = [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition, "error_code": p.error_code}
                    for p in t.partitions
                ],
            }
            for t in response.topics
        ]
    return respond(
        ctx,
        {
            "error_code": error_code,
            "throttle_time": NO_THROTTLE,
            "topics": deleted_topics + ([] if error_code else refused),
        },
    )


# --- admin: describe / list / delete -------------------------------------------------


def groups_by_shard(ctx: RequestContext, group_ids: Any) -> dict[int, list[str]]:
    """Group ids by the ``__consumer_offsets`` partition (shard) that owns each."""
    shards: dict[int, list[str]] = defaultdict(list)
    for gid in group_ids:
        shards[partition_for(gid, ctx.broker.groups.num_partitions)].append(gid)
    return shards


def _group_refused(group_id: str) -> core.DescribedGroup:
    return core.DescribedGroup(ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id, "", "", "", ())


@handles(ApiKey.DESCRIBE_GROUPS, 0, 6)
async def describe_groups(ctx: RequestContext, request: Any) -> Any:
    described: dict[str, core.DescribedGroup] = {}
    allowed = []
    for gid in request.groups:
        if _group_allowed(ctx, AclOperation.DESCRIBE, gid):
            allowed.append(gid)
        else:
            described[gid] = _group_refused(gid)
    with_operations = bool(getattr(request, "include_authorized_operations", False))
    for gids in groups_by_shard(ctx, allowed).values():
        response = await ctx.broker.groups.call(
            gids[0], core.DescribeGroupsRequest(tuple(gids), not_found_error=ctx.version >= 6)
        )
        assert isinstance(response, core.DescribeGroupsResponse)
        described.update({g.group_id: g for g in response.groups})
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "groups": [
                {
                    "error_code": g.error_code,
                    "error_message": g.error_message,
                    "group_id": g.group_id,
                    "group_state": g.state,
                    "protocol_type": g.protocol_type,
                    "protocol_data": g.protocol_data,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata,
                            "member_assignment": m.assignment,
                        }
                        for m in g.members
                    ],
                    "authorized_operations": (
                        ctx.authorized_operations(ResourceType.GROUP, g.group_id)
                        if with_operations and not g.error_code
                        else AUTHORIZED_OPERATIONS_OMITTED
                    ),
                }
                for g in (described[gid] for gid in request.groups)
            ],
        },
    )


@handles(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx: RequestContext, request: Any) -> Any:
    states = tuple(getattr(request, "states_filter", ()) or ())
    types = tuple(getattr(request, "types_filter", ()) or ())
    responses = await ctx.broker.groups.call_all(lambda: core.ListGroupsRequest(states, types))
    error_code = 0
    groups = []
    for response in responses:
        assert isinstance(response, core.ListGroupsResponse)
        error_code = error_code or response.error_code
        groups.extend(response.groups)
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        groups = [g for g in groups if _group_allowed(ctx, AclOperation.DESCRIBE, g.group_id)]
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": error_code,
            "groups": [
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.state,
                    "group_type": g.group_type,
                }
                for g in groups
            ],
        },
    )


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: RequestContext, request: Any) -> Any:
    results: dict[str, int] = {}
    allowed = []
    for gid in request.groups_names:
        if _group_allowed(ctx, AclOperation.DELETE, gid):
            allowed.append(gid)
        else:
            results[gid] = ErrorCode.GROUP_AUTHORIZATION_FAILED
    for gids in groups_by_shard(ctx, allowed).values():
        response = await ctx.broker.groups.call(gids[0], core.DeleteGroupsRequest(tuple(gids)))
        assert isinstance(response, core.DeleteGroupsResponse)
        results.update({r.group_id: r.error_code for r in response.results})
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "results": [
                {"group_id": gid, "error_code": results[gid]} for gid in request.groups_names
            ],
        },
    )
