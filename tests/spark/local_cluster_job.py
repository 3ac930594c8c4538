"""A streaming job on Spark's ``local-cluster[2,1,1024]`` master for
test_spark_local_cluster.py, run as its own process (one SparkSession per process, and
the shared test session is local[2]).

    python local_cluster_job.py BOOTSTRAP SOURCE SINK CHECKPOINT TRANSACTIONAL_ID STOP_FILE

local-cluster runs a master and two workers inside the driver's JVM; each worker starts
an executor JVM of its own, and each executor its own Python workers. They import
odradek from ``PYTHONPATH`` (passed on as ``spark.executorEnv.PYTHONPATH``).

Prints one JSON line ``{"executors": n, "odradek": [paths]}`` once both executors are
registered (the module paths the executors' Python workers import), then ``started``.
Streams SOURCE to SINK (each record to its source partition, the transactional sink)
until STOP_FILE exists (a start that Spark's fixed 10 s Python connect-back timeout
failed, before any batch committed, is retried and reported ``restarted: ...``), then
stops the query, prints ``{"stream_tasks": {executor:
tasks}, "progress": [...]}`` (the stream's tasks each executor ran, each batch's
durations) and exits 0; a failed query exits 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

EXECUTORS = 2
MASTER = f"local-cluster[{EXECUTORS},1,1024]"  # workers, cores and MB per worker
REGISTER_TIMEOUT_S = 120.0
# JVMs that start sooner and burn less CPU on a small machine: the C1 compiler only, one
# compiler thread, the serial collector (the batches are small).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"


CONNECT_BACK = "Python worker failed to connect back"


def executor_tasks(sc: Any) -> dict[str, int]:
    """Tasks each executor has completed (Spark's status store; the driver runs none)."""
    summaries = sc._jsc.sc().statusStore().executorList(True)
    found = (summaries.apply(i) for i in range(summaries.size()))
    return {e.id(): e.completedTasks() for e in found if e.id() != "driver"}


def main() -> None:
    bootstrap, source, sink, checkpoint, txn_id, stop_file = sys.argv[1:7]
    from pyspark.sql import SparkSession

    from odradek.spark import register

    spark = (
        SparkSession.builder.master(MASTER)
        .appName("odradek-local-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executor.extraJavaOptions", JVM_OPTIONS)
        .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    register(spark)

    # Executors register with the driver after the context starts.
    deadline = time.monotonic() + REGISTER_TIMEOUT_S
    while len(sc._jsc.sc().statusTracker().getExecutorInfos()) < EXECUTORS + 1:  # + driver
        if time.monotonic() > deadline:
            raise SystemExit(f"{EXECUTORS} executors did not register")
        time.sleep(0.2)

    def odradek_path(_: object) -> list[str]:
        import odradek

        return [str(odradek.__file__)]

    paths = sorted(set(sc.parallelize(range(4), 4).mapPartitions(odradek_path).collect()))
    executors = len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1
    print(json.dumps({"executors": executors, "odradek": paths}), flush=True)

    tasks_before = executor_tasks(sc)
    out = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 300)
        .load()
        .select("key", "value", "partition")
    )

    def start() -> Any:
        return (
            out.writeStream.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("deliveryMode", "transactional")
            .option("transactionalId", txn_id)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    query = start()
    print("started", flush=True)
    stop = Path(stop_file)
    while True:
        while query.isActive and not stop.exists():
            query.awaitTermination(0.2)
        # Spark gives the query's planning process (a Python "simple worker", started
        # per query) a fixed 10 s to connect back; a starved machine can miss it. Only
        # then, and only before any batch has committed, the query is started again.
        failure = query.exception()
        committed = list((Path(checkpoint) / "commits").glob("[0-9]*"))
        if failure is None or CONNECT_BACK not in str(failure) or committed:
            break
        print(f"restarted: {CONNECT_BACK}", flush=True)
        query = start()
    query.stop()
    ran = executor_tasks(sc)
    stream_tasks = {e: n - tasks_before.get(e, 0) for e, n in ran.items()}
    batches = [
        {"batch": p["batchId"], "rows": p["numInputRows"], "ms": p["durationMs"]}
        for p in query.recentProgress
    ]
    print(json.dumps({"stream_tasks": stream_tasks, "progress": batches}), flush=True)
    spark.stop()
    if failure is not None:
        print(f"query failed: {failure}", flush=True)
        raise SystemExit(1)
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
