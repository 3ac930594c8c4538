"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and the broker.

Broker settings are static (given at start-up with `--set`); topic configs are
dynamic and persisted with the topic. Topic configs are described as Kafka
describes them: every config Kafka defines, its type and documentation, its
source (a topic override, a broker setting given at start-up, or the default)
and its synonyms (the override, then the broker setting it falls back to).

`min.insync.replicas` is reported as a Kafka 4.1 cluster reports it: with
eligible leader replicas (KIP-966, on by default in 4.1) the controller writes
the cluster-wide dynamic default ``min.insync.replicas`` (its static value, else 1)
when it activates (ConfigurationControlManager.maybeGenerateElrSafetyRecords),
so every topic without an override shows it with source
DYNAMIC_DEFAULT_BROKER_CONFIG, not as a default; its synonyms are that dynamic
default, the static setting if one was given, then Kafka's default. Odradek's
value is the broker's `min.insync.replicas` setting (static here: it cannot be
altered at run time).
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
    SETTINGS,
    STRING,
    TOPIC_CONFIGS,
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
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
CONFIG_TYPES = {BOOL: 1, STRING: 2, INT: 3, LONG: 5, DOUBLE: 6, LIST: 7, PASSWORD: 9}
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_CONFIG = 40
INVALID_REQUEST = 42
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
# Broker settings a Kafka 4.1 controller writes as cluster-wide dynamic defaults (see
# the module docstring): described with source DYNAMIC_DEFAULT_BROKER_CONFIG.
CLUSTER_DYNAMIC_DEFAULTS = frozenset({"min.insync.replicas"})


