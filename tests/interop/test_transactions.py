"""Transactions with the real clients: confluent-kafka, kafka-python and aiokafka.

Each client runs a consume-transform-produce loop (KIP-98 / KIP-447): it reads an
input topic in a consumer group, writes each record upper-cased to an output topic
of three partitions inside a transaction together with the group's offsets, and
commits; in between it writes transactions it aborts. A read_committed
consumer (confluent-kafka's, and Odradek's) then sees every input record exactly once in the output,
and nothing of an aborted transaction; a read_uncommitted one sees the aborted
records too (they were really written); the group's committed offsets are the
input's end. confluent-kafka also shows fencing: a second producer with the same
transactional id aborts the first one's open transaction, whose commit then fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from interop_helpers import unique_topic

INPUT_PARTITIONS = 2
OUTPUT_PARTITIONS = 3
RECORDS = 40
DEADLINE_S = 60

pytestmark = pytest.mark.timeout(120)


def setup_topics(bootstrap: str) -> tuple[str, str]:
    source, sink = unique_topic("txn-in"), unique_topic("txn-out")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [NewTopic(source, INPUT_PARTITIONS, 1), NewTopic(sink, OUTPUT_PARTITIONS, 1)]
    )
    for future in created.values():
        future.result(timeout=10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(source, value=b"rec-%03d" % i, partition=i % INPUT_PARTITIONS)
    assert producer.flush(10) == 0
    return source, sink


def read_all(bootstrap: str, topic: str, *, committed: bool, expect: int) -> list[bytes]:
    """Every value of ``topic`` as a confluent-kafka consumer of that isolation sees it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("reader"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(OUTPUT_PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if len(got) >= expect and time.monotonic() - quiet_since > 1.0:
                    break
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
            quiet_since = time.monotonic()
    finally:
        consumer.close()
    return got


def read_all_odradek(bootstrap: str, topic: str, *, committed: bool, expect: int) -> list[bytes]:
    """Every value of ``topic`` as Odradek's own consumer of that isolation sees it."""
    from odradek.client import Consumer as OdradekConsumer
    from odradek.client import TopicPartition as OdradekTopicPartition

    got: list[bytes] = []
    with OdradekConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed" if committed else "read_uncommitted",
    ) as consumer:
        consumer.assign([OdradekTopicPartition(topic, p) for p in range(OUTPUT_PARTITIONS)])
        deadline = time.monotonic() + 20
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            records = consumer.poll(0.2)
            if not records:
                if len(got) >= expect and time.monotonic() - quiet_since > 1.0:
                    break
                continue
            got.extend(r.value for r in records)
            quiet_since = time.monotonic()
    return got


def committed_offsets(bootstrap: str, group: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, p) for p in range(INPUT_PARTITIONS)]
        return [tp.offset for tp in consumer.committed(tps, timeout=10)]
    finally:
        consumer.close()


def check_output(bootstrap: str, source: str, sink: str, group: str, aborted: int) -> None:
    expected = sorted(b"REC-%03d" % i for i in range(RECORDS))
    committed = read_all(bootstrap, sink, committed=True, expect=RECORDS)
    assert sorted(committed) == expected, "read_committed must see each input once, no aborts"
    everything = read_all(bootstrap, sink, committed=False, expect=RECORDS + aborted)
    assert sum(v.startswith(b"ABORTED") for v in everything) == aborted
    # Odradek's consumer reads the same: each committed record once, aborted ones only
    # at read_uncommitted.
    ours = read_all_odradek(bootstrap, sink, committed=True, expect=RECORDS)
    assert sorted(ours) == expected, "Odradek's read_committed consumer saw aborted records"
    ours_all = read_all_odradek(bootstrap, sink, committed=False, expect=RECORDS + aborted)
    assert sorted(ours_all) == sorted(everything)
    assert committed_offsets(bootstrap, group, source) == [RECORDS // INPUT_PARTITIONS] * 2


def run_until(done: Callable[[], bool], step: Callable[[], None]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, "the transactional loop made no progress"
        step()


@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_confluent_kafka_consume_transform_produce(bootstrap: str, group_protocol: str) -> None:
    """With group.protocol=consumer (KIP-848) the group metadata the producer sends carries
    the member epoch as its generation, which TxnOffsetCommit checks."""
    source, sink = setup_topics(bootstrap)
    group = unique_topic("etl")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": group_protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("tx")})
    producer.init_transactions(30)
    state = {"done": 0, "aborted": 0, "round": 0}

    def step() -> None:
        msgs = [m for m in consumer.consume(7, 0.5) if m.error() is None]
        if not msgs:
            return
        state["round"] += 1
        if state["round"] % 2:
            producer.begin_transaction()  # a transaction that is aborted
            for p in range(OUTPUT_PARTITIONS):
                producer.produce(sink, value=b"ABORTED-%d" % state["round"], partition=p)
            producer.flush(10)
            producer.abort_transaction(30)
            state["aborted"] += OUTPUT_PARTITIONS
        producer.begin_transaction()
        for i, m in enumerate(msgs):
            producer.produce(sink, value=m.value().upper(), partition=i % OUTPUT_PARTITIONS)
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        state["done"] += len(msgs)

    try:
        run_until(lambda: state["done"] >= RECORDS, step)
    finally:
        consumer.close()
    assert state["done"] == RECORDS
    check_output(bootstrap, source, sink, group, state["aborted"])


def test_confluent_kafka_fencing_aborts_the_zombie(bootstrap: str) -> None:
    sink = unique_topic("txn-fence")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(sink, OUTPUT_PARTITIONS, 1)])[sink].result(timeout=10)
    txn_id = unique_topic("tx-fence")
    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(sink, value=b"zombie", partition=0)
    assert zombie.flush(10) == 0
    successor = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    successor.init_transactions(30)  # bumps the epoch, aborting the zombie's transaction
    successor.begin_transaction()
    successor.produce(sink, value=b"successor", partition=1)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    assert read_all(bootstrap, sink, committed=True, expect=1) == [b"successor"]


