"""The console against a three-broker cluster (etcd and ``odradek serve --etcd`` on
loopback) while one broker is SIGKILLed: the cluster page, open in Chromium, shows the
broker gone, the leaders its partitions got and the replicas it left out of sync,
without a reload; the console keeps serving groups and topics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client import AdminClient, Producer
from odradek.client.admin import NewTopic
from odradek.devcluster.launcher import LocalCluster

from .conftest import ConsoleProcess, eventually

pytestmark = [pytest.mark.timeout(180), pytest.mark.embedded]

LEASE_MS = 3000  # a killed broker is declared dead after its etcd lease
SETTINGS = {
    "broker.session.timeout.ms": str(LEASE_MS),
    "replica.lag.time.max.ms": "5000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
}
TOPIC = "console-payments"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir = tmp_path_factory.mktemp("console-cluster") / "dev"
    cluster = LocalCluster.prepare(
        data_dir, brokers=3, settings=SETTINGS, wait_for_registration=True
    )
    try:
        cluster.start_all(timeout_s=90)
        yield cluster
    finally:
        LocalCluster.open(data_dir).stop_all(timeout_s=10)


def test_the_cluster_page_follows_a_killed_broker_live(
    cluster: LocalCluster, tmp_path: Path, page: Any
) -> None:
    bootstrap = cluster.bootstrap_servers()
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result()
        leaders = eventually(
            lambda: [p.leader for p in admin.describe_topics([TOPIC])[TOPIC].partitions
                     if p.leader >= 0] or None,
            "leaders",
        )  # fmt: skip
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for i in range(30):
            producer.send(TOPIC, value=f"payment {i}".encode(), partition=i % 3)
        producer.flush(30)
    console = ConsoleProcess(bootstrap, tmp_path / "console")
    console.start()
    try:
        eventually(lambda: len(console.api("/api/cluster")["brokers"]) == 3, "three brokers", 30)
        page.goto(f"{console.url}/cluster")
        assert page.locator("#cluster-brokers table.brokers tbody tr").count() == 3
        page.wait_for_function("document.getElementById('live-status').dataset.state === 'live'")

        killed = leaders[0]
        cluster.kill(killed)
        down = page.locator("#cluster-brokers tr.down")
        down.wait_for(timeout=40_000)  # the broker's lease ends, etcd unregisters it
        assert down.locator("td").first.inner_text() == str(killed)
        assert "not registered" in down.inner_text()
        elections = page.locator("#elections table.elections tbody tr", has_text=TOPIC)
        elections.first.wait_for(timeout=40_000)
        row = elections.first.locator("td").all_inner_texts()
        assert row[3] == str(killed) and row[4] not in (str(killed), "none")
        page.locator("#cluster-partitions table.attention", has_text=TOPIC).wait_for(timeout=40_000)
        attention = page.locator("#cluster-partitions").inner_text()
        assert "under-replicated" in attention
        assert page.locator("#cluster-brokers table.brokers tbody tr").count() == 3  # 2 up + 1

        # The rest of the console keeps answering with the broker gone.
        page.goto(f"{console.url}/topics/{TOPIC}")
        cells = page.locator("table.partitions tbody tr td:nth-child(2)").all_inner_texts()
        assert len(cells) == 3 and str(killed) not in cells
        page.goto(f"{console.url}/groups")
        assert page.locator("h1").inner_text() == "Consumer groups"
    finally:
        console.stop()
