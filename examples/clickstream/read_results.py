"""Read the job's results topic as a consumer group, with Odradek's own client (any Kafka
client would do; this one comes with every install of Odradek).

python examples/clickstream/read_results.py                # prints, stops when idle
"""

from __future__ import annotations

import argparse
import json
import time

from odradek.client import Consumer

ASSIGN_TIMEOUT_S = 60.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="click-counts")
    ap.add_argument("--group", default="dashboard")
    ap.add_argument("--idle-seconds", type=float, default=5)
    args = ap.parse_args()

    totals: dict[str, int] = {}
    seen = 0
    with Consumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=True,  # closing the consumer commits what was printed
    ) as consumer:
        consumer.subscribe([args.topic])
        started = last = time.monotonic()
        # Joining the group takes a few seconds; the idle clock starts once assigned.
        while not consumer.assignment() or time.monotonic() - last < args.idle_seconds:
            if not consumer.assignment():
                if time.monotonic() - started > ASSIGN_TIMEOUT_S:
                    raise SystemExit(f"no partitions assigned within {ASSIGN_TIMEOUT_S:g} s")
                last = time.monotonic()
            for record in consumer.poll(timeout=0.5):
                last = time.monotonic()
                row = json.loads(record.value or b"{}")
                seen += 1
                totals[row["page"]] = totals.get(row["page"], 0) + row["clicks"]
                print(
                    f"{row['window_start']}  {row['page']:<10} clicks={row['clicks']:<5} "
                    f"users={row['users']}"
                )
    print(f"{seen} window results; clicks per page: {dict(sorted(totals.items()))}")


if __name__ == "__main__":
    main()
