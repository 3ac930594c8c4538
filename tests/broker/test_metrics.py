"""The Prometheus endpoint reports requests, groups, lag and logs."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.testing import BrokerProcess, free_port

pytestmark = pytest.mark.embedded


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_metrics_endpoint(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", extra_args=["--metrics", f"127.0.0.1:{port}"]).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("metered", 2, 1)])["metered"].result(timeout=10)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(100):
            producer.produce("metered", value=b"x" * 10, partition=i % 2)
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "metered-group"})
        consumer.commit(
            offsets=[TopicPartition("metered", 0, 20), TopicPartition("metered", 1, 50)],
            asynchronous=False,
        )
        consumer.close()

        deadline = time.monotonic() + 10
        samples = scrape(port)
        while "odradek_group_lag" not in str(samples) and time.monotonic() < deadline:
            time.sleep(0.2)
            samples = scrape(port)
        assert samples['odradek_requests_total{api="PRODUCE"}'] >= 1
        assert samples['odradek_request_duration_seconds_count{api="PRODUCE"}'] >= 1
        assert samples["odradek_network_received_bytes_total"] > 1000
        assert samples["odradek_network_sent_bytes_total"] > 0
        lag = 'odradek_group_lag{group="metered-group",partition="%d",topic="metered"}'
        assert samples[lag % 0] == 50 - 20
        assert samples[lag % 1] == 50 - 50
        assert samples['odradek_log_end_offset{partition="0",topic="metered"}'] == 50
        assert samples['odradek_log_size_bytes{partition="0",topic="metered"}'] > 0
        assert samples['odradek_group_state{group="metered-group",state="Empty"}'] == 1
        # Coordinator failures (tests/broker/test_group_runtime.py makes them happen).
        assert samples["odradek_coordinator_operation_failures_total"] == 0
        assert samples["odradek_coordinator_partition_reloads_total"] == 0
        assert samples["odradek_coordinator_load_failures_total"] == 0
    finally:
        broker.stop()


def test_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "odradek",
                "serve",
                "--listen",
                f"127.0.0.1:{free_port()}",
                "--data-dir",
                str(tmp_path / "d"),
                "--metrics",
                f"127.0.0.1:{taken}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 2
    assert "cannot listen" in result.stderr
    assert "Traceback" not in result.stderr


def test_metrics_count_consumer_protocol_groups(tmp_path: Path) -> None:
    """A KIP-848 group is reported beside classic ones: its state among the consumer
    group states, its group epoch as the generation, the groups of each protocol, and
    its completed rebalances labelled with the protocol."""
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", extra_args=["--metrics", f"127.0.0.1:{port}"]).start()
    consumer = None
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("metered848", 2, 1)])["metered848"].result(timeout=10)
        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "classic-group"})
        classic.commit(offsets=[TopicPartition("metered848", 0, 1)], asynchronous=False)
        classic.close()
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "kip848-group",
                "group.protocol": "consumer",
            }
        )
        consumer.subscribe(["metered848"])
        deadline = time.monotonic() + 15
        while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert len(consumer.assignment()) == 2

        state = 'odradek_group_state{group="kip848-group",state="%s"}'
        samples = scrape(port)
        while samples.get(state % "Stable") != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
            samples = scrape(port)
        assert samples[state % "Stable"] == 1
        assert samples[state % "Reconciling"] == 0
        assert state % "PreparingRebalance" not in samples
        assert samples['odradek_group_generation{group="kip848-group"}'] >= 1
        assert samples['odradek_group_assignment_epoch{group="kip848-group"}'] >= 1
        assert samples['odradek_groups{protocol="consumer"}'] == 1
        assert samples['odradek_groups{protocol="classic"}'] == 1
        rebalances = 'odradek_group_rebalances_total{group="kip848-group",protocol="consumer"}'
        assert samples[rebalances] >= 1
    finally:
        if consumer is not None:
            consumer.close()
        broker.stop()
