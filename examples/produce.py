"""Produce N keyed messages to a topic with confluent-kafka (any Kafka client works).

    python examples/produce.py orders 1000
"""

from __future__ import annotations

import sys

from confluent_kafka import Producer


def main() -> None:
    topic = sys.argv[1] if len(sys.argv) > 1 else "orders"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    bootstrap = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.1:9092"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for i in range(count):
        producer.produce(topic, key=f"customer-{i % 10}", value=f"order {i}", on_delivery=delivered)
        producer.poll(0)
    producer.flush(30)
    summary = f"produced {count - len(failures)} messages to {topic}"
    print(summary + (f", {len(failures)} failed" if failures else ""))


if __name__ == "__main__":
    main()
