"""Exactly-once consume - transform - produce with Kafka transactions (KIP-98, KIP-447).

Seed 004 ends on exactly-once consumption: store the results and the offsets in
one transaction. ``delivery_exactly_once.py`` does that with a database; this
example does it the Kafka way, when the results go to another topic: each batch
of input records is transformed and written to the output topic *inside a
transaction* together with the consumer group's offsets
(``send_offsets_to_transaction``), then committed. A read_committed reader of
the output sees every input record's result exactly once, whatever crashed:

- the process dies mid-transaction: its transaction is aborted (by the
  coordinator when ``transaction_timeout_ms`` passes, or at once when the next
  instance with the same transactional id calls ``init_transactions``), so
  neither its results nor its offsets count, and the next instance resumes from
  the last committed offsets;
- an old instance that is only stalled (a zombie) is fenced: its transactional
  id has a newer epoch, and (KIP-447) the group refuses offsets from its old
  generation, so whatever it sends is aborted.

    python examples/transactional_etl.py --input orders --output orders-upper \\
        --group etl --transactional-id etl-1

Options: ``--instance-id`` makes the consumer a static member (a restart takes
its partitions back at once, without waiting for the session to time out),
``--stop-when-idle SECONDS`` exits cleanly after that long without records,
``--max-poll-records`` bounds a transaction. The crash test is
``tests/interop/test_transactions_crash.py`` (20 SIGKILLs of this loop).
Read the output with ``isolation.level=read_committed`` (confluent-kafka,
kafka-python, aiokafka, Java).
"""

from __future__ import annotations

import argparse
import time

from odradek.client import Consumer, Producer, TopicPartition
from odradek.client.errors import KafkaError


def transform(value: bytes | None) -> bytes:
    """The 'business logic': here, upper case."""
    return (value or b"").upper()


def rewind(consumer: Consumer) -> None:
    """After an abort: back to the committed offsets (what the aborted batch read is redone)."""
    assignment = consumer.assignment()
    committed = consumer.committed(assignment) if assignment else {}
    for tp in assignment:
        offset = committed.get(tp)
        if offset is not None:
            consumer.seek(tp, offset.offset)
        else:
            consumer.seek_to_beginning([tp])


def run(args: argparse.Namespace) -> int:
    producer = Producer(
        bootstrap_servers=args.bootstrap,
        transactional_id=args.transactional_id,
        transaction_timeout_ms=args.transaction_timeout_ms,
    )
    # First: fence any older instance and abort what it left open, so the offsets the
    # consumer starts from below are final.
    producer.init_transactions()
    consumer = Consumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        group_instance_id=args.instance_id,
        enable_auto_commit=False,  # offsets are committed inside the transactions
        auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(100, args.session_timeout_ms // 10),
        max_poll_records=args.max_poll_records,
    )
    consumer.subscribe([args.input])
    processed = 0
    last_record = time.monotonic()
    try:
        while True:
            records = consumer.poll(0.2)
            if not records:
                if args.stop_when_idle and time.monotonic() - last_record > args.stop_when_idle:
                    break
                continue
            last_record = time.monotonic()
            next_offsets: dict[TopicPartition, int] = {}
            producer.begin_transaction()
            try:
                for r in records:
                    producer.send(args.output, transform(r.value), key=r.key)
                    next_offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
                producer.send_offsets_to_transaction(next_offsets, consumer.group_metadata())
                producer.commit_transaction()
            except KafkaError as exc:
                if not producer_can_abort(exc):
                    raise
                # Abortable (a failed batch, a rebalance refused the offsets): undo the
                # transaction and read the batch again from the committed offsets.
                producer.abort_transaction()
                rewind(consumer)
                continue
            processed += len(records)
    finally:
        consumer.close()
        producer.close()
    print(f"processed {processed} records", flush=True)
    return 0


def producer_can_abort(exc: KafkaError) -> bool:
    """Fenced or unauthorized is fatal (another instance took over); the rest aborts."""
    return type(exc).__name__ not in (
        "ProducerFencedError",
        "InvalidProducerEpochError",
        "TransactionalIdAuthorizationFailedError",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--input", default="orders")
    parser.add_argument("--output", default="orders-upper")
    parser.add_argument("--group", default="transactional-etl")
    parser.add_argument("--transactional-id", default="transactional-etl-1")
    parser.add_argument("--instance-id", default=None, help="group_instance_id (static member)")
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    parser.add_argument("--transaction-timeout-ms", type=int, default=60_000)
    parser.add_argument("--max-poll-records", type=int, default=100)
    parser.add_argument("--stop-when-idle", type=float, default=0.0, metavar="SECONDS")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
