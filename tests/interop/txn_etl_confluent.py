"""A consume - transform - produce loop with confluent-kafka transactions, run as a child
process by ``test_transactions_crash.py`` (which SIGKILLs it at random moments).

    python txn_etl_confluent.py BOOTSTRAP GROUP TRANSACTIONAL_ID INSTANCE_ID INPUT OUTPUT

Each batch: begin, produce the upper-cased values, send the offsets with the
consumer's group metadata, commit. A static group member (``group.instance.id``),
so a restarted instance takes the partitions back at once. Exits when idle for 3 s.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer


def main() -> int:
    bootstrap, group, txn_id, instance, source, sink = sys.argv[1:7]
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    )
    producer.init_transactions(60)  # fences the killed predecessor, aborts its transaction
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": instance,
            "session.timeout.ms": 6000,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    idle_since = time.monotonic()
    processed = 0
    try:
        while time.monotonic() - idle_since < 3.0:
            msgs = [m for m in consumer.consume(50, 0.2) if m.error() is None]
            if not msgs:
                continue
            idle_since = time.monotonic()
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, value=(m.value() or b"").upper(), key=m.key())
            try:
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()),
                    consumer.consumer_group_metadata(),
                    30,
                )
                producer.commit_transaction(30)
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                producer.abort_transaction(30)
                # Back to the committed offsets: the batch is read again.
                for tp in consumer.committed(consumer.assignment(), 10):
                    if tp.offset < 0:
                        tp.offset = OFFSET_BEGINNING
                    consumer.seek(tp)
                continue
            processed += len(msgs)
    finally:
        consumer.close()
    print(f"processed {processed}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
