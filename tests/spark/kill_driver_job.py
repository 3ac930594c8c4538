"""A streaming job for test_spark_kill.py, run as its own process so it can be SIGKILLed.

    python kill_driver_job.py BOOTSTRAP SOURCE_TOPIC SINK_TOPIC CHECKPOINT MODE [DELIVERY]

MODE ``live``: processingTime trigger, slow batches (a UDF sleeps per row), runs until
killed. MODE ``finish``: Trigger.AvailableNow from the same checkpoint, then exits.
DELIVERY: the sink's deliveryMode (default staged).
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main() -> None:
    bootstrap, source, sink, checkpoint, mode = sys.argv[1:6]
    delivery = sys.argv[6] if len(sys.argv) > 6 else "staged"
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from odradek.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)

    @F.udf("binary")
    def slow(value: bytes) -> bytes:
        time.sleep(0.004)
        return value

    df = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 300)
        .load()
    )
    if mode == "live":
        df = df.select("key", slow("value").alias("value"))
    writer = (
        df.select("key", "value")
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .option("deliveryMode", delivery)
    )
    if mode == "live":
        q = writer.trigger(processingTime="100 milliseconds").start()
        print("started", flush=True)
        q.awaitTermination()
    else:
        q = writer.trigger(availableNow=True).start()
        q.awaitTermination()
        print("finished", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
