"""Transactions: produce throughput per transaction size, and read_committed consumption.

Produce: the same records (100 B values, 3 partitions) sent by an idempotent
producer without transactions, then by a transactional producer in
transactions of 1, 100 and 10,000 records (begin, send, commit). Each
scenario writes a fresh topic; the figure is records/s from the first send
to the last commit, and the commit latency (p50 / p99, ms). Run with
confluent-kafka (librdkafka) and with Odradek's client.

Consume: one topic written in transactions of 1,000 records, one in ten of
them aborted, read from the start with confluent-kafka and with Odradek's
consumer at read_uncommitted (every record, aborted ones included) and at
read_committed (the broker stops
at the last stable offset and sends the aborted ranges; the client drops
them), next to a topic of the same records written without transactions.
The clock starts at the first record. Each topic is read once before the
measured reads, and each read is repeated
(``--repeat``, 5): the table shows the median and the range. The consumer
sets ``fetch.queue.backoff.ms=0``: with librdkafka's default (1 s) a read
pauses for a second whenever its fetch queue fills, which is all these short
reads would measure. A last table fetches the topics with raw Fetch requests:
the broker's side of the isolation levels, without a client's record handling.

    python bench/transactions.py                        # starts a broker
    python bench/transactions.py --bootstrap 127.0.0.1:9092 --records 100000
    python bench/transactions.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import libversion as rdkafka_version
from confluent_kafka import version as ck_version
from confluent_kafka.admin import AdminClient, NewTopic
from report import markdown_table  # bench/report.py (scripts run from bench/)

PARTITIONS = 3
VALUE = b"x" * 100
TXN_SIZES = (1, 100, 10_000)
# Records per scenario: a transaction of one record costs a few round trips, so that
# scenario gets fewer records (its rate, not its total, is what is compared).
SMALL_TXN_RECORDS = 2_000


def create_topic(bootstrap: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=30)
    return name


# ---------------------------------------------------------------------- producers


class Confluent:
    name = "confluent-kafka"

    def __init__(self, bootstrap: str, txn_id: str | None) -> None:
        settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 256 * 1024,
            "queue.buffering.max.messages": 500_000,
            "enable.idempotence": True,
        }
        if txn_id:
            settings["transactional.id"] = txn_id
        self.p = Producer(settings)
        self.i = 0

    def init(self) -> None:
        self.p.init_transactions(30)

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str) -> None:
        while True:
            try:
                self.p.produce(topic, VALUE, partition=self.i % PARTITIONS)
                break
            except BufferError:
                self.p.poll(0.01)
        self.i += 1

    def commit(self) -> None:
        self.p.commit_transaction(60)

    def abort(self) -> None:
        self.p.abort_transaction(60)

    def flush(self) -> None:
        assert self.p.flush(60) == 0

    def close(self) -> None:
        self.p.flush(10)


class OdradekClient:
    name = "odradek"

    def __init__(self, bootstrap: str, txn_id: str | None) -> None:
        from odradek.client import Producer as OProducer

        self.p = OProducer(
            bootstrap_servers=bootstrap, linger_ms=5, batch_size=256 * 1024, transactional_id=txn_id
        )
        self.i = 0

    def init(self) -> None:
        self.p.init_transactions()

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str) -> None:
        self.p.send(topic, VALUE, partition=self.i % PARTITIONS)
        self.i += 1

    def commit(self) -> None:
        self.p.commit_transaction()

    def abort(self) -> None:
        self.p.abort_transaction()

    def flush(self) -> None:
        self.p.flush(60)

    def close(self) -> None:
        self.p.close()


def produce_plain(client_cls: Any, bootstrap: str, records: int) -> dict[str, Any]:
    topic = create_topic(bootstrap, "bench-plain")
    client = client_cls(bootstrap, None)
    started = time.perf_counter()
    for _ in range(records):
        client.send(topic)
    client.flush()
    seconds = time.perf_counter() - started
    client.close()
    return {"records": records, "seconds": seconds, "commits_ms": []}


def produce_transactional(
    client_cls: Any, bootstrap: str, records: int, size: int
) -> dict[str, Any]:
    topic = create_topic(bootstrap, f"bench-txn{size}")
    client = client_cls(bootstrap, f"bench-{uuid.uuid4().hex[:8]}")
    client.init()
    commits: list[float] = []
    started = time.perf_counter()
    for _ in range(max(records // size, 1)):
        client.begin()
        for _ in range(size):
            client.send(topic)
        t = time.perf_counter()
        client.commit()
        commits.append((time.perf_counter() - t) * 1000)
    seconds = time.perf_counter() - started
    client.close()
    return {"records": max(records // size, 1) * size, "seconds": seconds, "commits_ms": commits}


# ---------------------------------------------------------------------- consumers


def write_for_consume(bootstrap: str, records: int) -> tuple[str, str, int]:
    """(plain topic, transactional topic, records a read_committed reader sees)."""
    plain = create_topic(bootstrap, "bench-read-plain")
    txn = create_topic(bootstrap, "bench-read-txn")
    p = Confluent(bootstrap, None)
    for _ in range(records):
        p.send(plain)
    p.flush()
    t = Confluent(bootstrap, f"bench-read-{uuid.uuid4().hex[:8]}")
    t.init()
    committed = 0
    per_txn = 1_000
    for n in range(max(records // per_txn, 1)):
        t.begin()
        for _ in range(per_txn):
            t.send(txn)
        if n % 10 == 9:
            t.flush()
            t.abort()
        else:
            t.commit()
            committed += per_txn
    return plain, txn, committed


def consume(bootstrap: str, topic: str, isolation: str, expect: int) -> dict[str, Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "queued.max.messages.kbytes": 256 * 1024,
            "fetch.queue.backoff.ms": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = 0.0  # the clock starts at the first record: connecting is not reading
    deadline = time.perf_counter() + 300
    while got < expect and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 0.5):
            if msg.error() is None:
                if not got:
                    started = time.perf_counter()
                got += 1
    seconds = time.perf_counter() - started
    consumer.close()
    return {"records": got, "seconds": seconds}


def consume_odradek(bootstrap: str, topic: str, isolation: str, expect: int) -> dict[str, Any]:
    """The same read with Odradek's consumer (counting the records each poll hands out)."""
    from odradek.client import Consumer as OdradekConsumer
    from odradek.client import TopicPartition as OdradekTopicPartition

    got = 0
    started = 0.0
    deadline = time.perf_counter() + 300
    with OdradekConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level=isolation
    ) as consumer:
        consumer.assign([OdradekTopicPartition(topic, p) for p in range(PARTITIONS)])
        while got < expect and time.perf_counter() < deadline:
            n = len(consumer.poll(0.5))
            if n and not got:
                started = time.perf_counter()
            got += n
    return {"records": got, "seconds": time.perf_counter() - started}


