"""Metadata: brokers, and topics with their partitions (this node leads them all).

With an authorizer, as Kafka: topics the principal may not DESCRIBE are left out
of an all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named (so
an unauthorized name never reveals whether the topic exists); auto-creation
needs CREATE on the cluster or on the topic.
"""

from __future__ import annotations

import uuid
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import Topic, TopicError
from odradek.protocol.apikeys import ApiKey

UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100
TOPIC_AUTHORIZATION_FAILED = 29
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
ZERO_UUID = uuid.UUID(int=0)


def topic_entry(ctx: RequestContext, topic: Topic) -> dict[str, Any]:
    node = ctx.broker.node_id
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": index,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": (node,),
                "isr_nodes": (node,),
                "offline_replicas": (),
            }
            for index in range(len(topic.partitions))
        ],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


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


@handles(ApiKey.METADATA, 0, 13)
def metadata(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    topics = broker.topics
    requested = request.topics
    if requested is None or (ctx.version == 0 and not requested):
        entries = [topic_entry(ctx, t) for t in topics if _describable(ctx, t.name)]
    else:
        auto_create = bool(broker.config["auto.create.topics.enable"]) and getattr(
            request, "allow_auto_topic_creation", True
        )
        entries = []
        for wanted in requested:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            if not name and topic_id and topic_id != ZERO_UUID:
                found = topics.topics_by_id.get(topic_id)
                if found is None:
                    entries.append(missing_entry(None, UNKNOWN_TOPIC_ID, topic_id))
                elif not _describable(ctx, found.name):
                    # Topic ids are not secret (Kafka): the id is echoed, the name is not.
                    entries.append(missing_entry(None, TOPIC_AUTHORIZATION_FAILED, topic_id))
                else:
                    entries.append(topic_entry(ctx, found))
                continue
            if name and not _describable(ctx, name):
                entries.append(missing_entry(name, TOPIC_AUTHORIZATION_FAILED))
                continue
            topic = topics.get(name) if name else None
            if topic is None and name and auto_create and not _may_create(ctx, name):
                entries.append(missing_entry(name, TOPIC_AUTHORIZATION_FAILED))
                continue
            if topic is None and name and auto_create:
                try:
                    topic = topics.create(name)
                except TopicError as exc:
                    entries.append(missing_entry(name, exc.error_code))
                    continue
            entries.append(
                topic_entry(ctx, topic)
                if topic
                else missing_entry(name, UNKNOWN_TOPIC_OR_PARTITION)
            )
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
    host, port = ctx.advertised
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "brokers": [
                {
                    "node_id": broker.node_id,
                    "host": host,
                    "port": port,
                    "rack": None,
                }
            ],
            "cluster_id": broker.cluster_id,
            "controller_id": broker.node_id,
            "topics": entries,
            "cluster_authorized_operations": cluster_operations,
            "error_code": 0,  # v13 (KIP-1102): a request-level error, e.g. to rebootstrap
        },
    )
