"""Decompression bombs and poison batches sent as raw Produce frames (issue 10, items 4, 5).

Before: a 16 KB zstd batch inflating to 512 MiB was stored and later inflated
whole (ListOffsets by timestamp, the cleaner); batches with an unknown codec,
garbage under a valid CRC or a lying records_count were stored and stalled or
crashed consumers. Now each is refused at produce time with a clear error, the
log end does not move, the broker stays small, and real clients read the topic.
"""

from __future__ import annotations

import struct
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import cramjam
import lz4.frame
import pytest
import zstandard
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from odradek.protocol.records import Record, build_batch, crc32c
from odradek.testing import BrokerProcess

from ..broker.wire import WireClient
from .log_helpers import LATEST, create_topic, list_offset, proc_status_kib, produce

MiB = 1 << 20
RECORD_LIST_TOO_LARGE = 18
CORRUPT_MESSAGE = 2
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
_HEADER = struct.Struct(">qiibIhiqqqhii")
_XERIAL_HEAD = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
# A broker holding its interpreter, kio and a few topics sits near 60-90 MB; one
# inflated bomb would add 128-512 MB.
RSS_CEILING_KIB = 250 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(Path(tmp_path_factory.mktemp("poison")) / "data").start()
    try:
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(broker.bootstrap, timeout_s=60) as wire:
        yield wire


def new_topic(client: WireClient) -> str:
    topic = f"poison-{uuid.uuid4().hex[:10]}"
    create_topic(client, topic)
    return topic


def raw_batch(payload: bytes, count: int, *, codec: int = 0, last_offset_delta: int = -1) -> bytes:
    lod = count - 1 if last_offset_delta < 0 else last_offset_delta
    now = int(time.time() * 1000)
    out = bytearray(
        _HEADER.pack(0, 49 + len(payload), -1, 2, 0, codec, lod, now, now, -1, -1, -1, count)
    )
    out += payload
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def _zeros(chunks: int, compressor: Callable[[bytes], bytes], flush: Callable[[], bytes]) -> bytes:
    zero = bytes(MiB)
    return b"".join(compressor(zero) for _ in range(chunks)) + flush()


def zstd_bomb() -> bytes:
    """The issue's bomb: about 16 KB of zstd that inflates to 512 MiB."""
    c = zstandard.ZstdCompressor(level=19).compressobj()
    return _zeros(512, c.compress, c.flush)


def gzip_bomb() -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return _zeros(128, c.compress, c.flush)


def lz4_bomb() -> bytes:
    c = lz4.frame.LZ4FrameCompressor(block_linked=False, content_checksum=False)
    return c.begin() + _zeros(128, c.compress, c.flush)


def snappy_bomb() -> bytes:
    """Xerial framing, as the Java client writes it: 32 KiB blocks of zeros (~21 MiB)."""
    block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    return _XERIAL_HEAD + (struct.pack(">i", len(block)) + block) * (21 * 32)


BOMBS = {1: gzip_bomb, 2: snappy_bomb, 3: lz4_bomb, 4: zstd_bomb}


@pytest.mark.parametrize("codec", sorted(BOMBS))
def test_a_decompression_bomb_is_refused_and_the_broker_stays_small(
    broker: BrokerProcess, client: WireClient, codec: int
) -> None:
    topic = new_topic(client)
    bomb = BOMBS[codec]()
    assert len(bomb) < MiB  # within max.message.bytes: only its inflated size is wrong
    produced = produce(client, topic, raw_batch(bomb, 1, codec=codec))
    assert produced.error_code == RECORD_LIST_TOO_LARGE, produced
    assert "inflate to more than" in (produced.error_message or "")
    # Nothing was stored, so nothing inflates later either; the broker answers at once.
    assert list_offset(client, topic, LATEST).offset == 0
    assert list_offset(client, topic, 0).offset == -1
    assert broker.pid is not None
    assert proc_status_kib(broker.pid, "VmHWM") < RSS_CEILING_KIB


def _plain(n: int) -> bytes:
    batch = build_batch([(b"k%d" % i, b"value-%d" % i, ()) for i in range(n)], timestamp_ms=1000)
    return batch[61:]


POISON = {
    "unknown codec 5": (lambda: raw_batch(_plain(3), 3, codec=5), UNSUPPORTED_COMPRESSION_TYPE),
    "unknown codec 7": (lambda: raw_batch(_plain(3), 3, codec=7), UNSUPPORTED_COMPRESSION_TYPE),
    "garbage under a valid crc": (
        lambda: raw_batch(bytes(range(7, 207)), 4),
        INVALID_RECORD,
    ),
    "one record claiming a million": (lambda: raw_batch(_plain(1), 1_000_000), INVALID_RECORD),
    "three records claiming four": (lambda: raw_batch(_plain(3), 4), INVALID_RECORD),
    "offset deltas with a gap": (
        lambda: raw_batch(
            build_batch([Record(0, 0, b"a", b"1"), Record(5, 0, b"b", b"2")], timestamp_ms=1)[61:],
            2,
            last_offset_delta=1,
        ),
        INVALID_RECORD,
    ),
    "gzip of garbage": (
        lambda: raw_batch(zlib.compress(bytes(range(40, 240)), wbits=31), 2, codec=1),
        INVALID_RECORD,
    ),
    "gzip claiming more records": (
        lambda: raw_batch(zlib.compress(_plain(2), wbits=31), 9, codec=1),
        INVALID_RECORD,
    ),
    "not gzip at all": (lambda: raw_batch(b"\x00" * 64, 1, codec=1), CORRUPT_MESSAGE),
}


def test_poison_batches_are_refused_and_real_clients_read_the_rest(
    broker: BrokerProcess, client: WireClient
) -> None:
    topic = new_topic(client)
    good = [f"good-{i}".encode() for i in range(20)]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for value in good[:10]:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    for name, (make, expected) in POISON.items():
        produced = produce(client, topic, make())
        assert produced.error_code == expected, (name, produced)
        assert list_offset(client, topic, LATEST).offset == 10, f"{name} moved the log end"
    for value in good[10:]:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    assert list_offset(client, topic, LATEST).offset == 20

    assert _consume_confluent(broker.bootstrap, topic, len(good)) == good
    assert _consume_kafka_python(broker.bootstrap, topic, len(good)) == good


def _consume_confluent(bootstrap: str, topic: str, want: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < want and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(bytes(message.value() or b""))
    finally:
        consumer.close()
    return got


def _consume_kafka_python(bootstrap: str, topic: str, want: int) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=60_000
    )
    partition = KpTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < want and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                got.extend(bytes(r.value) for r in records)
    finally:
        consumer.close()
    return got
