"""Each real client creates a topic, produces 10,000 records with keys and headers,
and reads them back byte-exact at offsets 0..n-1 of each partition, in order.

Consumers use assign() with explicit offsets, no consumer group.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest
from interop_helpers import (
    Rec,
    assert_partitions_exact,
    by_partition,
    make_records,
    norm_headers,
    read_with_kafka_python,
    unique_topic,
)

N = 10_000
PARTITIONS = 3
pytestmark = pytest.mark.timeout(180)


def test_confluent_kafka_roundtrip(bootstrap: str) -> None:
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique_topic("ck-roundtrip")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=15)[topic].result(30)

    records = make_records(N, PARTITIONS)
    acks: list[tuple[int, int] | KafkaError] = [None] * N  # type: ignore[list-item]

    def on_delivery(index: int):
        def cb(err, msg):
            acks[index] = err if err is not None else (msg.partition(), msg.offset())

        return cb

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i, rec in enumerate(records):
        while True:
            try:
                producer.produce(
                    topic,
                    key=rec.key,
                    value=rec.value,
                    headers=list(rec.headers),
                    partition=rec.partition,
                    on_delivery=on_delivery(i),
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0, "undelivered records"
    _assert_acks(records, acks)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("unused-group"),  # librdkafka insists; never joined
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    try:
        while sum(map(len, got.values())) < N and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                p = msg.partition()
                got[p].append(
                    (msg.offset(), Rec(p, msg.key(), msg.value(), norm_headers(msg.headers())))
                )
    finally:
        consumer.close()
    assert_partitions_exact(by_partition(records, PARTITIONS), got)


def test_kafka_python_3_roundtrip(bootstrap: str) -> None:
    import kafka
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    assert kafka.__version__.startswith("3."), kafka.__version__
    topic = unique_topic("kp3-roundtrip")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    finally:
        admin.close()

    records = make_records(N, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [
            producer.send(
                topic,
                key=rec.key,
                value=rec.value,
                headers=list(rec.headers),
                partition=rec.partition,
            )
            for rec in records
        ]
        producer.flush(timeout=60)
        acks = [(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)]
    finally:
        producer.close(timeout=10)
    _assert_acks(records, acks)

    got = read_with_kafka_python(bootstrap, topic, PARTITIONS, N)
    assert_partitions_exact(by_partition(records, PARTITIONS), got)


def test_aiokafka_roundtrip(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = unique_topic("aio-roundtrip")
    records = make_records(N, PARTITIONS)

    async def run() -> tuple[list[tuple[int, int]], dict[int, list[tuple[int, Rec]]]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]
            )
        finally:
            await admin.close()

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    key=rec.key,
                    value=rec.value,
                    headers=list(rec.headers),
                    partition=rec.partition,
                )
                for rec in records
            ]
            metas = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        acks = [(m.partition, m.offset) for m in metas]

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in range(PARTITIONS)}
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            deadline = time.monotonic() + 60
            while sum(map(len, got.values())) < N and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500, max_records=5000)
                for tp, msgs in batch.items():
                    for m in msgs:
                        p = tp.partition
                        got[p].append((m.offset, Rec(p, m.key, m.value, norm_headers(m.headers))))
        finally:
            await consumer.stop()
        return acks, got

    acks, got = asyncio.run(asyncio.wait_for(run(), timeout=150))
    _assert_acks(records, acks)
    assert_partitions_exact(by_partition(records, PARTITIONS), got)


def test_kafka_python_2_0_2_roundtrip(bootstrap: str, kp202_python: Path, tmp_path: Path) -> None:
    """kafka-python 2.0.2 in its own venv, driven through tests/interop/kp202_driver.py."""
    topic = unique_topic("kp202-roundtrip")
    records = make_records(N, PARTITIONS)
    spec = {
        "bootstrap": bootstrap,
        "topic": topic,
        "partitions": PARTITIONS,
        "timeout_s": 120,
        "records": [
            [
                r.partition,
                None if r.key is None else r.key.hex(),
                None if r.value is None else r.value.hex(),
                [[k, v.hex()] for k, v in r.headers],
            ]
            for r in records
        ],
    }
    spec_path, out_path = tmp_path / "in.json", tmp_path / "out.json"
    spec_path.write_text(json.dumps(spec))
    driver = Path(__file__).with_name("kp202_driver.py")
    done = subprocess.run(
        [str(kp202_python), str(driver), str(spec_path), str(out_path)],
        capture_output=True,
        text=True,
        timeout=160,
    )
    assert done.returncode == 0, f"driver failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    out = json.loads(out_path.read_text())
    assert out["kafka_python"] == "2.0.2"
    _assert_acks(records, [tuple(a) for a in out["acks"]])

    def unhex(text: str | None) -> bytes | None:
        return None if text is None else bytes.fromhex(text)

    got = {
        int(p): [
            (off, Rec(int(p), unhex(k), unhex(v), tuple((hk, unhex(hv)) for hk, hv in h)))
            for off, k, v, h in rows
        ]
        for p, rows in out["consumed"].items()
    }
    assert_partitions_exact(by_partition(records, PARTITIONS), got)


def _assert_acks(records: list[Rec], acks: list) -> None:
    """The producer was told (partition, offset) = (its partition, its index there)."""
    assert len(acks) == len(records), f"{len(acks)} acks for {len(records)} records"
    errors = [a for a in acks if not isinstance(a, tuple)]
    assert not errors, f"{len(errors)} delivery errors, first: {errors[:3]}"
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    expected = []
    for rec in records:
        expected.append((rec.partition, next_offset[rec.partition]))
        next_offset[rec.partition] += 1
    mismatches = [(i, a, e) for i, (a, e) in enumerate(zip(acks, expected, strict=True)) if a != e]
    assert not mismatches, (
        f"{len(mismatches)} acks differ, first (index, got, want): {mismatches[:5]}"
    )
