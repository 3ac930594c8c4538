"""Exactly-once processing: results and offsets in one SQLite transaction (seed 004, 4.4c).

The consumer never commits to Kafka. Each batch of records is processed and its
results are written to SQLite *in the same transaction* as the next offset of every
partition the batch touched. A rebalance listener restores the positions from SQLite
(``seek``) whenever partitions are assigned, so after a crash -- at any point -- the
consumer resumes exactly after the last result that was durably stored: a record's
result is either stored together with its offset, or neither is.

    python examples/delivery_exactly_once.py --topic orders --group eos --db results.db

Options: ``--instance-id`` makes the member static (a restart within the session
timeout gets its partitions back without a rebalance), ``--stop-when-idle SECONDS``
exits cleanly after that long without records, ``--delay-ms`` slows processing down
(to make crash tests land mid-batch). The crash-injection test is
``tests/examples/test_delivery_exactly_once.py``.

Zombies: this example assumes a dead member is really dead (the test kills it with
SIGKILL). A member that is merely stalled could still write after losing its
partitions; production code fences it, e.g. by storing the group generation with the
offsets and refusing writes from an older one.
"""

from __future__ import annotations

import argparse
import sqlite3
import time

from odradek.client import Consumer, ConsumerRebalanceListener, TopicPartition

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, "offset" INTEGER NOT NULL,
    result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS offsets (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
"""


def open_db(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=30)  # explicit transactions
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(SCHEMA)
    return db


class OffsetManager:
    """Reads and writes the stored positions (Java's example 'OffsetManager')."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def stored(self, tp: TopicPartition) -> int | None:
        row = self.db.execute(
            "SELECT next_offset FROM offsets WHERE topic = ? AND partition = ?",
            (tp.topic, tp.partition),
        ).fetchone()
        return None if row is None else int(row[0])


class RestoreFromDatabase(ConsumerRebalanceListener):
    """On assignment, seek to the offset stored with the results."""

    def __init__(self, consumer: Consumer, offsets: OffsetManager) -> None:
        self.consumer = consumer
        self.offsets = offsets

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        fresh = []
        for tp in assigned:
            offset = self.offsets.stored(tp)
            if offset is None:
                fresh.append(tp)
            else:
                self.consumer.seek(tp, offset)
        if fresh:
            # Nothing stored yet: start from the beginning, whatever Kafka may hold.
            for tp, offset in self.consumer.beginning_offsets(fresh).items():
                self.consumer.seek(tp, max(offset, 0))

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # Nothing to do: every processed record's offset is already in the database.
        pass

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        pass


def process(value: bytes | None) -> str:
    """The 'business logic': here, the value reversed."""
    return (value or b"").decode()[::-1]


def run(args: argparse.Namespace) -> int:
    db = open_db(args.db)
    offsets = OffsetManager(db)
    consumer = Consumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        group_instance_id=args.instance_id,
        enable_auto_commit=False,  # Kafka's committed offsets are not used
        auto_offset_reset="earliest",
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(100, args.session_timeout_ms // 10),
        max_poll_records=args.max_poll_records,
    )
    consumer.subscribe([args.topic], listener=RestoreFromDatabase(consumer, offsets))
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
            db.execute("BEGIN IMMEDIATE")
            try:
                for r in records:
                    if args.delay_ms:
                        time.sleep(args.delay_ms / 1000)
                    db.execute(
                        'INSERT INTO results (topic, partition, "offset", result) '
                        "VALUES (?, ?, ?, ?)",
                        (r.topic, r.partition, r.offset, process(r.value)),
                    )
                    next_offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1
                for tp, offset in next_offsets.items():
                    db.execute(
                        "INSERT INTO offsets (topic, partition, next_offset) VALUES (?, ?, ?) "
                        "ON CONFLICT (topic, partition) "
                        "DO UPDATE SET next_offset = excluded.next_offset",
                        (tp.topic, tp.partition, offset),
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            processed += len(records)
    finally:
        consumer.close()
        db.close()
    print(f"processed {processed} records", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--group", default="delivery-exactly-once")
    parser.add_argument("--db", default="delivery_exactly_once.db")
    parser.add_argument("--instance-id", default=None, help="group_instance_id (static member)")
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    parser.add_argument("--max-poll-records", type=int, default=100)
    parser.add_argument("--stop-when-idle", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
