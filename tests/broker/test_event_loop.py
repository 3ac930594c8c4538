"""The broker's event loop: `event.loop` picks asyncio's own (the default) or uvloop,
and the broker serves real clients on either (the rest of the suite runs its brokers
on the default; `ODRADEK_EVENT_LOOP=uvloop` runs them all on uvloop)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer

from odradek.broker import event_loop
from odradek.extras import MissingExtra
from odradek.testing import BrokerProcess


def test_the_setting_chooses_and_the_environment_replaces_only_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(event_loop.EVENT_LOOP_ENV, raising=False)
    monkeypatch.setattr(event_loop, "_uvloop", lambda: asyncio)  # any module: "it imports"
    assert event_loop.chosen_event_loop("asyncio", explicit=False) == "asyncio"
    assert event_loop.chosen_event_loop("uvloop") == "uvloop"
    assert event_loop.chosen_event_loop("auto") == "uvloop"
    monkeypatch.setenv(event_loop.EVENT_LOOP_ENV, "uvloop")
    assert event_loop.chosen_event_loop("asyncio", explicit=False) == "uvloop"
    assert event_loop.chosen_event_loop("asyncio", explicit=True) == "asyncio"  # --set wins
    monkeypatch.setenv(event_loop.EVENT_LOOP_ENV, "trio")
    with pytest.raises(event_loop.EventLoopUnavailable, match="ODRADEK_EVENT_LOOP=trio"):
        event_loop.chosen_event_loop("asyncio", explicit=False)
    monkeypatch.delenv(event_loop.EVENT_LOOP_ENV)
    monkeypatch.setattr(event_loop, "_uvloop", lambda: None)  # not installed
    assert event_loop.chosen_event_loop("auto") == "asyncio"
    with pytest.raises(MissingExtra, match=r"pip install 'odradek\[uvloop\]'"):
        event_loop.chosen_event_loop("uvloop")
    assert event_loop.event_loop_factory("asyncio") is asyncio.new_event_loop


def test_a_bad_event_loop_setting_is_one_line(tmp_path: Path) -> None:
    serve = [sys.executable, "-m", "odradek", "serve", "--data-dir", str(tmp_path / "d")]
    done = subprocess.run(
        [*serve, "--set", "event.loop=trio"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "event.loop" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_real_clients_on_each_event_loop(tmp_path: Path, loop: str) -> None:
    """confluent-kafka and kafka-python produce and read back through a broker on each
    loop: framing, pipelining, sendfile and the deadlines on that loop."""
    broker = BrokerProcess(tmp_path / "data", settings={"event.loop": loop}).start()
    try:
        values = [f"value-{i}".encode() * (1 + i % 50) for i in range(5000)]
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for value in values:
            producer.produce("loop", value)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False}
        )
        consumer.assign([TopicPartition("loop", 0, 0)])
        got: list[bytes] = []
        for _ in range(100):
            got += [m.value() for m in consumer.consume(1000, 0.5) if m.error() is None]
            if len(got) >= len(values):
                break
        consumer.close()
        assert got == values
        kp = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        kp.send("loop-kp", b"from kafka-python").get(timeout=30)
        kp.close()
        kc = KafkaConsumer(
            "loop-kp",
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=10_000,
        )
        assert [m.value for m in kc][:1] == [b"from kafka-python"]
        kc.close()
    finally:
        broker.stop()
    assert f"event loop: {loop}" in broker.log_tail()
