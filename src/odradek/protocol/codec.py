"""Request and response encoding over kio's generated Kafka schemas.

The request header is parsed by hand: it is tiny, the same in v1 and v2 up to
the client id, and parsing it ourselves lets the broker answer (or refuse) an
API/version kio has no schema for. Bodies are read and written by kio.
"""

from __future__ import annotations

import datetime
import io
import struct
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from typing import Any, cast, get_args, get_origin

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import Entity

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.log_dirs import extended_request, extended_response

_HEADER_FIXED = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_CORRELATION = struct.Struct(">i")


class DecodeError(Exception):
    """A frame that cannot be a valid request; the connection must close."""


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A request body serialized already (a hot path's hand-written encoder, e.g.
    ``protocol.produce``); ``encode_request`` frames it as it is."""

    payload: bytes
    flexible: bool


# Not frozen: built for every request, and a frozen dataclass's __init__ (one
# object.__setattr__ per field) costs four times a plain one. Treat it as read-only.
@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def _read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise DecodeError("truncated varint in request header")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise DecodeError("varint too long in request header")


def parse_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """Parse the v1 part of the header; return it and where the rest starts (``frame``:
    any buffer of bytes)."""
    if len(frame) < _HEADER_FIXED.size:
        raise DecodeError(f"frame of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, client_len = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id: str | None = None
    if client_len >= 0:
        end = pos + client_len
        if end > len(frame):
            raise DecodeError("client id runs past the end of the frame")
        try:
            client_id = str(frame[pos:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError("client id is not UTF-8") from exc
        pos = end
    elif client_len != -1:
        raise DecodeError(f"negative client id length {client_len}")
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def skip_tagged_fields(frame: bytes | bytearray | memoryview, pos: int) -> int:
    """Skip a tagged-field section (header v2); return the position after it."""
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise DecodeError("tagged field runs past the end of the frame")
    return pos


@cache
def request_type(api_key: int, version: int) -> type[Entity]:
    if api_key == ApiKey.DESCRIBE_LOG_DIRS and (extended := extended_request(version)):
        return cast(type[Entity], extended)  # Odradek's damage report (protocol.log_dirs)
    return load_request_schema(api_key, version)


@cache
def response_type(api_key: int, version: int) -> type[Entity]:
    if api_key == ApiKey.DESCRIBE_LOG_DIRS and (extended := extended_response(version)):
        return cast(type[Entity], extended)
    return load_response_schema(api_key, version)


@cache
def _reader(entity_type: type[Entity]) -> Any:
    return entity_reader(entity_type)


@cache
def _writer(entity_type: type[Entity]) -> Any:
    return entity_writer(entity_type)


def decode_request_body(header: RequestHeader, frame: bytes | memoryview, pos: int) -> Entity:
    """Read the body of a request whose schema kio has (caller checked the version).
    ``frame``: bytes or a read-only view (kio refuses a writable buffer)."""
    cls = request_type(header.api_key, header.api_version)
    try:
        if cls.__flexible__:
            pos = skip_tagged_fields(frame, pos)
        body, _size = _reader(cls)(frame, pos)
    except DecodeError:
        raise
    except Exception as exc:  # kio raises assorted errors on malformed bytes
        raise DecodeError(
            f"malformed {ApiKey(header.api_key).name} v{header.api_version}: {exc}"
        ) from exc
    # Trailing bytes are ignored, as Kafka's own parser does: librdkafka sends some
    # (Metadata v12 with a null topic list carries three) and Kafka accepts them.
    return body


def response_header_is_flexible(api_key: int, version: int) -> bool:
    """Response header v1 for flexible versions, except ApiVersions (always v0)."""
    if api_key == ApiKey.API_VERSIONS:
        return False
    return bool(response_type(api_key, version).__flexible__)


def encode_response(api_key: int, version: int, correlation_id: int, body: Entity) -> bytes:
    """Frame a response: size, header (v0 or v1), body."""
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    out.write(_CORRELATION.pack(correlation_id))
    if response_header_is_flexible(api_key, version):
        out.write(b"\x00")  # no tagged fields
    _writer(type(body))(out, body)
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def encode_request(header: RequestHeader, body: Entity | EncodedBody) -> bytes:
    """Frame a request (used by tests and Odradek's client)."""
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")
    client = header.client_id.encode() if header.client_id is not None else None
    out.write(
        _HEADER_FIXED.pack(
            header.api_key,
            header.api_version,
            header.correlation_id,
            -1 if client is None else len(client),
        )
    )
    if client:
        out.write(client)
    if isinstance(body, EncodedBody):
        if body.flexible:
            out.write(b"\x00")  # no tagged fields in the header
        out.write(body.payload)
    else:
        if type(body).__flexible__:
            out.write(b"\x00")
        _writer(type(body))(out, body)
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Entity]:
    """Read a response frame payload (without size prefix): (correlation id, body)."""
    (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
    pos = 4
    if response_header_is_flexible(api_key, version):
        pos = skip_tagged_fields(frame, pos)
    custom = _CUSTOM_RESPONSE_READERS.get((api_key, version))
    reader = custom if custom is not None else _reader(response_type(api_key, version))
    body, _size = reader(frame, pos)
    return correlation_id, body


def _describe_transactions_v0(frame: bytes, pos: int) -> tuple[Any, int]:
    from odradek.protocol.describe_transactions import read_describe_transactions_v0

    return read_describe_transactions_v0(frame, pos)


# Responses kio cannot read as Kafka writes them (see each reader's module).
_CUSTOM_RESPONSE_READERS: dict[tuple[int, int], Callable[[bytes, int], tuple[Any, int]]] = {
    (65, 0): _describe_transactions_v0,  # DescribeTransactions: start time -1
}


# --- building version-specific entities from plain dicts ---------------------------------
#
# Handlers describe a response once, as nested dicts holding the union of the fields
# of every version; `build` keeps the fields the target version has. This keeps one
# handler per API instead of one per (API, version).


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    required: bool
    element: type | None  # nested entity type, for entity or tuple-of-entity fields
    is_tuple: bool
    convert: Callable[[Any], Any] | None  # int milliseconds -> kio's rich scalar types


def _ms_to_datetime(ms: int) -> datetime.datetime | None:
    """kio models Kafka's `-1 = no timestamp` as None."""
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _ms_to_timedelta(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "error_code": ErrorCode,  # kio writes error codes from ErrorCode members only
    "datetime_i64": _ms_to_datetime,
    "timedelta_i32": _ms_to_timedelta,
    "timedelta_i64": _ms_to_timedelta,
}


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    plans = []
    for f in fields(cls):
        element: type | None = None
        is_tuple = False
        # A field is `X`, `tuple[X, ...]`, or either of those `| None`.
        for candidate in (f.type, *get_args(f.type)):
            if get_origin(candidate) is tuple:
                is_tuple = True
                args = get_args(candidate)
                if args and is_dataclass(args[0]):
                    element = cast(type, args[0])
                break
            if is_dataclass(candidate):
                element = cast(type, candidate)
                break
        required = f.default is MISSING and f.default_factory is MISSING
        convert = _CONVERTERS.get(f.metadata.get("kafka_type", ""))
        plans.append(_FieldPlan(f.name, required, element, is_tuple, convert))
    return tuple(plans)


def build(cls: type, values: dict[str, Any]) -> Any:
    """Instantiate kio entity `cls` from `values`, ignoring fields `cls` lacks."""
    kwargs: dict[str, Any] = {}
    for plan in _plan(cls):
        if plan.name not in values:
            if plan.required:
                raise KeyError(f"{cls.__module__}.{cls.__name__} needs field {plan.name!r}")
            continue
        value = values[plan.name]
        if plan.element is not None and value is not None:
            if plan.is_tuple:
                value = tuple(
                    build(plan.element, item) if isinstance(item, dict) else item for item in value
                )
            elif isinstance(value, dict):
                value = build(plan.element, value)
        elif plan.is_tuple and value is not None and not isinstance(value, tuple):
            value = tuple(value)
        elif plan.convert is not None and isinstance(value, int):
            value = plan.convert(value)
        kwargs[plan.name] = value
    return cls(**kwargs)