def broker_fetch(bootstrap: str, topic: str, isolation: int) -> dict[str, Any]:
    """The whole topic with raw Fetch requests (Odradek's connection layer, no decoding):
    what the isolation level costs the broker, without a client's record handling."""
    from odradek.client.cluster import KafkaClient
    from odradek.client.config import ConsumerConfig
    from odradek.protocol.apikeys import ApiKey
    from odradek.protocol.records import iter_batches

    client = KafkaClient(ConsumerConfig.from_settings(bootstrap_servers=bootstrap))
    try:
        node = next(iter(client.bootstrap(timeout_s=30).brokers))
        offsets = [0] * PARTITIONS
        fetched = requests = 0
        started = time.perf_counter()
        while True:
            body = {
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": 50 * 1024 * 1024,
                "isolation_level": isolation,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": p,
                                "current_leader_epoch": -1,
                                "fetch_offset": offsets[p],
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": 1024 * 1024,
                            }
                            for p in range(PARTITIONS)
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            }
            response = client.request(node, ApiKey.FETCH, body)
            requests += 1
            got = 0
            for part in response.responses[0].partitions:
                data = bytes(part.records or b"")
                got += len(data)
                for _, h in iter_batches(data):
                    offsets[part.partition_index] = h.next_offset
            fetched += got
            if not got:
                break
        return {"bytes": fetched, "requests": requests, "seconds": time.perf_counter() - started}
    finally:
        client.close()


# ---------------------------------------------------------------------- report


