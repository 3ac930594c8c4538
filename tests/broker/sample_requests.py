"""A request of any API and version, built from kio's schema: one of each entity, so
that an answer must name what the request named."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import fields, is_dataclass
from typing import Any, get_args, get_origin

from kio.schema.errors import ErrorCode


def _entity(types: tuple[Any, ...]) -> type | None:
    for t in types:
        if is_dataclass(t):
            return t  # type: ignore[return-value]
    return None


def sample_entity(cls: type) -> Any:
    """An instance of kio entity ``cls``: every collection holds one item, strings are
    "t1", numbers 2 (a partition, an id), uuids fixed."""
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        kafka_type = f.metadata.get("kafka_type", "")
        options = (f.type, *get_args(f.type))
        tuple_of = next((get_args(t) for t in options if get_origin(t) is tuple), None)
        if tuple_of is not None:
            element = _entity(tuple_of)
            if element is not None:
                values[f.name] = (sample_entity(element),)
            else:
                text = isinstance(tuple_of[0], type) and issubclass(tuple_of[0], str)
                values[f.name] = ("t1",) if text else (2,)
        elif (element := _entity(options)) is not None:
            values[f.name] = sample_entity(element)
        elif kafka_type == "string":
            values[f.name] = "t1"
        elif kafka_type == "uuid":
            values[f.name] = uuid.UUID(int=7)
        elif kafka_type == "bool":
            values[f.name] = False
        elif kafka_type in ("bytes", "records"):
            values[f.name] = b""
        elif kafka_type.startswith("timedelta"):
            values[f.name] = datetime.timedelta(0)
        elif kafka_type == "datetime_i64":
            values[f.name] = None
        elif kafka_type == "float64":
            values[f.name] = 0.0
        elif kafka_type == "error_code":
            values[f.name] = ErrorCode.none
        else:
            values[f.name] = 2
    return cls(**values)


def error_codes(entity: Any, path: str = "") -> list[tuple[str, int]]:
    """Every error code in a decoded response, with its path."""
    found: list[tuple[str, int]] = []
    if is_dataclass(entity):
        for f in fields(entity):
            value = getattr(entity, f.name)
            if f.name in ("error_code", "partition_error_code"):
                found.append((path + f.name, int(value)))
            else:
                found.extend(error_codes(value, f"{path}{f.name}."))
    elif isinstance(entity, tuple):
        for item in entity:
            found.extend(error_codes(item, path))
    return found
