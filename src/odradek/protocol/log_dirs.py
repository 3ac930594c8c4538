"""DescribeLogDirs (API 35) with Odradek's damage report: one tagged field each way.

Kafka's protocol has no field for data a broker holds but cannot serve: a Kafka
broker takes a whole log directory offline on an I/O error (KAFKA_STORAGE_ERROR)
and never reads past a corrupt batch, so nothing needs reporting per range. An
Odradek broker keeps serving around a damaged range (``odradek.log.segment``),
so an operator needs to see which offsets answer CORRUPT_MESSAGE, from any
machine that can reach the broker. The damage lives in the log directory, next
to what DescribeLogDirs already reports per partition (its size on disk), so it
is reported there, as a tagged field (the protocol's way to extend a flexible
message, v2 and later):

- the request opts in with a tagged bool ``include_damage`` (tag
  ``DAMAGE_TAG``); Kafka brokers skip tags they do not know, so asking a
  Kafka broker is harmless and answers no damage;
- the response then carries, per partition, a tagged list ``damage`` of the
  ranges set aside: segment base offset, byte range, offsets
  ``[first_offset, end_offset)`` (an empty one is a skipped range, not a
  quarantine) and the reason. It is written only when asked for and non-empty.

The opt-in matters: a client that does not know the tag never receives it.
The Java client and librdkafka skip unknown tags as the protocol says, but kio
(which Odradek's own older clients use) refuses them, so an unrequested tag
would break such a client. Other places were weighed and rejected: a topic
config entry (DescribeConfigs) is a setting, not state, and would show up in
config diffs; the Prometheus endpoint (which reports the same figures) is not
the Kafka protocol and may be off or bound elsewhere; Metadata's offline
replicas would make clients stop fetching the whole partition.

``DAMAGE_TAG`` is far above the tags Kafka numbers from 0 for its own fields.
"""

from __future__ import annotations

from dataclasses import field, fields, make_dataclass
from functools import cache
from importlib import import_module
from typing import Any

from kio.static.constants import EntityType
from kio.static.primitive import i16, i64

__all__ = ["DAMAGE_TAG", "FIRST_FLEXIBLE_VERSION", "extended_request", "extended_response"]

DAMAGE_TAG = 0x4F44  # "OD"
FIRST_FLEXIBLE_VERSION = 2
_API_KEY = 35


def _schema(version: int, side: str) -> Any:
    return import_module(f"kio.schema.describe_log_dirs.v{version}.{side}")


def _entity(
    name: str, version: int, header: Any, kind: Any, base: type | None, spec: list[Any]
) -> Any:
    namespace = {
        "__type__": kind,
        "__version__": i16(version),
        "__flexible__": True,
        "__api_key__": i16(_API_KEY),
        "__header_schema__": header,
    }
    return make_dataclass(
        name,
        spec,
        bases=(base,) if base is not None else (),
        namespace=namespace,
        frozen=True,
        slots=True,
        kw_only=True,
    )


def _retyped(cls: type, name: str, element: type) -> tuple[str, Any, Any]:
    """``cls``'s field ``name`` as a tuple of ``element`` (an extended entity)."""
    original = next(f for f in fields(cls) if f.name == name)
    return name, tuple[element, ...], field(metadata=original.metadata)  # type: ignore[valid-type]


@cache
def extended_request(version: int) -> type | None:
    """The DescribeLogDirs request of ``version`` with the ``include_damage`` tag, or
    None for a version that cannot carry tags."""
    if version < FIRST_FLEXIBLE_VERSION:
        return None
    base = _schema(version, "request").DescribeLogDirsRequest
    return _entity(
        "DescribeLogDirsRequest",
        version,
        base.__header_schema__,
        EntityType.request,
        base,
        [
            (
                "include_damage",
                bool,
                field(default=False, metadata={"kafka_type": "bool", "tag": DAMAGE_TAG}),
            )
        ],
    )


@cache
def extended_response(version: int) -> type | None:
    """The DescribeLogDirs response of ``version`` whose partitions may carry ``damage``,
    or None for a version that cannot carry tags."""
    if version < FIRST_FLEXIBLE_VERSION:
        return None
    schema = _schema(version, "response")
    header = schema.DescribeLogDirsResponse.__header_schema__
    nested = EntityType.nested
    damage = _entity(
        "DescribeLogDirsDamage",
        version,
        header,
        nested,
        None,
        [
            ("segment", i64, field(metadata={"kafka_type": "int64"})),
            ("position", i64, field(metadata={"kafka_type": "int64"})),
            ("end_position", i64, field(metadata={"kafka_type": "int64"})),
            ("first_offset", i64, field(metadata={"kafka_type": "int64"})),
            ("end_offset", i64, field(metadata={"kafka_type": "int64"})),
            ("reason", str, field(metadata={"kafka_type": "string"})),
        ],
    )
    partition = _entity(
        "DescribeLogDirsPartition",
        version,
        header,
        nested,
        schema.DescribeLogDirsPartition,
        [("damage", tuple[damage, ...], field(default=(), metadata={"tag": DAMAGE_TAG}))],  # type: ignore[valid-type]
    )
    topic = _entity(
        "DescribeLogDirsTopic",
        version,
        header,
        nested,
        schema.DescribeLogDirsTopic,
        [_retyped(schema.DescribeLogDirsTopic, "partitions", partition)],
    )
    result = _entity(
        "DescribeLogDirsResult",
        version,
        header,
        nested,
        schema.DescribeLogDirsResult,
        [_retyped(schema.DescribeLogDirsResult, "topics", topic)],
    )
    return _entity(
        "DescribeLogDirsResponse",
        version,
        header,
        EntityType.response,
        schema.DescribeLogDirsResponse,
        [_retyped(schema.DescribeLogDirsResponse, "results", result)],
    )
