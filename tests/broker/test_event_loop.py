"""The broker's event loop: `event.loop` picks uvloop or asyncio's own, and the broker
serves real clients on the asyncio fallback as on uvloop (the rest of the suite runs its
brokers on whichever `auto` picks; `ODRADEK_NO_UVLOOP=1` runs them all on asyncio)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer

from odradek.broker import event_loop
from odradek.testing import BrokerProcess


def test_auto_takes_uvloop_when_it_imports_unless_the_environment_says_no(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(event_loop.NO_UVLOOP_ENV, raising=False)
    monkeypatch.setattr(event_loop, "_uvloop", lambda: asyncio)  # any module: "it imports"
    assert event_loop.chosen_event_loop("auto") == "uvloop"
    assert event_loop.chosen_event_loop("asyncio") == "asyncio"
    monkeypatch.setenv(event_loop.NO_UVLOOP_ENV, "1")
    assert event_loop.chosen_event_loop("auto") == "asyncio"
    assert event_loop.chosen_event_loop("uvloop") == "uvloop"  # asked for by name: kept
    monkeypatch.setattr(event_loop, "_uvloop", lambda: None)
    monkeypatch.delenv(event_loop.NO_UVLOOP_ENV)
    assert event_loop.chosen_event_loop("auto") == "asyncio"
    with pytest.raises(event_loop.EventLoopUnavailable, match="uvloop is not installed"):
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


def test_real_clients_on_the_asyncio_fallback(tmp_path: Path) -> None:
    """confluent-kafka and kafka-python produce and read back through a broker forced
    onto asyncio's loop: framing, pipelining, sendfile and the deadlines on that loop."""
    broker = BrokerProcess(tmp_path / "data", settings={"event.loop": "asyncio"}).start()
    try:
        values = [f"value-{i}".encode() * (1 + i % 50) for i in range(5000)]
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for value in values:
            producer.produce("fallback", value)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False}
        )
        consumer.assign([TopicPartition("fallback", 0, 0)])
        got: list[bytes] = []
        for _ in range(100):
            got += [m.value() for m in consumer.consume(1000, 0.5) if m.error() is None]
            if len(got) >= len(values):
                break
        consumer.close()
        assert got == values
        kp = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        kp.send("fallback-kp", b"from kafka-python").get(timeout=30)
        kp.close()
        kc = KafkaConsumer(
            "fallback-kp",
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=10_000,
        )
        assert [m.value for m in kc][:1] == [b"from kafka-python"]
        kc.close()
        assert "event loop: asyncio" in broker.log_tail()
    finally:
        broker.stop()


def test_auto_runs_the_broker_on_uvloop_where_it_is_installed(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("on-uvloop", b"v")
        assert producer.flush(30) == 0
    finally:
        broker.stop()
    assert f"event loop: {event_loop.chosen_event_loop('auto')}" in broker.log_tail()
