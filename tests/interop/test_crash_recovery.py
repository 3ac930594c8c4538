"""SIGKILL the broker while a producer sends with acks=all; nothing acknowledged is lost.

A confluent-kafka producer runs in a thread and records every acknowledged
(partition, offset, value) from its delivery reports. The test kills the broker
(SIGKILL: nothing flushed, nothing closed) in the middle of the stream, starts it
again on the same data directory, lets the producer continue, and repeats. Then
every acknowledged record must be found at its offset with its value, and no
offset may have been acknowledged twice for different values.
"""

from __future__ import annotations

import threading
import time

import pytest
from interop_helpers import unique_topic, wait_until

PARTITIONS = 3
KILL_CYCLES = 2
ACKS_BEFORE_KILL = 500  # records acknowledged before each kill, at least
SEND_BATCH = 50
SEND_PAUSE_S = 0.01  # at most ~5,000 records/s: a steady stream, not a flood


class AckingProducer(threading.Thread):
    """Sends b"crash-<n>" records round-robin over the partitions until stopped."""

    def __init__(self, bootstrap: str, topic: str, max_seconds: float) -> None:
        super().__init__(name="acking-producer", daemon=True)
        from confluent_kafka import Producer

        self.topic = topic
        self.max_seconds = max_seconds
        self.stop_event = threading.Event()
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed = 0
        self.sent = 0
        self.error: BaseException | None = None
        self.unflushed = -1
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "enable.idempotence": False,
                "message.timeout.ms": 60_000,  # outlive the restart, then deliver
                "retry.backoff.ms": 100,
                "reconnect.backoff.max.ms": 500,
                "queue.buffering.max.messages": 100_000,
                "socket.connection.setup.timeout.ms": 5_000,
            }
        )

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.failed += 1

    def run(self) -> None:
        try:
            deadline = time.monotonic() + self.max_seconds
            while not self.stop_event.is_set() and time.monotonic() < deadline:
                for _ in range(SEND_BATCH):
                    value = b"crash-%08d" % self.sent
                    try:
                        self.producer.produce(
                            self.topic,
                            value=value,
                            partition=self.sent % PARTITIONS,
                            on_delivery=self._on_delivery,
                        )
                    except BufferError:
                        break
                    self.sent += 1
                self.producer.poll(SEND_PAUSE_S)
            self.unflushed = self.producer.flush(60)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def finish(self) -> None:
        self.stop_event.set()
        self.join(timeout=90)
        assert not self.is_alive(), "producer thread did not stop"
        if self.error is not None:
            raise self.error


def _read_all(
    bootstrap: str, topic: str, acked_ends: dict[int, int]
) -> dict[tuple[int, int], bytes]:
    """Every record of the topic, up to the high watermark or past the last acknowledged
    offset, whichever is further (a broker that under-reports its end is still read)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("unused-group"),
            "enable.auto.commit": False,
        }
    )
    stored: dict[tuple[int, int], bytes] = {}
    try:
        ends = {
            p: max(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1],
                acked_ends.get(p, 0),
            )
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        position = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 60
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                p, o = msg.partition(), msg.offset()
                stored[(p, o)] = msg.value()
                position[p] = max(position[p], o + 1)
    finally:
        consumer.close()
    return stored


@pytest.mark.embedded
@pytest.mark.timeout(240)
def test_sigkill_mid_stream_keeps_every_acked_record(odradek_broker) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = odradek_broker
    topic = unique_topic("crash")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=15)[topic].result(30)

    producer = AckingProducer(broker.bootstrap, topic, max_seconds=150)
    producer.start()
    try:
        for cycle in range(KILL_CYCLES):
            target = len(producer.acked) + ACKS_BEFORE_KILL
            wait_until(
                lambda t=target: len(producer.acked) >= t or not producer.is_alive(),
                timeout_s=45,
                what=f"{target} acknowledged records before kill {cycle + 1}",
            )
            assert producer.is_alive(), f"producer stopped early: {producer.error!r}"
            broker.restart(kill=True)  # SIGKILL mid-stream, then start on the same data dir
        target = len(producer.acked) + ACKS_BEFORE_KILL
        wait_until(
            lambda: len(producer.acked) >= target or not producer.is_alive(),
            timeout_s=60,
            what="the producer to resume after the last restart",
        )
    finally:
        producer.finish()

    acked = list(producer.acked)
    assert len(acked) >= (KILL_CYCLES + 1) * ACKS_BEFORE_KILL
    by_offset: dict[tuple[int, int], bytes] = {}
    for p, o, v in acked:
        previous = by_offset.setdefault((p, o), v)
        assert previous == v, f"offset {p}/{o} acknowledged for {previous!r} and {v!r}"

    acked_ends: dict[int, int] = {}
    for p, o, _v in acked:
        acked_ends[p] = max(acked_ends.get(p, 0), o + 1)
    stored = _read_all(broker.bootstrap, topic, acked_ends)
    missing = [(p, o, v) for p, o, v in acked if (p, o) not in stored]
    wrong = [(p, o, v, stored[(p, o)]) for p, o, v in acked if stored.get((p, o), v) != v]
    assert not missing and not wrong, (
        f"{len(acked)} acknowledged, {len(missing)} missing (first {missing[:5]}), "
        f"{len(wrong)} with other values (first {wrong[:5]}); "
        f"sent {producer.sent}, failed {producer.failed}, unflushed {producer.unflushed}"
    )
