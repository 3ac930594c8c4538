"""The source and sink inside a real local SparkSession against a real broker.

Everything shares one SparkSession (conftest) and keeps streaming queries few
and short: Spark's per-batch floor is ~0.3 s here and a query's first batch
costs several seconds.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F

from odradek.client import TopicPartition
from odradek.spark.cluster import ClusterView

from .conftest import add_partitions, consume_all, create_topic, produce, wait_for

pytestmark = pytest.mark.timeout(180)


def _reader(spark, bootstrap, **options):
    r = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _stream(spark, bootstrap, **options):
    r = spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_equals_what_was_produced(spark, bootstrap, topic):
    create_topic(bootstrap, topic, 3)
    produced = produce(bootstrap, topic, 600, partitions=3, headers=True, timestamp_ms=1_000_000)
    produce(bootstrap, topic, 30, partitions=3, start=600, timestamp_ms=2_000_000)
    df = _reader(spark, bootstrap, subscribe=topic, includeHeaders="true", minPartitions=6)
    assert df.rdd.getNumPartitions() == 6
    rows = df.collect()
    assert len(rows) == 630
    got = {(r.partition, r.key, r.value) for r in rows}
    assert {(p, k, v) for p, k, v in produced} <= got
    assert len({(r.partition, r.offset) for r in rows}) == 630
    first = next(r for r in rows if r.key == b"key-3")
    assert first.topic == topic and first.timestampType == 0
    assert first.timestamp.timestamp() == 1000.0  # session time zone is UTC
    assert [(h.key, h.value) for h in first.headers] == [("i", b"3"), ("empty", None)]
    # endingOffsets JSON and startingOffsetsByTimestamp / startingTimestamp
    ranged = _reader(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 10, "1": -2, "2": -2}}),
        endingOffsets=json.dumps({topic: {"0": 20, "1": 5, "2": -1}}),
    )
    counts = dict(Counter(r.partition for r in ranged.select("partition").collect()))
    assert counts == {0: 10, 1: 5, 2: 210}
    assert _reader(spark, bootstrap, subscribePattern=topic[:-8] + ".*").count() >= 630


@pytest.mark.requires_timestamp_lookup(
    reason="startingTimestamp / startingOffsetsByTimestamp resolve through ListOffsets by "
    "timestamp, which must answer the first offset at or after the time"
)
def test_batch_read_from_starting_timestamps(spark, bootstrap, topic):
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 600, partitions=3, timestamp_ms=1_000_000)
    produce(bootstrap, topic, 30, partitions=3, start=600, timestamp_ms=2_000_000)
    late = _reader(spark, bootstrap, subscribe=topic, startingTimestamp="1500000")
    assert sorted(r.value for r in late.select("value").collect()) == sorted(
        f"value-{i}".encode() for i in range(600, 630)
    )
    by_ts = _reader(
        spark,
        bootstrap,
        assign=json.dumps({topic: [1]}),
        startingOffsetsByTimestamp=json.dumps({topic: {"1": 1500000}}),
    )
    assert by_ts.count() == 10


def test_available_now_exactly_once_into_parquet_in_max_offsets_batches(
    spark, bootstrap, topic, tmp_path
):
    """Also: restart resumes from the checkpoint; the group sees the committed progress."""
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 3000, partitions=3)
    group = f"g-{topic}"
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def run() -> list[dict]:
        df = _stream(
            spark,
            bootstrap,
            subscribe=topic,
            startingOffsets="earliest",
            maxOffsetsPerTrigger=1000,
            **{"kafka.group.id": group, "commitOffsetsToGroup": "true"},
        )
        q = (
            df.selectExpr("partition", "offset", "value")
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start()
        )
        assert q.awaitTermination(150), "availableNow query did not finish"
        assert q.exception() is None
        return [p for p in q.recentProgress if p["numInputRows"] > 0]

    first = run()
    assert [p["numInputRows"] for p in first] == [1000, 1000, 1000]
    latest = first[-1]["sources"][0]["latestOffset"]
    latest = json.loads(latest) if isinstance(latest, str) else latest
    assert latest == {topic: {"0": 1000, "1": 1000, "2": 1000}}
    produce(bootstrap, topic, 1500, partitions=3, start=3000)
    second = run()
    assert [p["numInputRows"] for p in second] == [1000, 500]
    rows = spark.read.parquet(out).collect()
    assert len(rows) == 4500
    assert len({(r.partition, r.offset) for r in rows}) == 4500
    view = ClusterView(bootstrap)
    try:
        committed = view.fetch_group_offsets(group)
    finally:
        view.close()
    # At least every batch before the last is committed (Spark commits one batch late).
    assert sum(committed.values()) >= 3500


def _memory_query(spark, df, name):
    return (
        df.selectExpr("partition", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def _latest_offset(q) -> dict:
    latest = q.lastProgress["sources"][0]["latestOffset"]
    return json.loads(latest) if isinstance(latest, str) else latest


def test_group_commits_show_the_right_lag(spark, bootstrap, topic):
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 100, partition=0)
    group = f"g-{topic}"
    name = "q_" + topic.replace("-", "_")
    df = _stream(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets="earliest",
        **{"kafka.group.id": group, "commitOffsetsToGroup": "true"},
    )
    q = _memory_query(spark, df, name)

    def count() -> int:
        return spark.sql(f"select count(*) as n from {name}").collect()[0].n

    view = ClusterView(bootstrap)
    try:
        wait_for(lambda: count() == 100, 90, "the first 100 rows")
        produce(bootstrap, topic, 50, partition=1, start=100)
        wait_for(lambda: count() == 150, 60, "the rows of partition 1")
        # Lag: the group catches up with the log end while the query runs...
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        wait_for(
            lambda: view.fetch_group_offsets(group) == {tp0: 100, tp1: 50},
            30,
            "the group's committed offsets to reach the log end",
        )
        assert _latest_offset(q) == {topic: {"0": 100, "1": 50}}
    finally:
        q.stop()
    try:
        # ...and shows the unread records once it stops.
        produce(bootstrap, topic, 30, partitions=2, start=150)
        committed = view.fetch_group_offsets(group)
        ends = view.latest([tp0, tp1])
        assert ends == {tp0: 115, tp1: 65}
        assert sum(ends[tp] - committed[tp] for tp in ends) == 30
    finally:
        view.close()


@pytest.mark.requires_create_partitions(
    reason="adds a partition to the subscribed topic while the query runs (CreatePartitions)"
)
def test_new_partition_is_picked_up(spark, bootstrap, topic):
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 100)
    name = "q_" + topic.replace("-", "_")
    df = _stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest")
    q = _memory_query(spark, df, name)

    def count() -> int:
        return spark.sql(f"select count(*) as n from {name}").collect()[0].n

    try:
        wait_for(lambda: count() == 100, 90, "the first 100 rows")
        add_partitions(bootstrap, topic, 2)
        produce(bootstrap, topic, 50, partition=1, start=100)
        wait_for(lambda: count() == 150, 60, "rows of the new partition")
        parts = Counter(r.partition for r in spark.sql(f"select partition from {name}").collect())
        assert parts == {0: 100, 1: 50}
        wait_for(
            lambda: _latest_offset(q) == {topic: {"0": 100, "1": 50}},
            30,
            "latestOffset to include the new partition",
        )
    finally:
        q.stop()


def test_query_failing_mid_batch_then_restarted_yields_each_record_once(
    spark, bootstrap, topic, tmp_path
):
    """A task dies in the middle of batch 2; the restarted query (same checkpoint) writes
    every input record exactly once to the sink topic."""
    create_topic(bootstrap, topic, 3)
    out_topic = create_topic(bootstrap, topic + "-out", 2)
    produce(bootstrap, topic, 1500, partitions=3)
    ck = str(tmp_path / "ck")

    def start(fail: bool):
        df = _stream(
            spark, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=500
        )
        value = (
            "if(partition = 1 and offset = 400, raise_error('injected failure'), value)"
            if fail
            else "value"
        )
        return (
            df.selectExpr("key", f"{value} as value")
            .writeStream.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out_topic)
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start()
        )

    q = start(fail=True)
    with pytest.raises(Exception, match="injected failure"):
        q.awaitTermination(150)
    before = consume_all(bootstrap, out_topic)
    assert len(before) == 1000  # batches 0 and 1 only; nothing of the failed batch 2
    q = start(fail=False)
    assert q.awaitTermination(150)
    values = Counter(r.value for r in consume_all(bootstrap, out_topic))
    assert values == Counter(f"value-{i}".encode() for i in range(1500))


def test_batch_sink_writes_columns_and_a_consumer_reads_them_back(spark, bootstrap, topic):
    create_topic(bootstrap, topic, 3)
    rows = [(f"k{i}", f"v{i}".encode(), i % 3, [("h", str(i).encode())]) for i in range(300)]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    ).withColumn("topic", F.lit(topic))
    df.write.mode("append").format("odradek").option("kafka.bootstrap.servers", bootstrap).save()
    got = consume_all(bootstrap, topic)
    assert len(got) == 300
    assert {(r.key, r.value, r.partition, tuple(r.headers)) for r in got} == {
        (k.encode(), v, p, tuple(h)) for k, v, p, h in rows
    }
    # the source reads back exactly what the sink wrote (and direct mode works too)
    copy = create_topic(bootstrap, topic + "-copy", 2)
    (
        _reader(spark, bootstrap, subscribe=topic)
        .select("key", "value")
        .write.mode("append")
        .format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", copy)
        .option("deliveryMode", "direct")
        .save()
    )
    copied = Counter(r.value for r in consume_all(bootstrap, copy))
    assert copied == Counter(v for _, v, _, _ in rows)


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(spark, bootstrap, topic):
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 20)
    name = "m_" + topic.replace("-", "_")
    df = _stream(
        spark,
        bootstrap,
        subscribe=topic,
        startingOffsets="earliest",
        minOffsetsPerTrigger=50,
        maxTriggerDelay="6s",
    )
    q = (
        df.select("offset")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        started = time.monotonic()
        wait_for(lambda: spark.sql(f"select * from {name}").count() == 20, 60, "the delayed batch")
        # 20 < 50 rows: no batch until maxTriggerDelay passed (measured from query start).
        assert time.monotonic() - started >= 4.0
        produce(bootstrap, topic, 60, start=20)
        wait_for(lambda: spark.sql(f"select * from {name}").count() == 80, 30, "the 60-row batch")
    finally:
        q.stop()
