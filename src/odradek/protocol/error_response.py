"""The answer to a request whose handler failed: Kafka's ``getErrorResponse``, from the schemas.

Kafka answers a request its handler threw on with ``request.getErrorResponse(e)``
(Kafka 4.1, RequestHandlerHelper.sendErrorOrCloseConnection): each AbstractRequest
subclass builds a response naming what the request named (its topics, partitions,
groups, resources...) with the error code set, or sets the response's top-level
error code. It closes the connection only where that method returns null: a
Produce with acks=0, whose producer expects no answer.

One generic walk does the same here from kio's request and response schemas:
``error_response`` mirrors the request's entities into the response type,

- every ``error_code`` is set (``UNKNOWN_SERVER_ERROR`` for a failed handler, with no
  message, as Kafka's ApiError.fromThrowable keeps internals to itself);
- the walk stops at the first level that carries an error code: a response with a
  top-level error code gets that alone (JoinGroup, DescribeCluster, OffsetFetch v2-7,
  AddPartitionsToTxn v4+...), a response of per-entity errors gets them on the
  request's entities and nothing below (Metadata's topics with no partitions,
  OffsetFetch v8's groups). Two APIs differ in Kafka and here too: Fetch below v13
  also sets every partition's error (clients of those versions read it there), and
  Metadata leaves its top-level code (v13's rebootstrap signal) alone;
- an entity keeps the fields that say which entity it is (names, ids, partition
  indexes, resource type and name), under the response's name for them (Fetch's
  request says ``partition``, its response ``partition_index``); every other field
  takes the schema's default, or -1 for offsets, epochs, producer and node ids
  (Kafka's INVALID_OFFSET, NO_PRODUCER_ID...).

A request collection feeds the response collection of the same name (or a known
alias); else the request's collections that no other response field took, as long
as their entities can say which one they are (DescribeLogDirs v1-2's results are
per log directory, which the request's topics cannot fill: Kafka answers none).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from dataclasses import MISSING, Field, fields, is_dataclass
from functools import cache
from typing import Any, get_args, get_origin

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import build, response_type
from odradek.protocol.errors import ErrorCode

# The fields that carry an entity's error (AddPartitionsToTxn v0-3 names its own).
_ERROR_FIELDS = frozenset({"error_code", "partition_error_code"})
_MESSAGE_FIELDS = frozenset({"error_message"})
# Fields that identify an entity; an error response keeps them.
_IDENTITY = frozenset(
    {
        "name",
        "topic",
        "topic_name",
        "topic_id",
        "partition_index",
        "partition",
        "partition_id",
        "index",
        "group_id",
        "key",
        "transactional_id",
        "resource_type",
        "resource_name",
        "user",
        "log_dir",
        "producer_id",  # WriteTxnMarkers answers per producer
    }
)
# The same identity under the names other schemas give it.
_SAME_AS: dict[str, tuple[str, ...]] = {
    "partition_index": ("partition", "index", "partition_id"),
    "partition": ("partition_index", "index"),
    "partition_id": ("partition_index", "partition"),
    "index": ("partition_index", "partition"),
    "name": ("topic", "topic_name"),
    "topic": ("name", "topic_name"),
    "topic_name": ("name", "topic"),
    "user": ("name",),
}
# A response collection fed by a request collection of another name where the
# request has several it could be (Fetch also lists forgotten topics).
_COLLECTION_ALIASES: dict[str, tuple[str, ...]] = {"responses": ("topics", "topic_data")}
# What a top-level response copies from its request: Fetch's session.
_TOP_LEVEL_COPIES = frozenset({"session_id"})
# Unknown values without a schema default: Kafka writes -1 in its error responses.
_MINUS_ONE_SUFFIXES = (
    "offset",
    "high_watermark",
    "producer_id",
    "producer_epoch",
    "leader_epoch",
    "leader_id",
    "node_id",
    "timestamp",
    "generation_id",
)
_ZERO_BY_KAFKA_TYPE: dict[str, Any] = {
    "string": "",
    "bool": False,
    "bytes": b"",
    "records": None,
    "float64": 0.0,
    "uuid": None,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
}
# kio has no value for a non-nullable timestamp's -1: the instant 1 ms before the epoch
# is written as -1 (as the DescribeTransactions handler does).
_NO_TIMESTAMP = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) - datetime.timedelta(
    milliseconds=1
)


def _top_level_error(api_key: int, version: int) -> bool:
    """Whether a top-level error code is set (Kafka's Metadata leaves it to rebootstrap)."""
    return api_key != ApiKey.METADATA


def _entities_below_top_level(api_key: int, version: int) -> bool:
    """Whether entities get errors under a top-level one (Kafka's Fetch below v13)."""
    return api_key == ApiKey.METADATA or (api_key == ApiKey.FETCH and version < 13)


def closes_instead(api_key: int, request: Any) -> bool:
    """Whether a failed handler closes the connection instead of answering.

    Kafka's getErrorResponse is null only for a Produce with acks=0: its producer reads
    no response, so closing the connection is the one way to tell it something failed.
    """
    return api_key == ApiKey.PRODUCE and getattr(request, "acks", None) == 0


def answer_version(api_key: int, version: int) -> int:
    """The version an error response is written in: its request's, but v0 for ApiVersions
    (KIP-511: a client reads a failed ApiVersions answer as v0, whatever it asked in;
    Kafka's ApiVersionsResponse.parse falls back to v0, kafka-python reads only v0)."""
    return 0 if api_key == ApiKey.API_VERSIONS else version


def error_response(
    api_key: int, version: int, request: Any, error: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
) -> Any:
    """The response answering ``request`` with ``error``, of type
    ``response_type(api_key, answer_version(api_key, version))``."""
    version = answer_version(api_key, version)
    cls = response_type(api_key, version)
    values = _mirror(
        request,
        cls,
        int(error),
        top_level=True,
        set_error=_top_level_error(api_key, version),
        descend_past_error=_entities_below_top_level(api_key, version),
    )
    return build(cls, values)


# --- the walk ------------------------------------------------------------------------------


def _mirror(
    source: Any,
    cls: type,
    error: int,
    *,
    top_level: bool = False,
    set_error: bool = True,
    descend_past_error: bool = False,
) -> dict[str, Any]:
    """Values for entity type ``cls`` answering request entity ``source`` with ``error``."""
    plan = _fields(cls)
    carries_error = any(f.name in _ERROR_FIELDS for f in plan)
    mirror_collections = not carries_error or descend_past_error
    collections = _collections(source)
    scalar_slot = _scalar_slot(source, cls) if _is_scalar(source) else None
    # Response collections take the request collection of their own name first.
    taken = {f.name for f in plan if f.name in collections and _element(f) is not None}
    values: dict[str, Any] = {}
    for f in plan:
        element = _element(f)
        if f.name in _ERROR_FIELDS:
            values[f.name] = error if set_error else 0
        elif f.name in _MESSAGE_FIELDS:
            values[f.name] = None if _nullable(f) else ""
        elif element is not None and _is_tuple(f):
            items: list[dict[str, Any]] = []
            if mirror_collections and _bears_errors(element):
                for item in _sources_for(f.name, collections, taken, element):
                    items.append(_mirror(item, element, error))
            values[f.name] = tuple(items)
        elif element is not None:
            values[f.name] = None if _nullable(f) else _mirror(None, element, error)
        elif _is_tuple(f):
            values[f.name] = None if _nullable(f) else ()
        elif f.name == scalar_slot:
            values[f.name] = source
        else:
            copied = _identity(source, f, top_level)
            values[f.name] = copied if copied is not _NOTHING else _default(f)
    return values


_NOTHING = object()


def _sources_for(
    name: str, collections: dict[str, Any], taken: set[str], element: type
) -> Iterator[Any]:
    """The request entities that answer as ``element`` entities in response field ``name``."""
    if name in collections:
        yield from _answerable(collections[name], element)
        return
    for alias in _COLLECTION_ALIASES.get(name, ()):
        if alias in collections:
            yield from _answerable(collections[alias], element)
            return
    for other, items in collections.items():
        if other not in taken:
            yield from _answerable(items, element)


def _answerable(items: Any, element: type) -> Iterator[Any]:
    """Those of ``items`` an ``element`` can name; a grouping the response lacks is
    flattened (AlterReplicaLogDirs asks per directory, answers per topic)."""
    keys = [f for f in _fields(element) if f.name in _IDENTITY]
    for item in items:
        if _is_scalar(item):
            if _scalar_slot(item, element) is not None:
                yield item
        elif not keys or any(_identity(item, k, False) is not _NOTHING for k in keys):
            yield item
        else:
            for nested in _collections(item).values():
                yield from _answerable(nested, element)


def _identity(source: Any, f: Field[Any], top_level: bool) -> Any:
    """What request entity ``source`` says about identity field ``f``, or _NOTHING."""
    if source is None or _is_scalar(source):
        return _NOTHING  # a scalar item fills one field: see _scalar_slot
    if top_level:
        if f.name not in _TOP_LEVEL_COPIES:
            return _NOTHING
    elif f.name not in _IDENTITY:
        return _NOTHING
    kafka_type = f.metadata.get("kafka_type", "")
    for name in (f.name, *_SAME_AS.get(f.name, ())):
        value = getattr(source, name, None)
        if value is not None and _kind_matches(value, kafka_type):
            return value
    return _NOTHING


def _scalar_slot(item: Any, cls: type) -> str | None:
    """The field of ``cls`` a request's bare name or index fills (DescribeGroups lists
    group ids, OffsetFetch partition indexes): its first identity field of that kind."""
    for f in _fields(cls):
        if f.name in _IDENTITY and _kind_matches(item, f.metadata.get("kafka_type", "")):
            return f.name
    return None


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int | uuid.UUID)


