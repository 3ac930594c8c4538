"""Producer against real brokers: round trips, codecs, idempotent retries, partitioning."""

from __future__ import annotations

import threading
import time
from array import array
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
                time.sleep(0.001)  # often: produce requests are answered within milliseconds
                for conn in list(producer._client._conns.values()):
                    if conn.in_flight_count:
                        conn.disconnect("test: connection dropped mid-flight")
                        drops += 1

        chaos_thread = threading.Thread(target=chaos)
        chaos_thread.start()
        futures = []
        # At least n records, and more until the chaos has caught requests in flight a few
        # times (a fast machine answers before a slow check looks): bounded in time.
        deadline = time.monotonic() + 60
        try:
            while len(futures) < n or (drops < 3 and time.monotonic() < deadline):
                start = len(futures)
                futures += [
                    producer.send(topic_name, value=b"%d" % i) for i in range(start, start + 500)
                ]
                if len(futures) >= n:
                    producer.flush(90)
            producer.flush(90)
        finally:
            stop.set()
            chaos_thread.join()
        metas = [f.result(0) for f in futures]
        assert drops > 0
        assert producer.retry_count > 0
    finally:
        producer.close(10)
    n = len(futures)
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


def test_record_futures_and_batch_results(bootstrap: str, make_topic, topic_name: str) -> None:
    """send() returns a thin handle per record over one result per batch."""
    make_topic(bootstrap, topic_name, 1)
    called: list[object] = []
    with Producer(bootstrap_servers=bootstrap, linger_ms=2_000) as p:
        futures = [p.send(topic_name, value=b"%d" % i, timestamp_ms=1_000 + i) for i in range(5)]
        assert not futures[0].done() and futures[0].running() and not futures[0].cancel()
        with pytest.raises(TimeoutError):
            futures[0].result(timeout=0.01)
        futures[2].add_done_callback(called.append)
        assert futures[0]._batch is futures[4]._batch  # one ProduceResult for the batch
        p.flush(20)
        metas = [f.result(0) for f in futures]
        assert futures[3].exception(0) is None
    assert [m.offset for m in metas] == [0, 1, 2, 3, 4]
    assert [m.timestamp for m in metas] == [1_000 + i for i in range(5)]
    assert called == [futures[2]]
    late: list[object] = []
    futures[1].add_done_callback(late.append)  # already done: runs at once
    assert late == [futures[1]]


def test_failed_batch_fails_every_record_future(bootstrap: str, make_topic, topic_name) -> None:
    make_topic(bootstrap, topic_name, 1)
    p = Producer(bootstrap_servers=bootstrap, linger_ms=60_000)
    futures = [p.send(topic_name, value=b"x") for _ in range(3)]
    p.close(timeout=0)  # nothing delivered: every queued record fails
    for f in futures:
        assert isinstance(f.exception(5), KafkaError)
        with pytest.raises(KafkaError):
            f.result(0)


def _binary_column(values: list[bytes | None]) -> tuple[bytes | None, bytes, bytes, int]:
    """Arrow's binary layout (validity bitmap, int32 offsets, data, offset 0)."""
    offsets = array("i", [0])
    data = bytearray()
    bits = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            data += v
            bits[i >> 3] |= 1 << (i & 7)
        offsets.append(len(data))
    validity = bytes(bits) if None in values else None
    return validity, offsets.tobytes(), bytes(data), 0


def test_send_columns_round_trip(bootstrap: str, make_topic, topic_name: str) -> None:
    """Bulk rows fill several batches, keep order, nulls, headers and timestamps."""
    make_topic(bootstrap, topic_name, 2)
    n = 500
    keys = [None if i % 7 == 0 else b"k%d" % i for i in range(n)]
    values = [None if i % 11 == 0 else b"value-%d" % i * (1 + i % 3) for i in range(n)]
    stamps = array("q", [1_600_000_000_000 + i for i in range(n)])
    validity = bytearray(b"\xff" * ((n + 7) // 8))
    validity[0] &= 0xFE  # row 0: no timestamp, the producer's clock
    headers = [[("i", b"%d" % i)] if i % 5 == 0 else None for i in range(n)]
    before = int(time.time() * 1000)
    with Producer(bootstrap_servers=bootstrap, batch_size=2_000, linger_ms=5) as p:
        results = p.send_columns(
            topic_name,
            1,
            n,
            values=_binary_column(values),
            keys=_binary_column(keys),
            timestamps=(bytes(validity), stamps.tobytes(), None, 0),
            headers=headers,
        )
        p.flush(30)
    assert len(results) > 5  # 2 KB batches
    assert all(r.done() and r.error is None for r in results)
    assert [r.base_offset for r in results] == sorted(r.base_offset for r in results)
    records = [r for r in consume_all(bootstrap, topic_name, 2, n) if r.partition == 1]
    assert [r.offset for r in records] == list(range(n))
    assert [r.key for r in records] == keys
    assert [r.value for r in records] == values
    assert [r.headers for r in records] == [h or [] for h in headers]
    assert before <= records[0].timestamp <= int(time.time() * 1000)
    assert [r.timestamp for r in records[1:]] == list(stamps[1:])


def test_send_columns_limits(bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    with Producer(bootstrap_servers=bootstrap, batch_size=100, max_request_size=2_000) as p:
        # A row larger than batch_size gets a batch of its own.
        results = p.send_columns(topic_name, 0, 2, values=_binary_column([b"a" * 500, b"b"]))
        p.flush(20)
        assert all(r.error is None for r in results) and len(results) == 2
        with pytest.raises(RecordTooLargeError):
            p.send_columns(topic_name, 0, 1, values=_binary_column([b"x" * 3_000]))
        with pytest.raises(KafkaError, match="partition 3"):
            p.send_columns(topic_name, 3, 1, values=_binary_column([b"x"]))
    assert [r.value for r in consume_all(bootstrap, topic_name, 1, 2)] == [b"a" * 500, b"b"]


def test_refresh_returns_the_callers_topics_after_a_concurrent_refresh(
    bootstrap: str, make_topic, topic_name: str
) -> None:
    """A refresh that finished while we waited for the lock may not cover our topic: then
    we refresh ourselves (before, the first send() slept a retry backoff for it)."""
    from odradek.client.cluster import ClusterMetadata, KafkaClient
    from odradek.client.config import ProducerConfig

    make_topic(bootstrap, topic_name, 3)
    client = KafkaClient(ProducerConfig.from_settings(bootstrap_servers=bootstrap))
    try:
        client.bootstrap(timeout_s=20)
        got: list[ClusterMetadata] = []
        with client._refresh_lock:
            worker = threading.Thread(target=lambda: got.append(client.refresh([topic_name])))
            worker.start()  # it waits for the refresh lock, or will
            # Meanwhile someone else's refresh lands (dated after the worker started), without
            # the worker's topic.
            client.cluster = ClusterMetadata(
                brokers=client.cluster.brokers, updated_at=time.monotonic() + 1
            )
        worker.join(20)
        assert got and got[0].partitions_for(topic_name) == [0, 1, 2]
    finally:
        client.close()
