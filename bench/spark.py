"""Throughput and per-batch overhead of Odradek's PySpark source and sink.

    python bench/spark.py                       # embedded broker, 1M rows of 100 bytes
    python bench/spark.py --rows 300000 --repeat 1
    python bench/spark.py --bootstrap 127.0.0.1:9092

Measures, in one local[2] SparkSession (numbers are for this machine only), after
a warm-up job has started Spark's Python workers, each figure the median of
``--repeat`` runs that follow ``--warmup`` unmeasured ones:

* sink, ``deliveryMode=direct``: tasks produce straight to the topic (rows/s);
* sink, ``deliveryMode=staged`` (the default): tasks stage Arrow files, the driver
  publishes in commit (rows/s, end to end);
* source, batch read into Spark's ``noop`` sink (rows/s; the first read of the
  session, "cold", is shown too);
* source, streaming ``availableNow`` into ``noop`` (rows/s, query start to end,
  and the micro-batches alone: Spark spends ~2 s starting a query's Python
  streaming runner before the source is asked anything);
* per-micro-batch overhead: a stream of tiny batches (``maxOffsetsPerTrigger``
  = 10) into ``noop``; median and p90 of Spark's ``triggerExecution`` and of its
  parts (latestOffset, addBatch, walCommit, commitOffsets).

and, where Spark itself is the limit, the same jobs without Kafka (the ceilings):

* the same rows read from a Parquet file into ``noop``;
* the same rows as Arrow batches from a trivial Python data source (what any
  Python source costs in Spark: worker, Arrow transfer to the JVM);
* the same rows written to a Python data source sink that discards them (Spark's
  JVM-to-Python Arrow transfer, what any Python sink costs);
* the per-micro-batch overhead of Spark's built-in ``rate`` source and of a
  trivial Python streaming source (10 in-memory rows per batch).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        DataSourceStreamReader,
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

    class TinyStreamReader(DataSourceStreamReader):
        """10 in-memory rows per micro-batch: Spark's floor for a Python streaming source."""

        def __init__(self) -> None:
            self.end = 0

        def initialOffset(self) -> dict:
            return {"rows": 0}

        def latestOffset(self) -> dict:
            self.end += 10
            return {"rows": self.end}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return [InputPartition((start["rows"], end["rows"]))]

        def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
            lo, hi = partition.value
            n = hi - lo
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([b"k"] * n, type=pa.binary()),
                    pa.array([b"x" * value_bytes] * n, type=pa.binary()),
                    pa.array(["t"] * n, type=pa.string()),
                    pa.array([0] * n, type=pa.int32()),
                    pa.array(range(lo, hi), type=pa.int64()),
                    pa.array([0] * n, type=pa.timestamp("us", tz="UTC")),
                    pa.array([0] * n, type=pa.int32()),
                ],
                schema=arrow_schema(False),
            )

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "benchceiling"

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return MemoryReader()

        def streamReader(self, schema):  # type: ignore[no-untyped-def]
            return TinyStreamReader()

        def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
            return DiscardWriter()

    return CeilingSource, MemoryReader


def _median_time(fn: Callable[[], Any], repeat: int, warmup: int = 0) -> float:
    """Median wall time of ``repeat`` runs after ``warmup`` unmeasured ones (the JVM's JIT
    keeps speeding Spark up over the first few jobs of a session)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _tiny_batches(query: Any, batches: int) -> list[dict]:
    """Run ``query`` until ``batches`` + 3 micro-batches with rows; drop the first 3."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if len([p for p in query.recentProgress if p["numInputRows"]]) >= batches + 3:
            break
        time.sleep(0.5)
    query.stop()
    return [p for p in query.recentProgress if p["numInputRows"]][3:]


PARTS = ("latestOffset", "addBatch", "walCommit", "commitOffsets")