def _kind_matches(value: Any, kafka_type: str) -> bool:
    if isinstance(value, bool):
        return kafka_type == "bool"
    if isinstance(value, str):
        return kafka_type == "string"
    if isinstance(value, int):
        return kafka_type.startswith("int") or kafka_type.startswith("uint")
    if isinstance(value, uuid.UUID):
        return kafka_type == "uuid"
    return False


# --- schema facts ---------------------------------------------------------------------------


@cache
def _fields(cls: type) -> tuple[Field[Any], ...]:
    return fields(cls)  # type: ignore[arg-type]


def _candidates(f: Field[Any]) -> tuple[Any, ...]:
    return (f.type, *get_args(f.type))


def _is_tuple(f: Field[Any]) -> bool:
    return any(get_origin(c) is tuple for c in _candidates(f))


def _nullable(f: Field[Any]) -> bool:
    return type(None) in get_args(f.type)


def _element(f: Field[Any]) -> type | None:
    """The entity type of an entity field, or of a collection of entities."""
    for c in _candidates(f):
        if get_origin(c) is tuple:
            args = get_args(c)
            return args[0] if args and is_dataclass(args[0]) else None
        if is_dataclass(c):
            return c  # type: ignore[return-value]
    return None


@cache
def _bears_errors(cls: type) -> bool:
    """Whether entities of ``cls`` (or their own entities) carry an error code."""
    for f in _fields(cls):
        if f.name in _ERROR_FIELDS:
            return True
        element = _element(f)
        if element is not None and element is not cls and _bears_errors(element):
            return True
    return False


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    if _nullable(f):
        return None
    kafka_type = f.metadata.get("kafka_type", "")
    if kafka_type == "datetime_i64":
        return _NO_TIMESTAMP
    if kafka_type in _ZERO_BY_KAFKA_TYPE:
        return _ZERO_BY_KAFKA_TYPE[kafka_type]
    if f.name.endswith(_MINUS_ONE_SUFFIXES):
        return -1
    return 0


def _collections(source: Any) -> dict[str, Any]:
    """The request entity's collections (kio entities, or the hand-read Produce and Fetch
    requests), by field name."""
    if source is None or _is_scalar(source):
        return {}
    names: list[str] = []
    if is_dataclass(source):
        names = [f.name for f in fields(source)]
    else:
        for klass in type(source).__mro__:
            names.extend(getattr(klass, "__slots__", ()))
    found = {}
    for name in names:
        value = getattr(source, name, None)
        if isinstance(value, tuple | list):
            found[name] = value
    return found
