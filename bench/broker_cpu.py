"""The broker's own CPU time and page faults for a fixed produce-then-consume workload.

Wall-clock throughput on a shared machine moves with the load; the CPU seconds
the broker process spends (user + system, from /proc) and its minor page
faults move much less, so they show what a change to the serving path costs.

    python bench/broker_cpu.py                   # 300,000 records of 1 KiB
    python bench/broker_cpu.py --records 100000 --size 100 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from report import markdown_table  # bench/report.py (scripts run from bench/)

from odradek.testing import BrokerProcess


def usage(pid: int) -> tuple[float, int]:
    """(CPU seconds, minor page faults) of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks, int(fields[7])


def run_once(records: int, size: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="odradek-cpu-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        assert broker.pid is not None
        try:
            producer = Producer(
                {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 262144}
            )
            producer.produce("cpu", b"warm-up")
            producer.flush(30)
            cpu0, faults0 = usage(broker.pid)
            value = b"v" * size
            for _ in range(records):
                while True:
                    try:
                        producer.produce("cpu", value)
                        break
                    except BufferError:
                        producer.poll(0.01)
            if producer.flush(120):
                raise RuntimeError("produce did not finish")
            cpu1, faults1 = usage(broker.pid)
            consumer = Consumer(
                {
                    "bootstrap.servers": broker.bootstrap,
                    "group.id": "cpu",
                    "enable.auto.commit": False,
                }
            )
            consumer.assign([TopicPartition("cpu", 0, 0)])
            seen = 0
            while seen < records + 1:
                seen += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
            consumer.close()
            cpu2, faults2 = usage(broker.pid)
        finally:
            broker.stop()
    return {
        "produce_cpu": cpu1 - cpu0,
        "consume_cpu": cpu2 - cpu1,
        "produce_faults": faults1 - faults0,
        "consume_faults": faults2 - faults1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024, help="value bytes")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the median is shown")
    args = parser.parse_args()
    runs = [run_once(args.records, args.size) for _ in range(args.repeat)]

    def median(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    print(f"{args.records:,} records of {args.size} B, median of {args.repeat} runs\n")
    print(
        markdown_table(
            [
                ["phase", "broker CPU s", "minor page faults"],
                ["produce", f"{median('produce_cpu'):.2f}", f"{median('produce_faults'):,.0f}"],
                ["consume", f"{median('consume_cpu'):.2f}", f"{median('consume_faults'):,.0f}"],
            ]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
