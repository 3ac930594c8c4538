"""Throughput and per-batch overhead of Odradek's PySpark source and sink.

    python bench/spark.py                       # embedded broker, 300k rows of 100 bytes
    python bench/spark.py --rows 1000000 --bootstrap 127.0.0.1:9092

Measures, in one local[2] SparkSession (numbers are for this machine only):

* sink, ``deliveryMode=direct``: tasks produce straight to the topic (rows/s);
* sink, ``deliveryMode=staged`` (the default): tasks stage Arrow files, the driver
  publishes in commit (rows/s, end to end);
* source, batch read into Spark's ``noop`` sink (rows/s, warm: second run);
* source, streaming ``availableNow`` into ``noop`` (rows/s);
* per-micro-batch overhead: a stream of tiny batches (``maxOffsetsPerTrigger``
  = 10) into ``noop``; median and p90 of Spark's ``triggerExecution`` and of its
  parts (latestOffset, addBatch, walCommit, commitOffsets).

and, where Spark itself is the limit, the same jobs without Kafka (the ceilings):

* the same rows read from a Parquet file into ``noop``;
* the same rows as Arrow batches from a trivial Python data source (what any
  Python source costs in Spark: worker, Arrow transfer to the JVM);
* the same rows written to a Python data source sink that discards them (Spark's
  JVM-to-Python Arrow transfer, what any Python sink costs);
* the per-micro-batch overhead of Spark's built-in ``rate`` source.

Prints a Markdown table (copied into docs/spark.md and docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def _topic(bootstrap: str, name: str, partitions: int) -> str:
    from odradek.client import AdminClient, NewTopic

    with AdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    return name


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _ceiling_sources(rows: int, value_bytes: int, partitions: int) -> tuple[type, type]:
    """A Python source of in-memory Arrow rows and a Python sink that discards its input:
    the cost of the Python Data Source API itself, with no Kafka behind it."""
    import pyarrow as pa
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        InputPartition,
        WriterCommitMessage,
    )

    from odradek.spark.arrow import SCHEMA_DDL, arrow_schema

    class MemoryReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
            # One batch built once and yielded again and again: only Spark's costs remain.
            share = rows // partitions
            chunk = 8192
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array([b"k"] * chunk, type=pa.binary()),
                    pa.array([b"x" * value_bytes] * chunk, type=pa.binary()),
                    pa.array(["t"] * chunk, type=pa.string()),
                    pa.array([partition.value] * chunk, type=pa.int32()),
                    pa.array(range(chunk), type=pa.int64()),
                    pa.array([0] * chunk, type=pa.timestamp("us", tz="UTC")),
                    pa.array([0] * chunk, type=pa.int32()),
                ],
                schema=arrow_schema(False),
            )
            for start in range(0, share, chunk):
                yield batch.slice(0, min(chunk, share - start))

    class DiscardWriter(DataSourceArrowWriter):
        def write(self, iterator):  # type: ignore[no-untyped-def]
            for _batch in iterator:
                pass
            return WriterCommitMessage()

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "benchceiling"

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return MemoryReader()

        def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return DiscardWriter()

    return CeilingSource, MemoryReader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--tiny-batches", type=int, default=30)
    args = ap.parse_args()

    broker = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        from odradek.testing import BrokerProcess

        broker = BrokerProcess(Path(tempfile.mkdtemp(prefix="odradek-bench-")) / "data").start()
        bootstrap = broker.bootstrap

    from pyspark.sql import SparkSession

    from odradek.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    results: list[tuple[str, int, float, str]] = []
    run = uuid.uuid4().hex[:6]
    n = args.rows
    pad = max(0, args.value_bytes - 10)
    source = spark.range(0, n, numPartitions=2).selectExpr(
        "cast(id as string) as key",
        f"concat(repeat('x', {pad}), lpad(cast(id as string), 10, '0')) as value",
    )
    source.cache().count()

    def write(mode: str) -> str:
        topic = _topic(bootstrap, f"bench-{mode}-{run}", args.partitions)
        t0 = time.perf_counter()
        (
            source.write.mode("append")
            .format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("deliveryMode", mode)
            .save()
        )
        dt = time.perf_counter() - t0
        results.append((f"sink, batch write, deliveryMode={mode}", n, dt, f"{n / dt:,.0f} rows/s"))
        return topic

    topic = write("direct")
    write("staged")

    def read() -> float:
        t0 = time.perf_counter()
        (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )
        return time.perf_counter() - t0

    cold = read()
    warm = read()
    results.append(("source, batch read (cold)", n, cold, f"{n / cold:,.0f} rows/s"))
    results.append(("source, batch read (warm)", n, warm, f"{n / warm:,.0f} rows/s"))

    # Ceilings: the same rows without Kafka.
    ceiling_source, _ = _ceiling_sources(n, args.value_bytes, args.partitions)
    spark.dataSource.register(ceiling_source)
    with tempfile.TemporaryDirectory() as pq:
        (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
            .repartition(args.partitions)
            .write.parquet(f"{pq}/rows")
        )

        def read_parquet() -> float:
            t0 = time.perf_counter()
            spark.read.parquet(f"{pq}/rows").write.format("noop").mode("overwrite").save()
            return time.perf_counter() - t0

        read_parquet()
        dt = read_parquet()
        results.append(
            ("ceiling: Parquet file of the same rows, read (warm)", n, dt, f"{n / dt:,.0f} rows/s")
        )

    def read_memory() -> float:
        t0 = time.perf_counter()
        spark.read.format("benchceiling").load().write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0

    read_memory()
    dt = read_memory()
    results.append(
        ("ceiling: Python source of in-memory Arrow rows (warm)", n, dt, f"{n / dt:,.0f} rows/s")
    )
    t0 = time.perf_counter()
    source.write.mode("append").format("benchceiling").save()
    dt = time.perf_counter() - t0
    results.append(("ceiling: Python sink that discards the rows", n, dt, f"{n / dt:,.0f} rows/s"))

    with tempfile.TemporaryDirectory() as ck:
        t0 = time.perf_counter()
        q = (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        dt = time.perf_counter() - t0
        batches = [p for p in q.recentProgress if p["numInputRows"]]
        rows = sum(p["numInputRows"] for p in batches)
        results.append(
            (
                f"source, stream availableNow ({len(batches)} batch)",
                rows,
                dt,
                f"{rows / dt:,.0f} rows/s",
            )
        )

    tiny = _topic(bootstrap, f"bench-tiny-{run}", 1)
    from odradek.client import Producer

    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(10 * (args.tiny_batches + 3)):
            producer.send(tiny, b"x" * 100, key=str(i).encode())
        producer.flush()
    with tempfile.TemporaryDirectory() as ck:
        q = (
            spark.readStream.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", tiny)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 10)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", ck)
            .trigger(processingTime="0 seconds")
            .start()
        )
        deadline = time.monotonic() + 300
        while len(q.recentProgress) < args.tiny_batches + 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        q.stop()
        progress = [p for p in q.recentProgress if p["numInputRows"]][3:]  # drop warm-up
        parts = {}
        for key in ("triggerExecution", "latestOffset", "addBatch", "walCommit", "commitOffsets"):
            vals = [float(p["durationMs"].get(key, 0)) for p in progress]
            parts[key] = (statistics.median(vals), _pct(vals, 0.9)) if vals else (0, 0)
        med, p90 = parts["triggerExecution"]
        detail = ", ".join(f"{k} {v[0]:.0f}" for k, v in parts.items() if k != "triggerExecution")
        results.append(
            (
                f"per-batch overhead, {len(progress)} batches of 10 rows",
                len(progress) * 10,
                med / 1000,
                f"median {med:.0f} ms, p90 {p90:.0f} ms ({detail} ms)",
            )
        )
    with tempfile.TemporaryDirectory() as ck:
        q = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 10)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", ck)
            .trigger(processingTime="0 seconds")
            .start()
        )
        deadline = time.monotonic() + 300
        while len(q.recentProgress) < args.tiny_batches + 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        q.stop()
        progress = [p for p in q.recentProgress if p["numInputRows"]][3:]
        vals = [float(p["durationMs"].get("triggerExecution", 0)) for p in progress]
        if vals:
            med = statistics.median(vals)
            results.append(
                (
                    f"ceiling: per-batch overhead of Spark's rate source, {len(vals)} batches",
                    int(sum(p["numInputRows"] for p in progress)),
                    med / 1000,
                    f"median {med:.0f} ms, p90 {_pct(vals, 0.9):.0f} ms",
                )
            )

    spark.stop()
    if broker is not None:
        broker.stop()
    print(
        f"\nrows={n} value={args.value_bytes} B partitions={args.partitions} "
        f"cores={os.cpu_count()} broker={'embedded' if broker else bootstrap}\n"
    )
    print("| measurement | rows | seconds | result |")
    print("|---|---:|---:|---|")
    for name, rows, secs, res in results:
        print(f"| {name} | {rows:,} | {secs:.2f} | {res} |")


if __name__ == "__main__":
    main()
