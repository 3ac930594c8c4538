"""CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.topics import NewTopic, Topic, TopicError
from odradek.protocol.apikeys import ApiKey

ZERO_UUID = uuid.UUID(int=0)
UNKNOWN_TOPIC_ID = 100
INVALID_REPLICA_ASSIGNMENT = 39
DESCRIBE_IN_THREAD_TOPICS = 100


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


def _new_topic(ctx: RequestContext, wanted: Any) -> NewTopic | TopicError:
    """The request's topic as a NewTopic, or the error its replica assignments deserve."""
    num_partitions = int(wanted.num_partitions)
    if wanted.assignments:
        # Manual assignments: one node, so every replica list must be exactly [this node].
        if num_partitions != -1 or int(wanted.replication_factor) != -1:
            return TopicError(42, "give either assignments or partitions/replication factor")
        if any(list(a.broker_ids) != [ctx.broker.node_id] for a in wanted.assignments):
            return TopicError(
                INVALID_REPLICA_ASSIGNMENT,
                f"replicas must be [{ctx.broker.node_id}] on a single node",
            )
        num_partitions = len(wanted.assignments)
    return NewTopic(
        wanted.name,
        num_partitions,
        int(wanted.replication_factor),
        {c.name: c.value for c in wanted.configs},
    )


def _fill(ctx: RequestContext, result: dict[str, Any], topic: Topic, partitions: int) -> None:
    result["topic_id"] = topic.topic_id
    result["num_partitions"] = partitions
    result["replication_factor"] = 1
    result["configs"] = [
        {
            "name": name,
            "value": value,
            "read_only": False,
            "config_source": 5 if is_default else 1,
            "is_sensitive": False,
        }
        for name, value, is_default in ctx.broker.topics.effective_topic_configs(topic)
    ]


@handles(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(ctx: RequestContext, request: Any) -> Any:
    """Create all the request's topics in one batch (one metadata fsync, off the loop)."""
    manager = ctx.broker.topics
    results = [_result(t.name) for t in request.topics]
    asked = [_new_topic(ctx, t) for t in request.topics]
    creatable = [(i, n) for i, n in enumerate(asked) if isinstance(n, NewTopic)]
    outcomes: list[Topic | TopicError] = []
    if request.validate_only:
        for _, new in creatable:
            try:
                outcomes.append(
                    manager.create(
                        new.name,
                        new.num_partitions,
                        new.replication_factor,
                        new.configs,
                        validate_only=True,
                    )
                )
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
        if not name and topic_id:
            found = manager.topics_by_id.get(topic_id)
            if found is None:
                entry["error_code"] = UNKNOWN_TOPIC_ID
                entry["error_message"] = f"no topic with id {topic_id}"
                continue
            name = entry["name"] = found.name
        else:
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
            await ctx.broker.topics.add_partitions(
                wanted.name, int(wanted.count), validate_only=bool(request.validate_only)
            )
        except TopicError as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = str(exc)
        results.append(entry)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "results": results})