def test_kafka_python_transactions(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata
    from kafka import TopicPartition as KTopicPartition

    source, sink = setup_topics(bootstrap)
    group = unique_topic("kp-etl")
    consumer = KafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_topic("kp-tx"))
    producer.init_transactions()
    state = {"done": 0, "aborted": 0}

    def step() -> None:
        polled = consumer.poll(500, max_records=7)
        msgs = [m for batch in polled.values() for m in batch]
        if not msgs:
            return
        producer.begin_transaction()
        for p in range(OUTPUT_PARTITIONS):
            producer.send(sink, b"ABORTED", partition=p)
        producer.flush()
        producer.abort_transaction()
        state["aborted"] += OUTPUT_PARTITIONS
        producer.begin_transaction()
        for i, m in enumerate(msgs):
            producer.send(sink, m.value.upper(), partition=i % OUTPUT_PARTITIONS)
        offsets = {
            KTopicPartition(tp.topic, tp.partition): OffsetAndMetadata(batch[-1].offset + 1, "", -1)
            for tp, batch in polled.items()
        }
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        producer.commit_transaction()
        state["done"] += len(msgs)

    try:
        run_until(lambda: state["done"] >= RECORDS, step)
    finally:
        consumer.close()
        producer.close()
    check_output(bootstrap, source, sink, group, state["aborted"])
    # ListOffsets at read_committed answers the last stable offset (here: the end).
    reader = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        ends = reader.end_offsets([KTopicPartition(sink, p) for p in range(OUTPUT_PARTITIONS)])
    finally:
        reader.close()
    assert sum(ends.values()) >= RECORDS + state["aborted"]


def test_aiokafka_transactions(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition

    source, sink = setup_topics(bootstrap)
    group = unique_topic("aio-etl")
    aborted = 0

    async def main() -> int:
        nonlocal aborted
        consumer = AIOKafkaConsumer(
            source,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=unique_topic("aio-tx")
        )
        await consumer.start()
        await producer.start()
        done = 0
        deadline = time.monotonic() + DEADLINE_S
        try:
            while done < RECORDS:
                assert time.monotonic() < deadline, "the transactional loop made no progress"
                polled = await consumer.getmany(timeout_ms=500, max_records=7)
                msgs = [m for batch in polled.values() for m in batch]
                if not msgs:
                    continue
                await producer.begin_transaction()
                for p in range(OUTPUT_PARTITIONS):
                    await producer.send(sink, b"ABORTED", partition=p)
                await producer.abort_transaction()
                aborted += OUTPUT_PARTITIONS
                async with producer.transaction():
                    for i, m in enumerate(msgs):
                        assert m.value is not None
                        await producer.send(sink, m.value.upper(), partition=i % OUTPUT_PARTITIONS)
                    offsets: dict[Any, int] = {
                        ATopicPartition(tp.topic, tp.partition): batch[-1].offset + 1
                        for tp, batch in polled.items()
                    }
                    await producer.send_offsets_to_transaction(offsets, group)
                done += len(msgs)
        finally:
            await consumer.stop()
            await producer.stop()
        return done

    assert asyncio.run(main()) == RECORDS
    check_output(bootstrap, source, sink, group, aborted)