def fmt_rate(records: int, seconds: float) -> str:
    return f"{records / seconds:,.0f}"


def percentile(values: list[float], q: float) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.quantiles(values, n=100)[int(q) - 1]:.1f}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"produce": [], "consume": []}
    clients: list[Any] = [Confluent, OdradekClient]
    table = [["producer", "client", "records", "seconds", "records/s", "commit p50 ms", "p99 ms"]]
    for cls in clients:
        plain = produce_plain(cls, args.bootstrap, args.records)
        scenarios: list[tuple[str, dict[str, Any]]] = [("no transactions", plain)]
        for size in TXN_SIZES:
            records = SMALL_TXN_RECORDS if size == 1 else args.records
            scenarios.append(
                (
                    f"transactions of {size:,}",
                    produce_transactional(cls, args.bootstrap, records, size),
                )
            )
        for label, r in scenarios:
            table.append(
                [
                    label,
                    cls.name,
                    f"{r['records']:,}",
                    f"{r['seconds']:.2f}",
                    fmt_rate(r["records"], r["seconds"]),
                    percentile(r["commits_ms"], 50),
                    percentile(r["commits_ms"], 99),
                ]
            )
            out["produce"].append({"scenario": label, "client": cls.name, **r})
    print(markdown_table(table))
    print()
    plain, txn, committed = write_for_consume(args.bootstrap, args.records)
    rows = [
        ["topic", "isolation", "client", "records read", "median s", "records/s (median)", "range"]
    ]
    runs: list[tuple[str, str, str, int]] = [
        ("written without transactions", plain, "read_uncommitted", args.records),
        ("written without transactions", plain, "read_committed", args.records),
        (
            "transactions, 1 in 10 aborted",
            txn,
            "read_uncommitted",
            max(args.records // 1000, 1) * 1000,
        ),
        ("transactions, 1 in 10 aborted", txn, "read_committed", committed),
    ]
    for topic in (plain, txn):  # a first read warms what a first read warms (connections,
        consume(args.bootstrap, topic, "read_uncommitted", 1)  # indexes); not measured
    readers = (("confluent-kafka", consume), ("odradek", consume_odradek))
    for label, topic, isolation, expect in runs:
        for client, read in readers:
            tries = [read(args.bootstrap, topic, isolation, expect) for _ in range(args.repeat)]
            rates = sorted(r["records"] / r["seconds"] for r in tries)
            median = statistics.median(r["seconds"] for r in tries)
            rows.append(
                [
                    label,
                    isolation,
                    client,
                    f"{tries[0]['records']:,}",
                    f"{median:.2f}",
                    fmt_rate(tries[0]["records"], median),
                    f"{rates[0]:,.0f}-{rates[-1]:,.0f}",
                ]
            )
            out["consume"].append(
                {"topic": label, "isolation": isolation, "client": client, "runs": tries}
            )
    print(markdown_table(rows))
    print()
    wire = [["topic", "isolation", "MB fetched", "Fetch requests", "seconds", "MB/s"]]
    for label, topic in (("written without transactions", plain), ("transactions", txn)):
        for isolation in (0, 1):
            r = broker_fetch(args.bootstrap, topic, isolation)
            wire.append(
                [
                    label,
                    ("read_uncommitted", "read_committed")[isolation],
                    f"{r['bytes'] / 1e6:.1f}",
                    str(r["requests"]),
                    f"{r['seconds']:.3f}",
                    f"{r['bytes'] / 1e6 / r['seconds']:.0f}",
                ]
            )
            out.setdefault("broker_fetch", []).append({"topic": label, "isolation": isolation, **r})
    print(markdown_table(wire))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="a running broker (default: start one)")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5, help="reads per consume scenario")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(
        f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"confluent-kafka {ck_version()[0]} (librdkafka {rdkafka_version()[0]})",
        file=sys.stderr,
    )
    broker = None
    if args.bootstrap is None:
        from odradek.testing import start_broker

        broker = start_broker(Path(tempfile.mkdtemp(prefix="odradek-bench-")) / "data")
        args.bootstrap = broker.bootstrap
    try:
        result = run(args)
    finally:
        if broker is not None:
            broker.stop()
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
