"""Read the job's results topic as a consumer group (any Kafka client would do).

python examples/clickstream/read_results.py                # prints, stops when idle
"""

from __future__ import annotations

import argparse
import json
import time

from confluent_kafka import Consumer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="click-counts")
    ap.add_argument("--group", default="dashboard")
    ap.add_argument("--idle-seconds", type=float, default=5)
    args = ap.parse_args()

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
        }
    )
    assigned = False

    def on_assign(_consumer: Consumer, partitions: list) -> None:
        nonlocal assigned, last
        assigned, last = True, time.monotonic()

    consumer.subscribe([args.topic], on_assign=on_assign)
    totals: dict[str, int] = {}
    seen = 0
    last = time.monotonic()
    try:
        # Joining the group takes a few seconds; the idle clock starts once assigned.
        while not assigned or time.monotonic() - last < args.idle_seconds:
            if not assigned and time.monotonic() - last > 60:
                raise SystemExit("no partitions assigned within 60 s")
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            last = time.monotonic()
            row = json.loads(msg.value())
            seen += 1
            totals[row["page"]] = totals.get(row["page"], 0) + row["clicks"]
            print(
                f"{row['window_start']}  {row['page']:<10} clicks={row['clicks']:<5} "
                f"users={row['users']}"
            )
    finally:
        consumer.close()
    print(f"{seen} window results; clicks per page: {dict(sorted(totals.items()))}")


if __name__ == "__main__":
    main()
