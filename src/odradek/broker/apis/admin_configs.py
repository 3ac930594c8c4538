"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and the broker.

Broker settings are static (given at start-up); topic settings are dynamic and
persisted with the topic.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.config import (
    BOOL,
    DOUBLE,
    INT,
    LIST,
    LONG,
    PASSWORD,
    TOPIC_SETTINGS,
    format_value,
)
from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import TopicError
from odradek.protocol.apikeys import ApiKey

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
CONFIG_TYPES = {BOOL: 1, "string": 2, INT: 3, LONG: 5, DOUBLE: 6, LIST: 7, PASSWORD: 9}
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
INVALID_CONFIG = 40
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31


def _check_access(ctx: RequestContext, operation: AclOperation, resource: Any) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on the cluster for the broker."""
    if resource.resource_type == RESOURCE_TOPIC:
        if not ctx.authorize(operation, ResourceType.TOPIC, resource.resource_name):
            raise TopicError(TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    elif resource.resource_type == RESOURCE_BROKER and not ctx.authorize(
        operation, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        raise TopicError(CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


def _entry(
    name: str, value: str, source: int, type_name: str, doc: str, synonyms: list[Any]
) -> dict[str, Any]:
    return {
        "name": name,
        "value": None if type_name == PASSWORD else value,  # never show a secret
        "read_only": source == SOURCE_STATIC_BROKER,
        "config_source": source,
        "is_default": source == SOURCE_DEFAULT,
        "is_sensitive": type_name == PASSWORD,
        "synonyms": synonyms,
        "config_type": CONFIG_TYPES.get(type_name, 2),
        "documentation": doc,
    }


def _topic_configs(
    ctx: RequestContext, name: str, keys: set[str] | None, synonyms: bool
) -> list[Any]:
    manager = ctx.broker.topics
    topic = manager.get(name)
    if topic is None:
        raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    out = []
    for config_name, value, is_default in manager.effective_topic_configs(topic):
        if keys is not None and config_name not in keys:
            continue
        setting = TOPIC_SETTINGS[config_name]
        syn = []
        if synonyms:
            if not is_default:
                syn.append({"name": config_name, "value": value, "source": SOURCE_DYNAMIC_TOPIC})
            broker_source = (
                SOURCE_DEFAULT
                if ctx.broker.config.is_default(setting.name)
                else SOURCE_STATIC_BROKER
            )
            syn.append(
                {
                    "name": setting.name,
                    "value": format_value(ctx.broker.config[setting.name]),
                    "source": broker_source,
                }
            )
        source = SOURCE_DEFAULT if is_default else SOURCE_DYNAMIC_TOPIC
        out.append(_entry(config_name, value, source, setting.type, setting.doc, syn))
    return out


def _broker_configs(ctx: RequestContext, keys: set[str] | None) -> list[Any]:
    out = []
    for setting, value in ctx.broker.config.items():
        if keys is not None and setting.name not in keys:
            continue
        source = (
            SOURCE_DEFAULT if ctx.broker.config.is_default(setting.name) else SOURCE_STATIC_BROKER
        )
        out.append(_entry(setting.name, format_value(value), source, setting.type, setting.doc, []))
    return out


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
def describe_configs(ctx: RequestContext, request: Any) -> Any:
    results = []
    for resource in request.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        try:
            _check_access(ctx, AclOperation.DESCRIBE_CONFIGS, resource)
            if resource.resource_type == RESOURCE_TOPIC:
                entry["configs"] = _topic_configs(
                    ctx, resource.resource_name, keys, bool(request.include_synonyms)
                )
            elif resource.resource_type == RESOURCE_BROKER:
                if resource.resource_name not in ("", str(ctx.broker.node_id)):
                    raise TopicError(INVALID_REQUEST, f"no broker {resource.resource_name!r}")
                entry["configs"] = _broker_configs(ctx, keys)
            else:
                raise TopicError(
                    INVALID_REQUEST, f"resource type {resource.resource_type} not supported"
                )
        except TopicError as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = str(exc)
        results.append(entry)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "results": results})


def _alter(ctx: RequestContext, request: Any, *, incremental: bool) -> Any:
    responses = []
    for resource in request.resources:
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
        }
        try:
            _check_access(ctx, AclOperation.ALTER_CONFIGS, resource)
            if resource.resource_type != RESOURCE_TOPIC:
                raise TopicError(INVALID_REQUEST, "broker settings are static: restart with --set")
            changes: dict[str, str | None] = {}
            for config in resource.configs:
                operation = getattr(config, "config_operation", OP_SET) if incremental else OP_SET
                if operation == OP_DELETE:
                    changes[config.name] = None
                elif operation == OP_SET:
                    changes[config.name] = config.value
                else:
                    raise TopicError(INVALID_CONFIG, "APPEND/SUBTRACT apply to list configs only")
            ctx.broker.topics.validate_configs({k: v for k, v in changes.items() if v is not None})
            if ctx.broker.topics.get(resource.resource_name) is None:
                raise TopicError(
                    UNKNOWN_TOPIC_OR_PARTITION, f"topic {resource.resource_name!r} does not exist"
                )
            if not request.validate_only:
                ctx.broker.topics.alter_configs(
                    resource.resource_name, changes, incremental=incremental
                )
        except TopicError as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = str(exc)
        responses.append(entry)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "responses": responses})


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
def alter_configs(ctx: RequestContext, request: Any) -> Any:
    return _alter(ctx, request, incremental=False)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return _alter(ctx, request, incremental=True)
