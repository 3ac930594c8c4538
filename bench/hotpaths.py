"""Workloads to profile the client's hot paths, against an embedded broker.

    python bench/hotpaths.py producer --records 200000 --value-bytes 100
    python bench/hotpaths.py consumer --records 200000 --value-bytes 100 [--group] [--read-values]
    python bench/hotpaths.py spark-task --records 300000 --cprofile
    py-spy record --gil -f raw -o producer.txt -- python bench/hotpaths.py producer
    py-spy record --gil -f raw -o consumer.txt -- python bench/hotpaths.py consumer --repeat 5

``producer``: send() N records with the bench settings (acks=1, linger 5 ms, 16 KiB
batches, no idempotence, 4 partitions), flush; prints msg/s and the client's CPU
per record. Every thread works, so profile it with py-spy (``--gil``) rather than
cProfile, which only sees the calling thread.

``consumer``: produce N records as ``producer`` does, then consume them back from
offset 0 with ``poll`` (assigned partitions, or a new group with ``--group``;
counting records, or reading every value with ``--read-values``), ``--repeat``
times; prints msg/s and the client's CPU per record of each consume.

``spark-task``: what one Spark source task does (``reader.read_partition`` of one
partition into Arrow batches), outside Spark: the same code path as an executor's
Python worker. Runs once to warm up, once timed, and once under cProfile with
``--cprofile`` (the top functions by own time are printed).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path


def _broker_with_topic(tmp: str, partitions: int):  # type: ignore[no-untyped-def]
    from odradek.client import AdminClient, NewTopic
    from odradek.testing import start_broker

    broker = start_broker(Path(tmp) / "data", settings={"group.initial.rebalance.delay.ms": "0"})
    with AdminClient(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("profiled", partitions, 1)])["profiled"].result()
    return broker


def producer(records: int, value_bytes: int) -> None:
    from odradek.client import Producer

    with tempfile.TemporaryDirectory() as tmp:
        broker = _broker_with_topic(tmp, 4)
        try:
            value = b"x" * value_bytes
            wall, cpu = time.perf_counter(), time.process_time()
            with Producer(
                bootstrap_servers=broker.bootstrap,
                acks=1,
                linger_ms=5,
                batch_size=16_384,
                enable_idempotence=False,
            ) as p:
                send = p.send
                for _ in range(records):
                    send("profiled", value=value)
                p.flush(120)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(
                f"{records / wall:,.0f} msg/s, client CPU {cpu / records * 1e6:.1f} µs per record"
            )
        finally:
            broker.stop()


def consumer(records: int, value_bytes: int, group: bool, read_values: bool, repeat: int) -> None:
    import uuid

    from odradek.client import Consumer, Producer, TopicPartition

    with tempfile.TemporaryDirectory() as tmp:
        broker = _broker_with_topic(tmp, 4)
        try:
            with Producer(
                bootstrap_servers=broker.bootstrap,
                acks=1,
                linger_ms=5,
                batch_size=16_384,
                enable_idempotence=False,
            ) as p:
                value = b"x" * value_bytes
                for _ in range(records):
                    p.send("profiled", value=value)
                p.flush(120)
            for _ in range(repeat):
                settings: dict = {
                    "bootstrap_servers": broker.bootstrap,
                    "auto_offset_reset": "earliest",
                }
                if group:
                    settings["group_id"] = "profiled-" + uuid.uuid4().hex[:8]
                wall, cpu = time.perf_counter(), time.process_time()
                got = 0
                with Consumer(**settings) as c:
                    if group:
                        c.subscribe(["profiled"])
                    else:
                        c.assign([TopicPartition("profiled", i) for i in range(4)])
                    while got < records:
                        batch = c.poll(1.0)
                        if read_values:
                            got += sum(1 for r in batch if r.value is not None)
                        else:
                            got += len(batch)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                print(
                    f"{records / wall:,.0f} msg/s, client CPU {cpu / records * 1e6:.2f} µs "
                    "per record"
                )
        finally:
            broker.stop()


def spark_task(records: int, value_bytes: int, profile: bool) -> None:
    from odradek.client import Producer
    from odradek.spark.planning import OffsetRange
    from odradek.spark.reader import OdradekPartition, read_partition

    with tempfile.TemporaryDirectory() as tmp:
        broker = _broker_with_topic(tmp, 1)
        try:
            with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5) as p:
                pad = b"x" * max(0, value_bytes - 10)
                for i in range(records):
                    p.send("profiled", pad + b"%010d" % i, key=b"%d" % i, partition=0)
                p.flush(120)
            part = OdradekPartition(
                OffsetRange("profiled", 0, 0, records), broker.bootstrap, {}, False, True, 60.0
            )

            def task() -> None:
                rows = sum(batch.num_rows for batch in read_partition(part))
                if rows != records:
                    raise RuntimeError(f"read {rows} rows, not {records}")

            task()  # warm: page cache, imports, the worker's client
            wall = time.perf_counter()
            task()
            wall = time.perf_counter() - wall
            print(f"{records:,} rows in {wall:.3f} s: {records / wall:,.0f} rows/s (warm)")
            if profile:
                prof = cProfile.Profile()
                prof.enable()
                task()
                prof.disable()
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
                print(out.getvalue())
        finally:
            broker.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("workload", choices=["producer", "consumer", "spark-task"])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--cprofile", action="store_true", help="spark-task: print a cProfile")
    ap.add_argument("--group", action="store_true", help="consumer: subscribe as a new group")
    ap.add_argument("--read-values", action="store_true", help="consumer: read every value")
    ap.add_argument("--repeat", type=int, default=1, help="consumer: consumes of the records")
    args = ap.parse_args(argv)
    if args.workload == "producer":
        producer(args.records, args.value_bytes)
    elif args.workload == "consumer":
        consumer(args.records, args.value_bytes, args.group, args.read_values, args.repeat)
    else:
        spark_task(args.records, args.value_bytes, args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
