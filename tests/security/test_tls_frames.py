"""Frames over TLS on each event loop: the broker's connection receives into its own
buffers (an asyncio.BufferedProtocol) that asyncio's TLS transport and uvloop's fill
by decrypting into them. Many small records pipelined, and records large enough that
their frames get a buffer of their own (one of them a memory map), are produced by
confluent-kafka over TLS and read back byte for byte."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.broker.connection import MAPPED_BYTES
from odradek.testing import BrokerProcess
from odradek.testing_tls import Pki

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_small_and_large_frames_over_tls_on_each_event_loop(
    tmp_path: Path, pki: Pki, loop: str
) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        listeners={"SSL": "SSL"},
        settings={
            "event.loop": loop,
            "ssl.keystore.location": str(pki.server_keystore),
            "message.max.bytes": str(2 * MAPPED_BYTES),
        },
    ).start()
    tls = {"bootstrap.servers": broker.address("SSL"), "security.protocol": "SSL"}
    tls["ssl.ca.location"] = str(pki.ca_cert)
    try:
        small = [os.urandom(1 + i % 300) for i in range(3000)]
        large = [os.urandom(MAPPED_BYTES + 1000), os.urandom(700 * 1024)]
        producer = Producer(tls | {"linger.ms": 5, "message.max.bytes": 3 * MAPPED_BYTES})
        for value in small[:1500] + large + small[1500:]:
            producer.produce("tls-frames", value)
        assert producer.flush(60) == 0
        consumer = Consumer(
            tls
            | {
                "group.id": "tls-frames",
                "fetch.max.bytes": 4 * MAPPED_BYTES,
                "max.partition.fetch.bytes": 4 * MAPPED_BYTES,
            }
        )
        consumer.assign([TopicPartition("tls-frames", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(small) + len(large) and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(1000, 0.5) if m.error() is None]
        consumer.close()
        assert got == small[:1500] + large + small[1500:]
    finally:
        broker.stop()
    assert f"event loop: {loop}" in broker.log_tail()
