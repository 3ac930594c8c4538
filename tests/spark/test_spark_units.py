"""Pure parts of the Spark source and sink: no SparkSession, no broker."""

from __future__ import annotations

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from odradek.client import TopicPartition
from odradek.spark.arrow import BatchBuilder, arrow_schema
from odradek.spark.options import (
    OptionError,
    ReadOptions,
    Subscription,
    WriteOptions,
    parse_duration_s,
)
from odradek.spark.planning import (
    OffsetRange,
    from_json,
    ranges,
    rate_limit,
    split,
    to_json,
)
from odradek.spark.writer import STAGED_SCHEMA, SinkError, normalize, validate_schema

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:1"}
T = TopicPartition


def test_offsets_json_round_trip_uses_string_keys():
    offsets = {T("a", 1): 5, T("a", 0): 3, T("b", 0): 7}
    js = to_json(offsets)
    assert js == {"a": {"0": 3, "1": 5}, "b": {"0": 7}}
    assert from_json(js) == offsets
    assert from_json(None) == {}


def test_rate_limit_takes_exactly_the_limit_in_proportion():
    start = {T("t", 0): 0, T("t", 1): 0, T("t", 2): 0}
    end = {T("t", 0): 1000, T("t", 1): 1000, T("t", 2): 1000}
    batches = 0
    while start != end:
        nxt = rate_limit(start, end, 1000)
        backlog = sum(end[tp] - start[tp] for tp in end)
        assert sum(nxt[tp] - start[tp] for tp in end) == min(1000, backlog)
        start = nxt
        batches += 1
    assert batches == 3  # Spark's source needs 4 here (floor rounding leaves 3 rows)
    skewed = rate_limit({T("t", 0): 0, T("t", 1): 0}, {T("t", 0): 900, T("t", 1): 100}, 100)
    assert skewed == {T("t", 0): 90, T("t", 1): 10}


def test_rate_limit_never_passes_the_end():
    nxt = rate_limit({T("t", 0): 0, T("t", 1): 0}, {T("t", 0): 1, T("t", 1): 10}, 5)
    assert nxt[T("t", 0)] <= 1 and sum(nxt.values()) == 5


def test_split_by_min_partitions():
    parts = ranges({T("t", 0): 0, T("t", 1): 5}, {T("t", 0): 100, T("t", 1): 5, T("t", 2): 9})
    assert parts == [OffsetRange("t", 0, 0, 100)]  # empty and unknown-start ranges dropped
    pieces = split(parts, 4)
    assert len(pieces) == 4
    assert [p.from_offset for p in pieces] == [0, 25, 50, 75]
    assert pieces[-1].until_offset == 100
    assert split(parts, None) == parts


def test_options_are_case_insensitive_and_validated():
    opts = ReadOptions.parse(
        {
            **BOOT,
            "subscribe": "a, b",
            "maxoffsetspertrigger": "10",
            "includeheaders": "true",
            "kafka.max.poll.records": "7",
            "maxtriggerdelay": "30s",
            "minoffsetspertrigger": "5",
        },
        streaming=True,
    )
    assert opts.subscription == Subscription("subscribe", topics=("a", "b"))
    assert opts.max_offsets_per_trigger == 10 and opts.min_offsets_per_trigger == 5
    assert opts.include_headers and opts.max_trigger_delay_s == 30
    assert opts.consumer_settings == {"max.poll.records": 7}
    assert opts.starting.kind == "latest"
    batch = ReadOptions.parse({**BOOT, "assign": '{"t": [0, 1]}'}, streaming=False)
    assert batch.starting.kind == "earliest" and batch.ending.kind == "latest"
    assert batch.subscription.partitions == (("t", 0), ("t", 1))
    ts = ReadOptions.parse({**BOOT, "subscribe": "t", "startingtimestamp": "1000"}, streaming=True)
    assert ts.starting.kind == "timestamp" and ts.starting.timestamp == 1000
    js = ReadOptions.parse(
        {
            **BOOT,
            "subscribe": "t",
            "startingoffsets": '{"t": {"0": -2, "1": 5}}',
            "endingoffsets": '{"t": {"0": -1}}',
        },
        streaming=False,
    )
    assert js.starting.offsets == {"t": {0: -2, 1: 5}} and js.ending.offsets == {"t": {0: -1}}


@pytest.mark.parametrize(
    "bad",
    [
        {"subscribe": "t", "subscribepattern": "t.*"},
        {},
        {"subscribe": "t", "kafka.auto.offset.reset": "earliest"},
        {"subscribe": "t", "kafka.no.such.setting": "1"},
        {"subscribe": "t", "endingoffsets": '{"t": {"0": -2}}'},
        {"subscribe": "t", "commitoffsetstogroup": "true"},
        {"subscribe": "t", "maxoffsetspertrigger": "0"},
        {"subscribe": "t", "failondataloss": "maybe"},
    ],
)
def test_bad_read_options_raise(bad):
    with pytest.raises(OptionError):
        ReadOptions.parse({**BOOT, **bad}, streaming=False)
    with pytest.raises(OptionError):
        ReadOptions.parse({"subscribe": "t"}, streaming=True)  # no bootstrap


def test_durations():
    assert parse_duration_s("15m", "x") == 900
    assert parse_duration_s("500ms", "x") == 0.5
    assert parse_duration_s("2", "x") == 2
    with pytest.raises(OptionError):
        parse_duration_s("soon", "x")


def test_arrow_batch_matches_the_spark_schema_exactly():
    class R:
        def __init__(self, off):
            self.offset, self.key, self.value = off, b"k", None
            self.timestamp, self.timestamp_type, self.headers = 1_700_000_000_123, 0, [("h", b"v")]

    b = BatchBuilder("t", 3, True)
    b.add([R(0), R(1)])
    batch = b.build()
    assert batch.schema == arrow_schema(True)
    assert batch.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert batch.column(5)[0].value == 1_700_000_000_123_000
    assert batch.column(7).to_pylist()[0] == [{"key": "h", "value": b"v"}]
    assert BatchBuilder("t", 0, False).build().num_rows == 0


def test_sink_schema_rules_and_normalize():
    from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

    ok = StructType(
        [
            StructField("value", StringType()),
            StructField("key", BinaryType()),
            StructField("partition", IntegerType()),
            StructField("extra", IntegerType()),
        ]
    )
    validate_schema(ok, "t")
    with pytest.raises(SinkError, match="topic"):
        validate_schema(ok, None)
    with pytest.raises(SinkError, match="value"):
        validate_schema(StructType([StructField("key", StringType())]), "t")
    with pytest.raises(SinkError, match="partition"):
        validate_schema(
            StructType(
                [StructField("value", StringType()), StructField("partition", StringType())]
            ),
            "t",
        )
    batch = pa.RecordBatch.from_pydict(
        {"value": ["a", None], "key": [b"k", None], "topic": ["x", "y"]}
    )
    out = normalize(batch, None)
    assert out.schema == STAGED_SCHEMA
    assert out.column(0).to_pylist() == ["x", "y"]
    assert out.column(3).to_pylist() == [b"a", None]
    assert normalize(batch, "forced").column(0).to_pylist() == ["forced", "forced"]


def test_write_options():
    w = WriteOptions.parse(
        {**BOOT, "topic": "t", "checkpointLocation": "/c", "kafka.linger.ms": "20"}
    )
    assert (w.topic, w.mode, w.checkpoint_location) == ("t", "staged", "/c")
    assert w.producer_settings == {"linger.ms": 20}
    with pytest.raises(OptionError):
        WriteOptions.parse({**BOOT, "deliverymode": "maybe"})
