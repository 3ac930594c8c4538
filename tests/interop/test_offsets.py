"""ListOffsets (earliest / latest / by timestamp), seek, and reading past the end.

Records are produced with explicit CreateTime timestamps, several per batch, so
the broker has to find offsets inside batches, not only at batch starts. Kafka
answers a timestamp lookup with the first offset whose timestamp is >= the
target, or "none" (-1) when every record is older.
"""

from __future__ import annotations

import time

import pytest
from interop_helpers import unique_topic

pytestmark = pytest.mark.timeout(120)

N = 100
STEP_MS = 1000


def _base_ts() -> int:
    # Recent enough that no time-based retention can apply, whole seconds for legibility.
    return (int(time.time()) - 3600) * 1000


def _produce_timestamped(bootstrap: str, topic: str, partitions: int, base_ts: int) -> None:
    """N records per partition; record i has timestamp base_ts + i * STEP_MS, value b"i"."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=15)[topic].result(30)
    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50})
    for p in range(partitions):
        for i in range(N):
            producer.produce(
                topic,
                value=b"%d" % i,
                key=b"p%d" % p,
                partition=p,
                timestamp=base_ts + i * STEP_MS,
                on_delivery=lambda err, _m: errors.append(err) if err else None,
            )
    assert producer.flush(30) == 0
    assert not errors, errors[:3]


def _lookups(base_ts: int) -> list[tuple[int, int | None]]:
    """(timestamp, expected offset or None for "after the last record")."""
    last = base_ts + (N - 1) * STEP_MS
    return [
        (base_ts - 10 * STEP_MS, 0),
        (base_ts, 0),
        (base_ts + 1, 1),
        (base_ts + 37 * STEP_MS, 37),
        (base_ts + 50 * STEP_MS - 1, 50),
        (base_ts + 50 * STEP_MS, 50),
        (last, N - 1),
        (last + 1, None),
    ]


def test_confluent_offsets_for_times_and_seek(bootstrap: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = unique_topic("ck-times")
    base = _base_ts()
    _produce_timestamped(bootstrap, topic, 2, base)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("unused-group"),
            "enable.auto.commit": False,
        }
    )
    try:
        for p in range(2):
            for ts, want in _lookups(base):
                [res] = consumer.offsets_for_times([TopicPartition(topic, p, ts)], timeout=15)
                assert res.error is None, res.error
                assert res.offset == (-1 if want is None else want), (p, ts - base, res)

        # Seek through assign(): start in the middle.
        consumer.assign([TopicPartition(topic, 0, 50)])
        got = _read_values(consumer, 50)
        assert got == [(o, b"%d" % o) for o in range(50, N)]

        # Seek on an assigned, fetching partition: jump back, then forward.
        consumer.assign([TopicPartition(topic, 1, 0)])
        assert _read_values(consumer, 5) == [(o, b"%d" % o) for o in range(5)]
        consumer.seek(TopicPartition(topic, 1, 80))
        assert _read_values(consumer, 20) == [(o, b"%d" % o) for o in range(80, N)]
        consumer.seek(TopicPartition(topic, 1, 10))
        assert _read_values(consumer, 3) == [(o, b"%d" % o) for o in range(10, 13)]

        # A looked-up offset is a valid position: seek to the record at base+70s.
        [res] = consumer.offsets_for_times(
            [TopicPartition(topic, 1, base + 70 * STEP_MS)], timeout=15
        )
        consumer.seek(TopicPartition(topic, 1, res.offset))
        assert _read_values(consumer, 1) == [(70, b"70")]
    finally:
        consumer.close()


def _read_values(consumer, count: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        out.append((msg.offset(), msg.value()))
    return out


def test_kafka_python_offsets_for_times_and_seek(bootstrap: str) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = unique_topic("kp3-times")
    base = _base_ts()
    _produce_timestamped(bootstrap, topic, 1, base)
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        for ts, want in _lookups(base):
            res = consumer.offsets_for_times({tp: ts})[tp]
            if want is None:
                assert res is None, (ts - base, res)
            else:
                assert res is not None and res.offset == want, (ts - base, res)
                assert res.timestamp == base + want * STEP_MS, (ts - base, res)
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: N}

        consumer.assign([tp])
        consumer.seek(tp, 50)
        got: list[tuple[int, bytes, int]] = []
        deadline = time.monotonic() + 30
        while len(got) < N - 50 and time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=500).values():
                got += [(m.offset, m.value, m.timestamp) for m in msgs]
        assert got == [(o, b"%d" % o, base + o * STEP_MS) for o in range(50, N)]
        assert consumer.position(tp) == N
    finally:
        consumer.close()


def test_watermarks_match_produced(bootstrap: str) -> None:
    """earliest = 0 and latest = log end offset, from three clients, batched records."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

    topic = unique_topic("watermarks")
    counts = {0: 0, 1: 1, 2: 57, 3: 1000}  # partition 0 stays empty
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, len(counts), 1)], operation_timeout=15)[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for p, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=b"%d-%d" % (p, i), partition=p)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("unused-group")})
    try:
        for p, n in counts.items():
            assert consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15) == (
                0,
                n,
            ), f"partition {p}"
    finally:
        consumer.close()

    for spec, want in (
        (OffsetSpec.earliest(), dict.fromkeys(counts, 0)),
        (OffsetSpec.latest(), counts),
    ):
        futures = admin.list_offsets({TopicPartition(topic, p): spec for p in counts})
        got = {tp.partition: f.result(15).offset for tp, f in futures.items()}
        assert got == want, spec

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [KTP(topic, p) for p in counts]
        assert kc.beginning_offsets(tps) == dict.fromkeys(tps, 0)
        assert kc.end_offsets(tps) == {KTP(topic, p): n for p, n in counts.items()}
    finally:
        kc.close()


def test_fetch_past_end_is_offset_out_of_range(bootstrap: str) -> None:
    """A fetch beyond the log end gets OFFSET_OUT_OF_RANGE; librdkafka, told not to
    reset, reports it instead of silently jumping."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    topic = unique_topic("past-end")
    producer = Producer({"bootstrap.servers": bootstrap})
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=15)[topic].result(30)
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("unused-group"),
            "auto.offset.reset": "error",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 25)])
        error = None
        deadline = time.monotonic() + 20
        while error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is not None, f"record at {msg.offset()} past the end"
            error = msg.error()
        assert error is not None, "no error for a fetch past the log end"
        accepted = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
        assert error.code() in accepted, error
        # Reading from the end itself is fine and returns nothing yet.
        consumer.assign([TopicPartition(topic, 0, 10)])
        assert consumer.poll(1.0) is None
    finally:
        consumer.close()