def _overhead(progress: list[dict]) -> str:
    total = [float(p["durationMs"].get("triggerExecution", 0)) for p in progress]
    detail = ", ".join(
        f"{k} {statistics.median(float(p['durationMs'].get(k, 0)) for p in progress):.0f}"
        for k in PARTS
    )
    return f"median {statistics.median(total):.0f} ms, p90 {_pct(total, 0.9):.0f} ms ({detail} ms)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker (default: start an embedded one)")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--tiny-batches", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    ap.add_argument("--warmup", type=int, default=3, help="unmeasured runs before each figure")
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
    ceiling_source, _ = _ceiling_sources(args.rows, args.value_bytes, args.partitions)
    spark.dataSource.register(ceiling_source)
    results: list[tuple[str, int, float, str]] = []
    run = uuid.uuid4().hex[:6]
    n = args.rows
    repeat, warmup = args.repeat, args.warmup
    pad = max(0, args.value_bytes - 10)
    source = spark.range(0, n, numPartitions=2).selectExpr(
        "cast(id as string) as key",
        f"concat(repeat('x', {pad}), lpad(cast(id as string), 10, '0')) as value",
    )
    source.cache().count()

    def rate(what: str, rows: int, seconds: float) -> None:
        results.append((what, rows, seconds, f"{rows / seconds:,.0f} rows/s"))

    def write_discard() -> None:
        source.write.mode("append").format("benchceiling").save()

    write_discard()  # warm-up: starts Spark's Python workers

    def write(mode: str, topic: str) -> None:
        (
            source.write.mode("append")
            .format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("deliveryMode", mode)
            .save()
        )

    topic = _topic(bootstrap, f"bench-read-{run}", args.partitions)
    write("direct", topic)  # the rows every read below reads
    for mode in ("direct", "staged"):
        topics = iter(
            [
                _topic(bootstrap, f"bench-{mode}-{run}-{i}", args.partitions)
                for i in range(repeat + warmup)
            ]
        )
        rate(
            f"sink, batch write, deliveryMode={mode}",
            n,
            _median_time(
                lambda mode=mode, topics=topics: write(mode, next(topics)), repeat, warmup
            ),
        )
    rate(
        "ceiling: Python sink that discards the rows",
        n,
        _median_time(write_discard, repeat, warmup),
    )

    def read() -> None:
        (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    rate("source, batch read (cold: the session's first read)", n, _median_time(read, 1))
    rate("source, batch read (warm)", n, _median_time(read, repeat, warmup))

    with tempfile.TemporaryDirectory() as pq:
        spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap).option(
            "subscribe", topic
        ).load().repartition(args.partitions).write.parquet(f"{pq}/rows")

        def read_parquet() -> None:
            spark.read.parquet(f"{pq}/rows").write.format("noop").mode("overwrite").save()

        rate(
            "ceiling: Parquet file of the same rows, read (warm)",
            n,
            _median_time(read_parquet, repeat, warmup),
        )

    def read_memory() -> None:
        spark.read.format("benchceiling").load().write.format("noop").mode("overwrite").save()

    rate(
        "ceiling: Python source of in-memory Arrow rows (warm)",
        n,
        _median_time(read_memory, repeat, warmup),
    )

    batch_seconds: list[float] = []

    def available_now() -> None:
        with tempfile.TemporaryDirectory() as ck:
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
            rows = sum(p["numInputRows"] for p in q.recentProgress)
            if rows != n:
                raise RuntimeError(f"availableNow read {rows} rows, not {n}")
            batch_seconds.append(
                sum(float(p["durationMs"]["triggerExecution"]) for p in q.recentProgress) / 1000
            )

    rate(
        "source, stream availableNow (query start to end)",
        n,
        _median_time(available_now, repeat, 1),
    )
    rate(
        "source, stream availableNow (its micro-batches alone)",
        n,
        statistics.median(batch_seconds[1:]),
    )

    def available_now_trivial() -> None:
        with tempfile.TemporaryDirectory() as ck:
            spark.readStream.format("benchceiling").load().writeStream.format("noop").option(
                "checkpointLocation", ck
            ).trigger(availableNow=True).start().awaitTermination()

    seconds = _median_time(available_now_trivial, repeat, 1)
    results.append(
        (
            "ceiling: availableNow query start to end, trivial Python streaming source",
            10,
            seconds,
            f"{seconds:.2f} s for one batch of 10 rows",
        )
    )

    tiny = _topic(bootstrap, f"bench-tiny-{run}", 1)
    from odradek.client import Producer

    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(10 * (args.tiny_batches + 3)):
            producer.send(tiny, b"x" * 100, key=str(i).encode())
        producer.flush()

    def stream(reader: Any) -> list[dict]:
        with tempfile.TemporaryDirectory() as ck:
            q = (
                reader.load()
                .writeStream.format("noop")
                .option("checkpointLocation", ck)
                .trigger(processingTime="0 seconds")
                .start()
            )
            return _tiny_batches(q, args.tiny_batches)

    progress = stream(
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", tiny)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 10)
    )
    results.append(
        (
            f"per-batch overhead, {len(progress)} batches of 10 rows",
            len(progress) * 10,
            statistics.median(float(p["durationMs"]["triggerExecution"]) for p in progress) / 1000,
            _overhead(progress),
        )
    )
    for name, reader in (
        ("a trivial Python streaming source", spark.readStream.format("benchceiling")),
        ("Spark's rate source", spark.readStream.format("rate").option("rowsPerSecond", 10)),
    ):
        progress = stream(reader)
        results.append(
            (
                f"ceiling: per-batch overhead of {name}, {len(progress)} batches",
                int(sum(p["numInputRows"] for p in progress)),
                statistics.median(float(p["durationMs"]["triggerExecution"]) for p in progress)
                / 1000,
                _overhead(progress),
            )
        )

    spark.stop()
    if broker is not None:
        broker.stop()
    print(
        f"\nrows={n} value={args.value_bytes} B partitions={args.partitions} "
        f"cores={os.cpu_count()} broker={'embedded' if broker else bootstrap} "
        f"median of {repeat}\n"
    )
    print("| measurement | rows | seconds | result |")
    print("|---|---:|---:|---|")
    for name, rows, secs, res in results:
        print(f"| {name} | {rows:,} | {secs:.2f} | {res} |")


if __name__ == "__main__":
    main()
