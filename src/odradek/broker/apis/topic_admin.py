"""CreateTopics, DeleteTopics, CreatePartitions.

Authorization as Kafka's controller: creating needs CREATE on the cluster or the
topic (and the configs are shown only with DESCRIBE_CONFIGS on it); deleting
needs DELETE on the cluster, or DESCRIBE and DELETE on the topic; adding
partitions needs ALTER on the topic. A topic the principal may not describe
answers TOPIC_AUTHORIZATION_FAILED whether or not it exists.
"""

from __future__ import annotations

import uuid
from typing import Any

from odradek.broker.config import TOPIC_CONFIGS
from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import TopicError
from odradek.protocol.apikeys import ApiKey

ZERO_UUID = uuid.UUID(int=0)
UNKNOWN_TOPIC_ID = 100
INVALID_REPLICA_ASSIGNMENT = 39
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TOPIC_AUTHORIZATION_FAILED = 29


def _on_topic(ctx: RequestContext, operation: AclOperation, name: str) -> bool:
    return ctx.authorize(operation, ResourceType.TOPIC, name)


def _on_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _creatable(
    ctx: RequestContext, wanted: Any, validate_only: bool, cluster_create: bool
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": wanted.name,
        "topic_id": ZERO_UUID,
        "error_code": 0,
        "error_message": None,
        "topic_config_error_code": 0,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }
    if not cluster_create and not _on_topic(ctx, AclOperation.CREATE, wanted.name):
        result["error_code"] = TOPIC_AUTHORIZATION_FAILED
        result["error_message"] = "Authorization failed."
        return result
    num_partitions = int(wanted.num_partitions)
    if wanted.assignments:
        # Manual assignments: one node, so every replica list must be exactly [this node].
        if num_partitions != -1 or int(wanted.replication_factor) != -1:
            result["error_code"] = 42
            result["error_message"] = "give either assignments or partitions/replication factor"
            return result
        if any(list(a.broker_ids) != [ctx.broker.node_id] for a in wanted.assignments):
            result["error_code"] = INVALID_REPLICA_ASSIGNMENT
            result["error_message"] = f"replicas must be [{ctx.broker.node_id}] on a single node"
            return result
        num_partitions = len(wanted.assignments)
    configs = {c.name: c.value for c in wanted.configs}
    try:
        topic = ctx.broker.topics.create(
            wanted.name,
            num_partitions,
            int(wanted.replication_factor),
            configs,
            validate_only=validate_only,
        )
    except TopicError as exc:
        result["error_code"] = exc.error_code
        result["error_message"] = str(exc)
        return result
    result["topic_id"] = topic.topic_id
    if not _on_topic(ctx, AclOperation.DESCRIBE_CONFIGS, wanted.name):
        result["topic_config_error_code"] = TOPIC_AUTHORIZATION_FAILED
        return result
    result["num_partitions"] = (
        len(topic.partitions)
        if not validate_only
        else (num_partitions if num_partitions > 0 else int(ctx.broker.config["num.partitions"]))
    )
    result["replication_factor"] = 1
    result["configs"] = [
        {
            "name": name,
            "value": value,
            "read_only": False,
            "config_source": _config_source(ctx, name, is_default),
            "is_sensitive": False,
        }
        for name, value, is_default in ctx.broker.topics.effective_topic_configs(topic)
    ]
    return result


def _config_source(ctx: RequestContext, name: str, is_default: bool) -> int:
    """DYNAMIC_TOPIC_CONFIG for an override, else where the default comes from."""
    if not is_default:
        return SOURCE_DYNAMIC_TOPIC
    synonym = TOPIC_CONFIGS[name].synonym
    if synonym is not None and not ctx.broker.config.is_default(synonym):
        return SOURCE_STATIC_BROKER
    return SOURCE_DEFAULT


@handles(ApiKey.CREATE_TOPICS, 2, 7)
def create_topics(ctx: RequestContext, request: Any) -> Any:
    cluster_create = _on_cluster(ctx, AclOperation.CREATE)
    topics = [
        _creatable(ctx, t, bool(request.validate_only), cluster_create) for t in request.topics
    ]
    return respond(ctx, {"throttle_time": NO_THROTTLE, "topics": topics})


@handles(ApiKey.DELETE_TOPICS, 1, 6)
def delete_topics(ctx: RequestContext, request: Any) -> Any:
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    responses = []
    manager = ctx.broker.topics
    cluster_delete = _on_cluster(ctx, AclOperation.DELETE)
    for name, topic_id in wanted:
        entry: dict[str, Any] = {
            "name": name,
            "topic_id": topic_id or ZERO_UUID,
            "error_code": 0,
            "error_message": None,
        }
        by_id = not name and bool(topic_id)
        if by_id:
            found = manager.topics_by_id.get(topic_id)
            if found is None:
                entry["error_code"] = UNKNOWN_TOPIC_ID
                entry["error_message"] = f"no topic with id {topic_id}"
                responses.append(entry)
                continue
            name = entry["name"] = found.name
        describable = cluster_delete or _on_topic(ctx, AclOperation.DESCRIBE, name)
        if not (describable and (cluster_delete or _on_topic(ctx, AclOperation.DELETE, name))):
            # As Kafka: a name the principal may not describe is never revealed.
            entry["name"] = name if describable or not by_id else None
            entry["error_code"] = TOPIC_AUTHORIZATION_FAILED
            entry["error_message"] = "Authorization failed."
            responses.append(entry)
            continue
        if not by_id:
            existing = manager.get(name)
            if existing is not None:
                entry["topic_id"] = existing.topic_id
        try:
            manager.delete(name)
        except TopicError as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = str(exc)
        responses.append(entry)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "responses": responses})


@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
def create_partitions(ctx: RequestContext, request: Any) -> Any:
    results = []
    for wanted in request.topics:
        entry: dict[str, Any] = {"name": wanted.name, "error_code": 0, "error_message": None}
        if not _on_topic(ctx, AclOperation.ALTER, wanted.name):
            entry["error_code"] = TOPIC_AUTHORIZATION_FAILED
            entry["error_message"] = "Authorization failed."
            results.append(entry)
            continue
        try:
            ctx.broker.topics.add_partitions(
                wanted.name, int(wanted.count), validate_only=bool(request.validate_only)
            )
        except TopicError as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = str(exc)
        results.append(entry)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "results": results})
