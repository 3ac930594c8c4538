"""Producer against real brokers: round trips, codecs, idempotent retries, partitioning."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from odradek.client import Consumer, Producer, RecordMetadata, TopicPartition
from odradek.client.errors import IllegalStateError, KafkaError, RecordTooLargeError
from odradek.client.partitioner import key_partition

pytestmark = pytest.mark.timeout(120)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60):
    records = []
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(consumer.poll(0.5))
        # Nothing more than expected may arrive.
        records.extend(consumer.poll(0.3))
    return records


def test_round_trip_10000_records(any_bootstrap: str, make_topic, topic_name: str) -> None:
    """The core test, against Odradek and against tansu: keys, values, headers exact."""
    make_topic(any_bootstrap, topic_name, 4)
    n = 10_000
    sent = {}
    with Producer(bootstrap_servers=any_bootstrap, linger_ms=5) as producer:
        futures = []
        for i in range(n):
            key = f"key-{i % 97}".encode()
            value = f"value-{i}".encode() * (1 + i % 5)
            headers = [("seq", str(i).encode()), ("empty", b""), ("none", None)]
            futures.append(producer.send(topic_name, value=value, key=key, headers=headers))
            sent[value] = (key, headers)
        producer.flush(60)
        metas = [f.result(0) for f in futures]
    assert all(isinstance(m, RecordMetadata) and m.offset >= 0 for m in metas)
    # Keys go where the Java client would put them.
    for i, m in enumerate(metas[:500]):
        assert m.partition == key_partition(f"key-{i % 97}".encode(), 4)
    # Offsets are unique and dense per partition.
    by_partition: dict[int, list[int]] = {}
    for m in metas:
        by_partition.setdefault(m.partition, []).append(m.offset)
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))

    records = consume_all(any_bootstrap, topic_name, 4, n)
    assert len(records) == n
    for r in records:
        key, headers = sent[r.value]
        assert r.key == key
        assert r.headers == headers
    # Per key, order of production is kept.
    per_key: dict[bytes, list[int]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        per_key.setdefault(r.key, []).append(int(dict(r.headers)["seq"]))
    assert all(seqs == sorted(seqs) for seqs in per_key.values())


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_codecs(any_bootstrap: str, make_topic, topic_name: str, codec: str) -> None:
    make_topic(any_bootstrap, topic_name, 1)
    values = [(b"payload-%d-" % i) * 20 for i in range(500)]
    with Producer(bootstrap_servers=any_bootstrap, compression_type=codec, linger_ms=20) as p:
        for v in values:
            p.send(topic_name, value=v, key=v[:10])
        p.flush(30)
    records = consume_all(any_bootstrap, topic_name, 1, len(values))
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == list(range(len(values)))


def test_idempotent_retry_after_dropped_connection(
    bootstrap: str, make_topic, topic_name: str
) -> None:
    """Connections dropped with produce requests in flight: retried, no duplicates, in order."""
    make_topic(bootstrap, topic_name, 1)
    n = 6_000
    producer = Producer(
        bootstrap_servers=bootstrap, linger_ms=0, batch_size=2_000, retry_backoff_ms=20
    )
    try:
        producer.send(topic_name, value=b"warm-up").result(10)
        assert producer.producer_id[0] >= 0
        stop = threading.Event()
        drops = 0

        def chaos() -> None:
            nonlocal drops
            while not stop.is_set():
                time.sleep(0.02)
                for conn in list(producer._client._conns.values()):
                    if conn.in_flight_count:
                        conn.disconnect("test: connection dropped mid-flight")
                        drops += 1

        chaos_thread = threading.Thread(target=chaos)
        chaos_thread.start()
        futures = [producer.send(topic_name, value=b"%d" % i) for i in range(n)]
        try:
            producer.flush(90)
        finally:
            stop.set()
            chaos_thread.join()
        metas = [f.result(0) for f in futures]
        assert drops > 0
        assert producer.retry_count > 0
    finally:
        producer.close(10)
    records = consume_all(bootstrap, topic_name, 1, n + 1)
    values = [r.value for r in records][1:]
    counts = Counter(values)
    assert [v for v, c in counts.items() if c > 1] == []
    assert values == [b"%d" % i for i in range(n)]
    # Offsets reported to the caller are where the records really are.
    offsets = {r.value: r.offset for r in records}
    for i, m in enumerate(metas):
        if m.offset >= 0:
            assert offsets[b"%d" % i] == m.offset


def test_sequence_numbers_and_producer_id(bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 2)
    with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
        for i in range(50):
            p.send(topic_name, value=b"x", partition=i % 2).result(10)
        pid, epoch = p.producer_id
        assert pid >= 0 and epoch >= 0
        assert p._next_seq[TopicPartition(topic_name, 0)] == 25
        assert p._next_seq[TopicPartition(topic_name, 1)] == 25


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(bootstrap: str, make_topic, topic_name: str, acks: object) -> None:
    make_topic(bootstrap, topic_name, 1)
    with Producer(bootstrap_servers=bootstrap, acks=acks) as p:
        metas = [p.send(topic_name, value=b"%d" % i) for i in range(100)]
        p.flush(20)
        offsets = [m.result(0).offset for m in metas]
    if acks == 0:
        assert set(offsets) == {-1}
    else:
        assert offsets == list(range(100))
    assert len(consume_all(bootstrap, topic_name, 1, 100)) == 100


def test_delivery_callbacks_and_timestamps(bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    seen: list[tuple[object, RecordMetadata | None]] = []
    with Producer(bootstrap_servers=bootstrap) as p:
        p.send(
            topic_name,
            value="text",
            key="k",
            timestamp_ms=1_600_000_000_000,
            on_delivery=lambda err, meta: seen.append((err, meta)),
        )
        p.flush(10)
    assert len(seen) == 1 and seen[0][0] is None
    meta = seen[0][1]
    assert meta is not None and meta.timestamp == 1_600_000_000_000 and meta.offset == 0
    (record,) = consume_all(bootstrap, topic_name, 1, 1)
    assert (record.key, record.value, record.timestamp) == (b"k", b"text", 1_600_000_000_000)


def test_keyless_records_are_sticky_per_batch(bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 6)
    with Producer(bootstrap_servers=bootstrap, linger_ms=1_000, batch_size=1_000) as p:
        futures = [p.send(topic_name, value=b"v" * 90) for _ in range(100)]
        p.flush(20)
        parts = [f.result(0).partition for f in futures]
    # Runs of the same partition (one batch each), more than one partition used.
    runs = [parts[0]]
    for a in parts[1:]:
        if a != runs[-1]:
            runs.append(a)
    assert len(set(parts)) > 1
    assert len(runs) <= 15  # about 100 * 111 bytes / 1000-byte batches


def test_errors(bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    p = Producer(bootstrap_servers=bootstrap, max_request_size=1_000)
    with pytest.raises(RecordTooLargeError):
        p.send(topic_name, value=b"x" * 2_000)
    with pytest.raises(KafkaError, match="partition 7"):
        p.send(topic_name, value=b"x", partition=7)
    p.close()
    with pytest.raises(IllegalStateError):
        p.send(topic_name, value=b"x")
