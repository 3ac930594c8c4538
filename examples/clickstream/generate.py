"""Produce click events to a topic with Odradek's client.

    python examples/clickstream/generate.py --count 20000          # then exit
    python examples/clickstream/generate.py --rate 200 --seconds 60 # a live stream

Each event is JSON ``{"user": "u17", "page": "/cart", "ts": 1732270000123}``
keyed by user; ``ts`` (event time, ms) is also the record timestamp. With
``--late-fraction`` some events arrive up to 30 s late, to show the watermark.
Without ``--seconds``, event times are spread over the last ``--span-seconds``,
so a backlog covers many windows.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from odradek.client import AdminClient, NewTopic, Producer

PAGES = ["/", "/search", "/product", "/cart", "/checkout", "/help"]


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        if topic not in admin.list_topics():
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--count", type=int, default=10_000, help="events to send (without --seconds)")
    ap.add_argument("--rate", type=float, default=0, help="events per second (0: no limit)")
    ap.add_argument("--seconds", type=float, default=0, help="run this long instead of --count")
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--late-fraction", type=float, default=0.02)
    ap.add_argument(
        "--span-seconds",
        type=float,
        default=300,
        help="without --seconds: spread event times over this many seconds before now",
    )
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    ensure_topic(args.bootstrap, args.topic, args.partitions)
    rnd = random.Random(args.seed)
    sent = 0
    started = time.monotonic()
    with Producer(bootstrap_servers=args.bootstrap, linger_ms=10) as producer:
        while True:
            elapsed = time.monotonic() - started
            if args.seconds and elapsed >= args.seconds:
                break
            if not args.seconds and sent >= args.count:
                break
            if args.rate and sent > elapsed * args.rate:
                time.sleep(min(0.05, sent / args.rate - elapsed))
                continue
            now_ms = int(time.time() * 1000)
            if not args.seconds:  # a backlog: event times spread over the last span
                now_ms -= int(args.span_seconds * 1000 * (1 - sent / max(1, args.count)))
            if rnd.random() < args.late_fraction:
                now_ms -= rnd.randint(5_000, 30_000)
            user = f"u{rnd.randrange(args.users)}"
            event = {"user": user, "page": rnd.choice(PAGES), "ts": now_ms}
            producer.send(
                args.topic, json.dumps(event).encode(), key=user.encode(), timestamp_ms=now_ms
            )
            sent += 1
        producer.flush(60)
    print(f"produced {sent} click events to {args.topic} in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
