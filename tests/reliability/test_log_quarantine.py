"""Corrupt segments are quarantined, never skipped silently nor deleted (issue 10, item 6).

Before: a corrupted batch length in the middle of a segment (indexes intact)
made fetches skip the rest of that segment without an error; corruption met by
recovery truncated the segment there and deleted every later segment, with
only a warning. Now the damaged range answers CORRUPT_MESSAGE, everything
around it stays readable by real clients, and nothing is deleted.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from odradek.protocol.records import build_batch, iter_batches
from odradek.testing import BrokerProcess

from ..broker.wire import WireClient
from .log_helpers import LATEST, create_topic, fetch, list_offset, produce

CORRUPT_MESSAGE = 2
KAFKA_STORAGE_ERROR = 56
RECORDS = 600
PADDING = b"." * 8000  # 600 records fill several 1 MiB segments (Kafka's least segment.bytes)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        yield proc
    finally:
        proc.kill()


def _topic_with_records(broker: BrokerProcess, segment_bytes: int) -> str:
    """A one-partition topic of RECORDS records, one batch each (values 'v-<offset>...')."""
    topic = f"quarantine-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic, segment_bytes=str(segment_bytes), index_interval_bytes="256")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, b"v-%d:" % i + PADDING, partition=0)
        producer.flush(30)  # one batch per record: many batches per segment
    return topic


def _corrupt_length(segment: Path, which: float) -> tuple[int, int]:
    """Damage the batch_length of the batch ``which`` of the way into ``segment``.

    Returns the offsets [first, end) of the batch hit.
    """
    batches = list(iter_batches(segment.read_bytes()))
    pos, hit = batches[int(len(batches) * which)]
    with open(segment, "r+b") as f:
        f.seek(pos + 8)
        f.write(struct.pack(">i", hit.batch_length + 29))
    return hit.base_offset, hit.next_offset


def _consume(
    bootstrap: str, topic: str, start: int, until: int
) -> tuple[list[int], list[KafkaError]]:
    """Offsets read from ``start`` and the errors seen, until offset ``until`` or an error."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.error.backoff.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic, 0, start)])
    offsets: list[int] = []
    errors: list[KafkaError] = []
    deadline = time.monotonic() + 60
    try:
        while (
            time.monotonic() < deadline and not errors and (not offsets or offsets[-1] < until - 1)
        ):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                errors.append(message.error())
                continue
            offsets.append(message.offset())
            assert message.value() == b"v-%d:" % message.offset() + PADDING
    finally:
        consumer.close()
    return offsets, errors


def _check_quarantined(broker: BrokerProcess, topic: str, lost: tuple[int, int]) -> None:
    first, end = lost
    with WireClient(broker.bootstrap) as client:
        assert list_offset(client, topic, LATEST).offset == RECORDS
        for offset in (first, end - 1):
            assert fetch(client, topic, offset).error_code == CORRUPT_MESSAGE
        assert fetch(client, topic, end).error_code == 0
    # A consumer reading from the start gets everything before the damage, then an error.
    offsets, errors = _consume(broker.bootstrap, topic, 0, RECORDS)
    assert offsets == list(range(first))
    assert errors and errors[0].code() == KafkaError.INVALID_MSG, errors  # CORRUPT_MESSAGE (2)
    # Seeking past the damage reads every later record, up to the end.
    offsets, errors = _consume(broker.bootstrap, topic, end, RECORDS)
    assert not errors
    assert offsets == list(range(end, RECORDS))
    partition_dir = broker.data_dir / f"{topic}-0"
    assert list(partition_dir.glob("*.corrupt")), "the quarantine is recorded for the operator"
    assert "quarantined" in broker.log_path.read_text()


@pytest.mark.embedded
def test_a_damaged_length_mid_segment_fails_loud_instead_of_skipping(
    broker: BrokerProcess,
) -> None:
    topic = _topic_with_records(broker, 1 << 30)  # one segment
    broker.stop()
    (segment,) = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    lost = _corrupt_length(segment, 0.5)
    broker.start()  # a clean shutdown: nothing is scanned, the read finds the damage
    _check_quarantined(broker, topic, lost)


@pytest.mark.embedded
def test_recovery_quarantines_damage_and_deletes_no_later_segment(broker: BrokerProcess) -> None:
    topic = _topic_with_records(broker, 1 << 20)  # several segments
    broker.kill()  # unclean: recovery will scan
    partition_dir = broker.data_dir / f"{topic}-0"
    segments = sorted(partition_dir.glob("*.log"))
    assert len(segments) >= 4
    victim = segments[1]
    (partition_dir / f"{victim.stem}.index").unlink(missing_ok=True)  # so it is rebuilt
    lost = _corrupt_length(victim, 0.5)
    broker.start()
    assert sorted(partition_dir.glob("*.log")) == segments
    _check_quarantined(broker, topic, lost)


@pytest.mark.embedded
def test_a_segment_that_cannot_be_read_answers_kafka_storage_error(broker: BrokerProcess) -> None:
    """A disk error while reading gets Kafka's answer for one, KAFKA_STORAGE_ERROR (56),
    on that partition only; before, the Fetch handler failed and the connection closed.
    (An unreadable sealed segment: its file replaced by a directory while stopped.)"""
    topic = f"unreadable-{uuid.uuid4().hex[:8]}"
    big = build_batch([(None, b"v" * 700_000, ())], timestamp_ms=int(time.time() * 1000))
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic, segment_bytes=str(1 << 20))
        for _ in range(3):
            assert produce(client, topic, big).error_code == 0
    broker.stop()
    partition_dir = broker.data_dir / f"{topic}-0"
    first, *later = sorted(partition_dir.glob("*.log"))
    assert later, "the batches fill more than one segment"
    first.unlink()
    first.mkdir()
    broker.start()
    with WireClient(broker.bootstrap) as client:
        assert fetch(client, topic, 0).error_code == KAFKA_STORAGE_ERROR
        readable = int(later[-1].stem)
        answer = fetch(client, topic, readable)  # the same connection goes on
        assert answer.error_code == 0 and answer.records
    assert "cannot read" in broker.log_path.read_text()
