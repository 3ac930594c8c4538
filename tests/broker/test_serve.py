"""`odradek serve`: start-up, clean shutdown, and one-line errors for bad arguments."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.testing import BrokerProcess, free_port

pytestmark = pytest.mark.embedded


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_sigterm_stops_cleanly_and_leaves_clean_logs(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("shutdown-topic", b"value")
    assert producer.flush(10) == 0
    started = time.monotonic()
    assert broker.stop() == 0
    # A hang guard, not a timing (bench/cluster.py measures the stop: about 1 s): a
    # loaded CI machine must not fail it.
    assert time.monotonic() - started < 15
    assert (tmp_path / "data" / "shutdown-topic-0" / ".clean_shutdown").exists()
    assert "odradek broker stopped" in broker.log_tail()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--listen", "nowhere"], "--listen expects HOST:PORT"),
        (["serve", "--set", "no.such.setting=1"], "unknown broker setting 'no.such.setting'"),
        (
            ["serve", "--set", "num.partitions=many"],
            "Invalid value many for configuration num.partitions: Not a number of type INT",
        ),
        (
            ["serve", "--set", "log.segment.bytes=0"],
            "Invalid value 0 for configuration log.segment.bytes: Value must be at least 1048576",
        ),
        (
            ["serve", "--set", "log.cleaner.min.cleanable.ratio=2"],
            "log.cleaner.min.cleanable.ratio: Value must be between 0 and 1",
        ),
        (["serve", "--set", "justakey"], "--set expects key=value"),
        (["serve", "--log-level", "LOUD"], "argument --log-level: invalid choice: 'LOUD'"),
        (["serve", "--advertise", "0.0.0.0:9092"], "--advertise needs an address clients can"),
        (
            ["serve", "--set", "max.connections.per.ip.overrides=127.0.0.1=5"],
            "Invalid value 127.0.0.1=5 for configuration max.connections.per.ip.overrides:",
        ),
        (
            ["serve", "--set", "queued.max.request.bytes=1048576"],
            "queued.max.request.bytes (1048576) must be at least socket.request.max.bytes",
        ),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr


def test_port_in_use_is_one_line(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "a").start()
    try:
        result = run_cli("serve", "--listen", broker.bootstrap, "--data-dir", str(tmp_path / "b"))
        assert result.returncode == 2
        assert "cannot listen" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        broker.stop()


def test_settings_reach_the_broker(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    broker = BrokerProcess(tmp_path / "data", settings={"num.partitions": "4"}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        metadata = admin.list_topics("auto-four", timeout=10)
        assert len(metadata.topics["auto-four"].partitions) == 4
        resource = ConfigResource(ConfigResource.Type.BROKER, "0")
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        assert configs["num.partitions"].value == "4"
        assert not configs["num.partitions"].is_default
    finally:
        broker.stop()


def test_default_port_is_9092_when_free(tmp_path: Path) -> None:
    """With no flags the broker listens on 127.0.0.1:9092 (skipped only if 9092 is busy)."""
    import socket

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 9092)) == 0:
            pytest.skip("port 9092 is in use on this machine")
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", "serve"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        from odradek.testing import wait_for_port

        assert wait_for_port("127.0.0.1", 9092, 20)
        assert (tmp_path / "odradek-data" / "meta.json").exists()
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_free_port_helper_returns_bindable_port() -> None:
    assert 0 < free_port() < 65536
