"""One consumer-group member as a process of its own, so that a test can SIGKILL it:
``python member_process.py BOOTSTRAP GROUP TOPIC CLIENT_ID`` (confluent-kafka, classic
protocol, eager range assignor, 6 s sessions, commits every 500 ms)."""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Consumer


def main() -> None:
    bootstrap, group, topic, client_id = sys.argv[1:5]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 500,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        }
    )
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    consumer.subscribe([topic])
    print("subscribed", flush=True)
    try:
        while running[0]:
            consumer.poll(0.2)
    finally:
        consumer.close()  # a clean stop leaves the group (a SIGKILL does not)


if __name__ == "__main__":
    main()
