"""The source's output schema and Arrow RecordBatch building.

The schema is Spark's Kafka source schema. Spark checks a returned
``pyarrow.RecordBatch`` against it exactly (names, order, types), so the
timestamp column must be ``timestamp[us, tz=UTC]``, not a naive timestamp.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key:string,value:binary>>"

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def schema_ddl(include_headers: bool) -> str:
    return f"{SCHEMA_DDL}, {HEADERS_DDL}" if include_headers else SCHEMA_DDL


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


class BatchBuilder:
    """Collects records of one partition column by column and emits RecordBatches."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.ts_types: list[int] = []
        self.headers: list[Any] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, records: Iterable[Any]) -> None:
        """ConsumerRecord-like objects (offset, key, value, timestamp, headers, timestamp_type)."""
        keys, values, offsets = self.keys, self.values, self.offsets
        tss, types, headers = self.timestamps, self.ts_types, self.headers
        with_headers = self.include_headers
        for r in records:
            keys.append(r.key)
            values.append(r.value)
            offsets.append(r.offset)
            tss.append(r.timestamp * 1000)
            types.append(r.timestamp_type)
            if with_headers:
                headers.append([{"key": k, "value": v} for k, v in r.headers])

    def build(self) -> pa.RecordBatch:
        n = len(self.offsets)
        columns = [
            pa.array(self.keys, type=pa.binary()),
            pa.array(self.values, type=pa.binary()),
            pa.array([self.topic] * n, type=pa.string()) if n else pa.array([], type=pa.string()),
            pa.array([self.partition] * n, type=pa.int32()),
            pa.array(self.offsets, type=pa.int64()),
            pa.array(self.timestamps, type=pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array(self.ts_types, type=pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self.headers, type=HEADER_TYPE))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)
