"""Metadata: brokers, and topics with their partitions, as the control plane describes
them (a lone node: itself, leading every partition; a cluster: what etcd says).

Unknown topics are auto-created, a bounded number per request, off the event
loop (one journal fsync for all of them). Past
`auto.create.topics.max.per.request`, unknown topics answer
LEADER_NOT_AVAILABLE, as Kafka does while a topic is being created; a client
retries and its next request creates the next share. An auto-creation that finds
the topic already created (in cluster mode: in etcd, but still being opened on
this broker) answers LEADER_NOT_AVAILABLE too, as Kafka: TOPIC_ALREADY_EXISTS
would be final for a client asking about a topic it cannot see yet.

With an authorizer, as Kafka: topics the principal may not DESCRIBE are left out
of an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named (so
an unauthorized name never reveals whether the topic exists); auto-creation
needs CREATE on the cluster or on the topic.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import Topic, TopicError
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

AUTHORIZED_OPERATIONS_OMITTED = -2147483648
ZERO_UUID = uuid.UUID(int=0)
BUILD_IN_THREAD_TOPICS = 100


LISTENER_ERRORS_FROM = 6  # Metadata v6+: LISTENER_NOT_FOUND (Kafka's errorUnavailableListeners)


def partition_entry(ctx: RequestContext, topic: str, index: int) -> dict[str, Any]:
    """One partition: leader, epoch, replicas, ISR, offline replicas. A leader without
    the request's listener is no leader for this client: LISTENER_NOT_FOUND (older
    versions LEADER_NOT_AVAILABLE) and leader -1, as KRaftMetadataCache answers."""
    info = ctx.broker.control.partition_info(topic, index)
    error, leader = info.error_code, info.leader
    if (
        leader >= 0
        and leader != ctx.broker.node_id
        and ctx.broker.control.address_of(leader, ctx.listener_name) is None
    ):
        leader = -1
        error = (
            ErrorCode.LISTENER_NOT_FOUND
            if ctx.version >= LISTENER_ERRORS_FROM
            else ErrorCode.LEADER_NOT_AVAILABLE
        )
    return {
        "error_code": error,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": info.leader_epoch,
        "replica_nodes": info.replicas,
        "isr_nodes": info.isr,
        "offline_replicas": info.offline,
    }


def topic_entry(ctx: RequestContext, topic: Topic) -> dict[str, Any]:
    partitions = [partition_entry(ctx, topic.name, i) for i in range(len(topic.partitions))]
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _listed(ctx: RequestContext, topic: Topic) -> bool:
    """Whether an all-topics answer includes the topic: only topics every broker shares
    (a cluster member keeps its group history topic of older versions to itself)."""
    return ctx.broker.control.lists_topic(topic.name)


def broker_entries(ctx: RequestContext) -> list[dict[str, Any]]:
    """Every live broker with the listener this request came in on, at its address there
    (Kafka's getAliveBrokerNodes(listenerName)); this one at the address this client used."""
    own = ctx.broker.node_id
    host, port = ctx.advertised
    return [
        {
            "node_id": b.node_id,
            "host": host if b.node_id == own else b.host,
            "port": port if b.node_id == own else b.port,
            "rack": b.rack,
        }
        for b in sorted(ctx.broker.control.live_brokers(ctx.listener_name), key=lambda b: b.node_id)
    ]


def controller_id(ctx: RequestContext) -> int:
    return ctx.broker.control.controller_id()


def missing_entry(
    name: str | None, error_code: int, topic_id: uuid.UUID = ZERO_UUID
) -> dict[str, Any]:
    return {
        "error_code": error_code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": (),
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _describable(ctx: RequestContext, name: str) -> bool:
    return ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name)


def _may_create(ctx: RequestContext, name: str) -> bool:
    return ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or ctx.authorize(
        AclOperation.CREATE, ResourceType.TOPIC, name
    )


def _auto_create_allowed(ctx: RequestContext, request: Any) -> bool:
    return bool(ctx.broker.config["auto.create.topics.enable"]) and getattr(
        request, "allow_auto_topic_creation", True
    )


@handles(ApiKey.METADATA, 0, 13)
async def metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    await broker.control.wait_ready()  # a broker still joining a cluster knows no brokers yet
    topics = broker.topics
    requested = request.topics
    if requested is None or (ctx.version == 0 and not requested):
        every = [t for t in topics if _listed(ctx, t) and _describable(ctx, t.name)]
        if len(every) > BUILD_IN_THREAD_TOPICS:
            # Thousands of topics take a few hundred milliseconds to describe: do it
            # off the event loop, from this snapshot of the topic list.
            return await asyncio.to_thread(_response, ctx, request, [], every)
        return _response(ctx, request, [topic_entry(ctx, t) for t in every])
    wanted: list[tuple[str | None, uuid.UUID | None]] = [
        (getattr(w, "name", None), getattr(w, "topic_id", None)) for w in requested
    ]
    auto_create = _auto_create_allowed(ctx, request)
    created: dict[str, Topic | TopicError] = {}
    if auto_create:
        unknown = [
            n
            for n, _ in wanted
            if n and topics.get(n) is None and _describable(ctx, n) and _may_create(ctx, n)
        ]
        unknown = list(dict.fromkeys(unknown))
        limit = max(int(broker.config["auto.create.topics.max.per.request"]), 0)
        created = await topics.ensure_topics(unknown[:limit])
    entries = []
    for name, topic_id in wanted:
        if not name and topic_id and topic_id != ZERO_UUID:
            found = topics.topics_by_id.get(topic_id)
            if found is None:
                entries.append(missing_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, topic_id))
            elif not _describable(ctx, found.name):
                # Topic ids are not secret (Kafka): the id is echoed, the name is not.
                entries.append(missing_entry(None, ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic_id))
            else:
                entries.append(topic_entry(ctx, found))
            continue
        if name and not _describable(ctx, name):
            entries.append(missing_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        topic = topics.get(name) if name else None
        if topic is None and name and auto_create:
            if not _may_create(ctx, name):
                entries.append(missing_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            outcome = created.get(name)
            if isinstance(outcome, TopicError):
                code = outcome.error_code
                entries.append(
                    missing_entry(
                        name,
                        ErrorCode.LEADER_NOT_AVAILABLE
                        if code == ErrorCode.TOPIC_ALREADY_EXISTS
                        else code,
                    )
                )
                continue
            if outcome is None:  # past this request's auto-create limit: a retry creates it
                entries.append(missing_entry(name, ErrorCode.LEADER_NOT_AVAILABLE))
                continue
            topic = outcome
        entries.append(
            topic_entry(ctx, topic)
            if topic
            else missing_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        )
    return _response(ctx, request, entries)


def _response(
    ctx: RequestContext,
    request: Any,
    entries: list[dict[str, Any]],
    described: Sequence[Topic] = (),
) -> Any:
    """The Metadata response: `entries`, then an entry for each topic in `described`."""
    broker = ctx.broker
    entries = entries + [topic_entry(ctx, t) for t in described]
    if getattr(request, "include_topic_authorized_operations", False):
        for entry in entries:
            if entry["error_code"] == 0:
                entry["topic_authorized_operations"] = ctx.authorized_operations(
                    ResourceType.TOPIC, entry["name"]
                )
    cluster_operations = AUTHORIZED_OPERATIONS_OMITTED
    if getattr(request, "include_cluster_authorized_operations", False):
        cluster_operations = (
            ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
            else 0
        )
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "brokers": broker_entries(ctx),
            "cluster_id": broker.cluster_id,
            "controller_id": controller_id(ctx),
            "topics": entries,
            "cluster_authorized_operations": cluster_operations,
            "error_code": 0,  # v13 (KIP-1102): a request-level error, e.g. to rebootstrap
        },
    )
