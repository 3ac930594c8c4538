"""Cluster metrics on the Prometheus endpoint: leaders, under-replicated and offline
partitions, the controller, elections (two real brokers and etcd)."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.devcluster.etcd_server import EtcdServer
from odradek.testing import BrokerProcess, free_port

DEADLINE_S = 60.0


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        name: float(value)
        for line in text.splitlines()
        if line and not line.startswith("#")
        for name, _, value in [line.rpartition(" ")]
    }


def until(check: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_cluster_metrics(tmp_path: Path, etcd_server: EtcdServer) -> None:
    host, port = etcd_server.endpoint
    metrics = {1: free_port(), 2: free_port()}
    settings = {
        "broker.session.timeout.ms": "3000",
        "replica.lag.time.max.ms": "4000",
        "offsets.topic.replication.factor": "2",
    }
    brokers = {
        b: BrokerProcess(
            tmp_path / f"broker-{b}",
            settings=settings,
            extra_args=[
                "--etcd",
                f"{host}:{port}",
                "--node-id",
                str(b),
                "--metrics",
                f"127.0.0.1:{metrics[b]}",
            ],
        ).start()
        for b in (1, 2)
    }
    try:
        admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
        until(lambda: len(admin.list_topics(timeout=5).brokers) == 2, "both brokers registered")
        admin.create_topics([NewTopic("metered", 4, 2)])["metered"].result(DEADLINE_S)

        def totals(name: str) -> float:
            return sum(scrape(metrics[b]).get(name, 0.0) for b in (1, 2))

        until(lambda: totals("odradek_replication_leader_partitions") >= 4, "leaders counted")
        assert totals("odradek_controller_active") == 1
        assert totals("odradek_replication_under_replicated_partitions") == 0
        brokers[2].kill()
        # Broker 1 now leads all 4 partitions, each with an ISR of one (of 2 replicas).
        until(
            lambda: scrape(metrics[1])["odradek_replication_under_replicated_partitions"] >= 4,
            "under-replicated partitions on the survivor",
        )
        survivor = scrape(metrics[1])
        assert survivor["odradek_controller_active"] == 1
        assert survivor["odradek_controller_leader_elections_total"] >= 1
        assert survivor["odradek_controller_unclean_leader_elections_total"] == 0
        assert survivor["odradek_replication_offline_partitions"] == 0
    finally:
        for broker in brokers.values():
            broker.stop()
