"""CreateTopics, DeleteTopics, CreatePartitions.

A request's topics are created or deleted in one batch: one durable metadata
write for all of them, the file work off the event loop (`TopicManager`).

Authorization as Kafka's controller: creating needs CREATE on the cluster or the
topic (and the configs are shown only with DESCRIBE_CONFIGS on it); deleting
needs DELETE on the cluster, or DESCRIBE and DELETE on the topic; adding
partitions needs ALTER on the topic. A topic the principal may not describe
answers TOPIC_AUTHORIZATION_FAILED whether or not it exists.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from odradek.broker.config import TOPIC_CONFIGS
from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import NewTopic, Topic, TopicError
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

ZERO_UUID = uuid.UUID(int=0)
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
DESCRIBE_IN_THREAD_TOPICS = 100


def _on_topic(ctx: RequestContext, operation: AclOperation, name: str) -> bool:
    return ctx.authorize(operation, ResourceType.TOPIC, name)


def _on_cluster(ctx: RequestContext, operation: AclOperation) -> bool:
    return ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)


def _refused() -> TopicError:
    return TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")


def _result(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "topic_id": ZERO_UUID,
        "error_code": 0,
        "error_message": None,
        "topic_config_error_code": 0,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": None,
    }


def _new_topic(ctx: RequestContext, wanted: Any, cluster_create: bool) -> NewTopic | TopicError:
    """The request's topic as a NewTopic, or the error it deserves before any file work."""
    if not cluster_create and not _on_topic(ctx, AclOperation.CREATE, wanted.name):
        return _refused()
    num_partitions = int(wanted.num_partitions)
    assignments = None
    if wanted.assignments:
        if num_partitions != -1 or int(wanted.replication_factor) != -1:
            return TopicError(
                ErrorCode.INVALID_REQUEST,
                "give either assignments or partitions/replication factor",
            )
        assignments = {
            int(a.partition_index): tuple(int(b) for b in a.broker_ids) for a in wanted.assignments
        }
        num_partitions = len(assignments)
    return NewTopic(
        wanted.name,
        num_partitions,
        int(wanted.replication_factor),
        {c.name: c.value for c in wanted.configs},
        assignments=assignments,
    )


def _config_source(ctx: RequestContext, name: str, is_default: bool) -> int:
    """DYNAMIC_TOPIC_CONFIG for an override, else where the default comes from."""
    if not is_default:
        return SOURCE_DYNAMIC_TOPIC
    synonym = TOPIC_CONFIGS[name].synonym
    if synonym is not None and not ctx.broker.config.is_default(synonym):
        return SOURCE_STATIC_BROKER
    return SOURCE_DEFAULT


def _fill(ctx: RequestContext, result: dict[str, Any], topic: Topic, partitions: int) -> None:
    result["topic_id"] = topic.topic_id
    if not _on_topic(ctx, AclOperation.DESCRIBE_CONFIGS, topic.name):
        result["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return
    result["num_partitions"] = partitions
    result["replication_factor"] = len(ctx.broker.control.replicas_of(topic.name, 0)) or 1
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


@handles(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(ctx: RequestContext, request: Any) -> Any:
    """Create all the request's topics in one batch (one metadata fsync, off the loop)."""
    manager = ctx.broker.topics
    cluster_create = _on_cluster(ctx, AclOperation.CREATE)
    results = [_result(t.name) for t in request.topics]
    asked = [_new_topic(ctx, t, cluster_create) for t in request.topics]
    creatable = [(i, n) for i, n in enumerate(asked) if isinstance(n, NewTopic)]
    outcomes: list[Topic | TopicError] = []
    if request.validate_only:
        for _, new in creatable:
            try:
                outcomes.append(manager.prepare(new)[0])  # every check, nothing written
            except TopicError as exc:
                outcomes.append(exc)
    else:
        outcomes = await manager.create_topics([n for _, n in creatable])
    by_index: dict[int, Topic | TopicError] = {
        i: e for i, e in enumerate(asked) if isinstance(e, TopicError)
    }
    by_index.update({i: o for (i, _), o in zip(creatable, outcomes, strict=True)})
    outcome_list = [by_index[i] for i in range(len(asked))]
    if len(results) > DESCRIBE_IN_THREAD_TOPICS:
        # Hundreds of topics' configs take tens of milliseconds to describe: off the loop.
        return await asyncio.to_thread(_answer, ctx, request, asked, outcome_list, results)
    return _answer(ctx, request, asked, outcome_list, results)


def _answer(
    ctx: RequestContext,
    request: Any,
    asked: list[NewTopic | TopicError],
    outcomes: list[Topic | TopicError],
    results: list[dict[str, Any]],
) -> Any:
    for new, outcome, result in zip(asked, outcomes, results, strict=True):
        if isinstance(outcome, TopicError):
            result["error_code"] = outcome.error_code
            result["error_message"] = str(outcome)
            continue
        assert isinstance(new, NewTopic)
        partitions = (
            len(outcome.partitions)
            if not request.validate_only
            else (
                new.num_partitions
                if new.num_partitions > 0
                else int(ctx.broker.config["num.partitions"])
            )
        )
        _fill(ctx, result, outcome, partitions)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "topics": results})


@handles(ApiKey.DELETE_TOPICS, 1, 6)
async def delete_topics(ctx: RequestContext, request: Any) -> Any:
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    manager = ctx.broker.topics
    cluster_delete = _on_cluster(ctx, AclOperation.DELETE)
    entries: list[dict[str, Any]] = []
    names: list[str] = []
    for name, topic_id in wanted:
        entry: dict[str, Any] = {
            "name": name,
            "topic_id": topic_id or ZERO_UUID,
            "error_code": 0,
            "error_message": None,
        }
        entries.append(entry)
        by_id = not name and bool(topic_id)
        if by_id:
            found = manager.topics_by_id.get(topic_id)
            if found is None:
                entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID
                entry["error_message"] = f"no topic with id {topic_id}"
                continue
            name = entry["name"] = found.name
        describable = cluster_delete or _on_topic(ctx, AclOperation.DESCRIBE, name)
        if not (describable and (cluster_delete or _on_topic(ctx, AclOperation.DELETE, name))):
            # As Kafka: a name the principal may not describe is never revealed.
            entry["name"] = name if describable or not by_id else None
            entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            entry["error_message"] = "Authorization failed."
            continue
        if not by_id:
            existing = manager.get(name)
            if existing is not None:
                entry["topic_id"] = existing.topic_id
        names.append(name)
    outcome = await manager.delete_topics(names)
    for entry in entries:
        error = outcome.get(entry["name"]) if entry["error_code"] == 0 else None
        if error is not None:
            entry["error_code"] = error.error_code
            entry["error_message"] = str(error)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "responses": entries})


@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: RequestContext, request: Any) -> Any:
    results = []
    for wanted in request.topics:
        entry: dict[str, Any] = {"name": wanted.name, "error_code": 0, "error_message": None}
        try:
            if not _on_topic(ctx, AclOperation.ALTER, wanted.name):
                raise _refused()
            await ctx.broker.topics.add_partitions(
                wanted.name, int(wanted.count), validate_only=bool(request.validate_only)
            )
        except TopicError as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = str(exc)
        results.append(entry)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "results": results})
