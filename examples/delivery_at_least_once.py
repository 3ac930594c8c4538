"""At-least-once processing: process first, then commit (seed 004, section 4.4b).

Auto-commit is off. Each batch is processed (here: appended to an output file and
flushed to disk) and only then are the positions committed with ``commit()``
(commitSync). A crash between processing and committing means the batch is read
again after the restart: nothing is lost, some records may be processed twice.
The rebalance listener commits the positions of revoked partitions, so a clean
rebalance causes no duplicates.

    python examples/delivery_at_least_once.py --topic orders --group alo --out out.txt
"""

from __future__ import annotations

import argparse
import os
import time

from odradek.client import Consumer, ConsumerRebalanceListener, TopicPartition


class CommitOnRevoke(ConsumerRebalanceListener):
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # Everything handed out so far has been processed: commit it before letting go.
        if revoked:
            self.consumer.commit({tp: self.consumer.position(tp) for tp in revoked})


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
    consumer.subscribe([args.topic], listener=CommitOnRevoke(consumer))
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
                for r in records:  # 1. process
                    if args.delay_ms:
                        time.sleep(args.delay_ms / 1000)
                    out.write(f"{r.partition} {r.offset}\n")
                out.flush()
                os.fsync(out.fileno())
                consumer.commit()  # 2. then commit
        finally:
            consumer.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--group", default="delivery-at-least-once")
    parser.add_argument("--out", default="delivery_at_least_once.txt")
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    parser.add_argument("--max-poll-records", type=int, default=100)
    parser.add_argument("--stop-when-idle", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