def _check_access(ctx: RequestContext, operation: AclOperation, resource: Any) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on the cluster for the broker."""
    if resource.resource_type == RESOURCE_TOPIC:
        if not ctx.authorize(operation, ResourceType.TOPIC, resource.resource_name):
            raise TopicError(TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    elif resource.resource_type == RESOURCE_BROKER and not ctx.authorize(
        operation, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        raise TopicError(CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


class _Describer:
    """Builds DescribeConfigs entries with the request's synonym / documentation choices."""

    def __init__(self, ctx: RequestContext, request: Any) -> None:
        self.ctx = ctx
        self.synonyms = bool(getattr(request, "include_synonyms", False))
        self.documentation = bool(getattr(request, "include_documentation", False))

    def entry(
        self,
        name: str,
        value: str | None,
        source: int,
        type_name: str,
        doc: str,
        synonyms: list[dict[str, Any]],
        *,
        read_only: bool,
    ) -> dict[str, Any]:
        secret = type_name == PASSWORD
        if secret:  # never show a secret, not even among the synonyms
            value = None
            synonyms = [{**s, "value": None} for s in synonyms]
        return {
            "name": name,
            "value": value,
            "read_only": read_only,
            "config_source": source,
            "is_default": source == SOURCE_DEFAULT,
            "is_sensitive": secret,
            "synonyms": synonyms if self.synonyms else [],
            "config_type": CONFIG_TYPES.get(type_name, 2),
            "documentation": doc if self.documentation else None,
        }

    def broker_source(self, setting_name: str) -> int:
        if setting_name in CLUSTER_DYNAMIC_DEFAULTS:
            return SOURCE_DYNAMIC_DEFAULT_BROKER
        return self.static_source(setting_name)

    def static_source(self, setting_name: str) -> int:
        return (
            SOURCE_DEFAULT
            if self.ctx.broker.config.is_default(setting_name)
            else SOURCE_STATIC_BROKER
        )

    def broker_synonyms(self, setting_name: str) -> list[dict[str, Any]]:
        """Where a broker setting's value comes from, most specific first (Kafka's order:
        dynamic cluster default, static setting, default)."""
        config = self.ctx.broker.config
        value = format_value(config[setting_name])
        if setting_name not in CLUSTER_DYNAMIC_DEFAULTS:
            return [
                {"name": setting_name, "value": value, "source": self.static_source(setting_name)}
            ]
        synonyms = [{"name": setting_name, "value": value, "source": SOURCE_DYNAMIC_DEFAULT_BROKER}]
        if not config.is_default(setting_name):
            synonyms.append({"name": setting_name, "value": value, "source": SOURCE_STATIC_BROKER})
        default = format_value(SETTINGS[setting_name].default)
        synonyms.append({"name": setting_name, "value": default, "source": SOURCE_DEFAULT})
        return synonyms

    def topic(self, name: str, keys: set[str] | None) -> list[dict[str, Any]]:
        manager = self.ctx.broker.topics
        topic = manager.get(name)
        if topic is None:
            raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        out = []
        for config_name, value, is_default in manager.effective_topic_configs(topic):
            if keys is not None and config_name not in keys:
                continue
            definition = TOPIC_CONFIGS[config_name]
            synonyms = []
            if not is_default:
                synonyms.append(
                    {"name": config_name, "value": value, "source": SOURCE_DYNAMIC_TOPIC}
                )
            if definition.synonym is not None:
                synonyms.extend(self.broker_synonyms(definition.synonym))
            if not is_default:
                source = SOURCE_DYNAMIC_TOPIC
            elif definition.synonym is not None:
                source = self.broker_source(definition.synonym)
            else:
                source = SOURCE_DEFAULT
            out.append(
                self.entry(
                    config_name,
                    value,
                    source,
                    definition.type,
                    definition.doc,
                    synonyms,
                    read_only=False,
                )
            )
        return out

    def broker(self, keys: set[str] | None) -> list[dict[str, Any]]:
        config = self.ctx.broker.config
        rows: list[tuple[str, str, int, str, str]] = [
            (s.name, format_value(value), self.broker_source(s.name), s.type, s.doc)
            for s, value in config.items()
        ]
        # The listeners actually opened replace settings left empty (the `--listen` form).
        runtime = [
            row for row in self._runtime_rows() if row[0] not in SETTINGS or not config[row[0]]
        ]
        replaced = {row[0] for row in runtime}
        rows = [row for row in rows if row[0] not in replaced] + runtime
        out = []
        for name, value, source, type_name, doc in sorted(rows):
            if keys is not None and name not in keys:
                continue
            synonyms = (
                self.broker_synonyms(name)
                if name in CLUSTER_DYNAMIC_DEFAULTS
                else [{"name": name, "value": value, "source": source}]
            )
            out.append(self.entry(name, value, source, type_name, doc, synonyms, read_only=True))
        return out

    def _runtime_rows(self) -> list[tuple[str, str, int, str, str]]:
        """Broker configs that come from the command line rather than `--set`: the ones
        clients and tools read to find the broker (listeners, log dirs, ids)."""
        broker = self.ctx.broker
        listener = ",".join(f"{ln.name}://{ln.host}:{ln.port}" for ln in broker.listeners)
        advertised = ",".join(
            f"{ln.name}://{ln.advertised_host}:{ln.advertised_port}" for ln in broker.listeners
        )
        node_source = self.broker_source("node.id")
        return [
            (
                "listeners",
                listener,
                SOURCE_STATIC_BROKER,
                STRING,
                "Address listened on (--listen).",
            ),
            (
                "advertised.listeners",
                advertised,
                SOURCE_STATIC_BROKER,
                STRING,
                "Address clients are told to use (--advertise, else --listen).",
            ),
            (
                "log.dirs",
                ",".join(str(path) for path in broker.topics.log_dirs.paths),
                SOURCE_STATIC_BROKER,
                STRING,
                "Where partition logs live (--data-dir or log.dirs); the metadata in the first.",
            ),
            ("broker.id", str(broker.node_id), node_source, INT, "Same as node.id."),
            (
                "process.roles",
                "broker,controller",
                SOURCE_STATIC_BROKER,
                LIST,
                "One Odradek node is both the broker and the controller.",
            ),
        ]


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
def describe_configs(ctx: RequestContext, request: Any) -> Any:
    describer = _Describer(ctx, request)
    results = []
    for resource in request.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys else None
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
                entry["configs"] = describer.topic(resource.resource_name, keys)
            elif resource.resource_type == RESOURCE_BROKER:
                _check_broker_name(ctx, resource.resource_name)
                entry["configs"] = describer.broker(keys)
            else:
                raise TopicError(
                    INVALID_REQUEST, f"resource type {resource.resource_type} not supported"
                )
        except TopicError as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = str(exc)
        results.append(entry)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "results": results})


