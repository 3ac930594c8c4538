"""The Structured Streaming job: clicks -> windowed page counts -> Parquet + a topic.

    python examples/clickstream/pipeline.py --available-now      # process the backlog, exit
    python examples/clickstream/pipeline.py --seconds 120        # keep running

Reads the ``clicks`` topic through Odradek's Spark source, parses the JSON,
counts clicks per page in 10-second event-time windows with a 20-second
watermark, and writes each finished window (append mode) twice, as two
queries sharing the source definition:

* to Parquet under ``--out`` (Spark's file sink: exactly-once);
* to the ``click-counts`` topic through Odradek's sink (staged: exactly-once
  per micro-batch, see docs/spark.md), keyed by page, as JSON.

The source commits its progress to the consumer group ``clickstream-job``, so
``odradek groups describe clickstream-job`` (or any Kafka lag tool) shows how
far behind the job is.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from odradek.extras import MissingExtra, imports_of

try:
    with imports_of("spark", "the clickstream pipeline"):
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F

        from odradek.spark import register
except MissingExtra as exc:  # installed without the spark extra: one line that says so
    raise SystemExit(str(exc)) from None

EVENT_SCHEMA = "user string, page string, ts long"


def build(spark: SparkSession, args: argparse.Namespace):
    clicks = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_per_trigger)
        .option("kafka.group.id", "clickstream-job")
        .option("commitOffsetsToGroup", "true")
        .load()
    )
    events = (
        clicks.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
        .select("e.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    return (
        events.withWatermark("event_time", args.watermark)
        .groupBy(F.window("event_time", args.window).alias("w"), "page")
        .agg(F.count("*").alias("clicks"), F.approx_count_distinct("user").alias("users"))
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "page",
            "clicks",
            "users",
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--results-topic", default="click-counts")
    ap.add_argument("--out", default="clickstream-out", help="Parquet output and checkpoints")
    ap.add_argument("--window", default="10 seconds")
    ap.add_argument("--watermark", default="20 seconds")
    ap.add_argument("--max-per-trigger", type=int, default=20_000)
    ap.add_argument("--available-now", action="store_true", help="process the backlog and exit")
    ap.add_argument("--seconds", type=float, default=60, help="run time without --available-now")
    args = ap.parse_args()

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-clickstream")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    counts = build(spark, args)

    def trigger(writer):
        if args.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime="2 seconds")

    to_parquet = trigger(
        counts.writeStream.format("parquet")
        .outputMode("append")
        .option("path", os.path.join(args.out, "counts"))
        .option("checkpointLocation", os.path.join(args.out, "checkpoints", "parquet"))
    ).start()
    to_topic = trigger(
        counts.select(
            F.col("page").alias("key"),
            F.to_json(F.struct("window_start", "window_end", "page", "clicks", "users")).alias(
                "value"
            ),
        )
        .writeStream.format("odradek")
        .outputMode("append")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.results_topic)
        .option("checkpointLocation", os.path.join(args.out, "checkpoints", "topic"))
    ).start()

    queries = [to_parquet, to_topic]
    deadline = None if args.available_now else time.monotonic() + args.seconds
    try:
        while any(q.isActive for q in queries):
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(1)
            for q in queries:
                if q.exception() is not None:
                    raise q.exception()
    finally:
        for q in queries:
            q.stop()
    for q in queries:
        last = q.lastProgress or {}
        print(
            f"{q.name or q.id}: batches={last.get('batchId', -1) + 1} "
            f"last input rows={last.get('numInputRows', 0)}"
        )
    written = spark.read.parquet(os.path.join(args.out, "counts"))
    print(f"parquet: {written.count()} finished (page, window) rows in {args.out}/counts")
    written.orderBy("window_start", "page").show(12, truncate=False)
    spark.stop()


if __name__ == "__main__":
    main()
