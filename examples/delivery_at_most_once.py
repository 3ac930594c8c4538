"""At-most-once processing: commit first, then process (seed 004, section 4.4a).

The positions are committed (``commit()``, commitSync) as soon as ``poll`` hands the
records out, *before* they are processed. A crash during processing loses the rest of
the batch -- the restarted consumer starts after it -- but no record is ever processed
twice. (Auto-commit with a short ``auto_commit_interval_ms`` approximates this, as the
seed says, but commits asynchronously; committing explicitly makes the order certain.)

    python examples/delivery_at_most_once.py --topic orders --group amo --out out.txt
"""

from __future__ import annotations

import argparse
import os
import time

from odradek.client import Consumer


def run(args: argparse.Namespace) -> int:
    consumer = Consumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(100, args.session_timeout_ms // 10),
        max_poll_records=args.max_poll_records,
    )
    consumer.subscribe([args.topic])
    last = time.monotonic()
    with open(args.out, "a", encoding="utf-8") as out:
        try:
            while True:
                records = consumer.poll(0.2)
                if not records:
                    if args.stop_when_idle and time.monotonic() - last > args.stop_when_idle:
                        break
                    continue
                last = time.monotonic()
                consumer.commit()  # 1. commit the positions past this batch
                for r in records:  # 2. then process
                    if args.delay_ms:
                        time.sleep(args.delay_ms / 1000)
                    out.write(f"{r.partition} {r.offset}\n")
                    out.flush()
                os.fsync(out.fileno())
        finally:
            consumer.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--group", default="delivery-at-most-once")
    parser.add_argument("--out", default="delivery_at_most_once.txt")
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    parser.add_argument("--max-poll-records", type=int, default=100)
    parser.add_argument("--stop-when-idle", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