def _check_broker_name(ctx: RequestContext, name: str) -> None:
    if name not in ("", str(ctx.broker.node_id)):
        raise TopicError(
            INVALID_REQUEST, f"unexpected broker id {name!r}, this is broker {ctx.broker.node_id}"
        )


def _list_change(ctx: RequestContext, topic_name: str, config: Any, operation: int) -> str:
    """APPEND / SUBTRACT on a list config, as Kafka does: applied to the current value."""
    definition = TOPIC_CONFIGS.get(config.name)
    if definition is None or definition.type != LIST:
        verb = "append" if operation == OP_APPEND else "subtract"
        raise TopicError(
            INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {config.name}"
        )
    manager = ctx.broker.topics
    topic = manager.get(topic_name)
    if topic is None:
        raise TopicError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic_name!r} does not exist")
    current: list[str] = list(manager.resolved_configs(topic)[config.name])
    items = [v.strip() for v in (config.value or "").split(",") if v.strip()]
    if operation == OP_APPEND:
        updated = current + [v for v in items if v not in current]
    else:
        updated = [v for v in current if v not in items]
    return ",".join(dict.fromkeys(updated))


def _changes(ctx: RequestContext, resource: Any, *, incremental: bool) -> dict[str, str | None]:
    """The requested changes as {name: new value or None to delete}."""
    changes: dict[str, str | None] = {}
    for config in resource.configs:
        if config.name in changes:
            raise TopicError(INVALID_REQUEST, f"duplicate config key {config.name!r}")
        operation = int(getattr(config, "config_operation", OP_SET)) if incremental else OP_SET
        if operation == OP_DELETE:
            changes[config.name] = None
        elif operation == OP_SET:
            if config.value is None:
                raise TopicError(
                    INVALID_CONFIG, f"Null value not supported for topic config {config.name}"
                )
            changes[config.name] = config.value
        elif operation in (OP_APPEND, OP_SUBTRACT):
            changes[config.name] = _list_change(ctx, resource.resource_name, config, operation)
        else:
            raise TopicError(INVALID_REQUEST, f"unknown config operation {operation}")
    return changes


async def _alter(ctx: RequestContext, request: Any, *, incremental: bool) -> Any:
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
            if resource.resource_type == RESOURCE_BROKER:
                _check_broker_name(ctx, resource.resource_name)
                raise TopicError(INVALID_REQUEST, "broker settings are static: restart with --set")
            if resource.resource_type != RESOURCE_TOPIC:
                raise TopicError(
                    INVALID_REQUEST, f"resource type {resource.resource_type} not supported"
                )
            changes = _changes(ctx, resource, incremental=incremental)
            cluster = ctx.broker.cluster
            clean = ctx.broker.topics.alter_configs(
                resource.resource_name,
                changes,
                incremental=incremental,
                # in a cluster the change is stored in etcd; every broker takes it from there
                validate_only=bool(request.validate_only) or cluster is not None,
            )
            if cluster is not None and not request.validate_only:
                await cluster.set_topic_configs(resource.resource_name, clean)
        except TopicError as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = str(exc)
        responses.append(entry)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "responses": responses})


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter(ctx, request, incremental=False)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await _alter(ctx, request, incremental=True)
