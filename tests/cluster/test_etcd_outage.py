"""etcd outages ridden out (issue 21, item 2), against `cluster up --etcd-members 3`
with 3 brokers, each given all three etcd members.

While an acks=all producer (confluent-kafka, min.insync.replicas=2) writes steadily:
the etcd member first in every broker's list is killed for longer than the brokers'
lease and restarted; then the whole etcd is down for half the lease. Neither may be
seen by producers (as losing a KRaft quorum member is not): every record acknowledged,
no leader or leader epoch changed, the controller kept, no broker giving up its roles,
and no gap between acknowledgements beyond a generous bound (a leadership change
would cost a whole lease).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_harness import (
    cluster_metadata,
    eventually,
    log_paths,
    running_cluster,
    wait_fully_replicated,
)
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.devcluster.launcher import ETCD, LocalCluster
from odradek.replication.model import ClusterMetadata

LEASE_S = 6
SETTINGS = {"broker.session.timeout.ms": str(LEASE_S * 1000)}
TOPIC = "outage"
# Generous: a loaded 2-core machine pauses now and then; any leadership change
# costs a whole lease (LEASE_S) before a new leader is elected.
STALL_BOUND_S = LEASE_S / 2
DEADLINE_S = 60.0
SETTLE_S = 2.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("etcd-outage") / "dev", settings=SETTINGS, etcd_members=3
    ) as local:
        admin = AdminClient({"bootstrap.servers": local.bootstrap_servers()})
        topic = NewTopic(TOPIC, 3, 3, config={"min.insync.replicas": "2"})
        for future in admin.create_topics([topic]).values():
            future.result(30)
        wait_fully_replicated(local, DEADLINE_S)
        yield local


class SteadyProducer:
    """acks=all, idempotent records at a steady pace from a thread; when each was
    acknowledged."""

    def __init__(self, bootstrap_servers: str, interval_s: float = 0.02) -> None:
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap_servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": 60000,
            }
        )
        self.interval_s = interval_s
        self.sent = 0
        self.acked: list[float] = []
        self.errors: list[KafkaError] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer")

    def _delivered(self, error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.acked.append(time.monotonic())

    def _run(self) -> None:
        while not self._stop.is_set():
            self._producer.produce(TOPIC, value=b"%d" % self.sent, on_delivery=self._delivered)
            self.sent += 1
            self._producer.poll(self.interval_s)

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S)
        left = self._producer.flush(DEADLINE_S)
        assert left == 0, f"{left} records never acknowledged"

    def longest_gap(self) -> float:
        times = sorted(self.acked)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def leaderships(md: ClusterMetadata) -> dict[tuple[str, int], tuple[int, int]]:
    return {key: (v.state.leader, v.state.leader_epoch) for key, v in md.partitions.items()}


def roles_given_up(cluster: LocalCluster) -> list[str]:
    found = []
    for broker_id in cluster.broker_ids:
        text = cluster.layout.log_path(broker_id).read_text(errors="replace")
        if "lost its etcd lease" in text:
            found.append(f"broker {broker_id}")
    return found


def ridden_out(cluster: LocalCluster, fault: Any) -> None:
    """Run `fault` under a steady producer and check nobody saw it."""
    before = cluster_metadata(cluster)
    with SteadyProducer(cluster.bootstrap_servers()) as producer:
        eventually(lambda: len(producer.acked) > 20, "the producer's first acknowledgements")
        fault()
        time.sleep(SETTLE_S)
        acked_during = len(producer.acked)
    after = cluster_metadata(cluster)
    context = f"broker logs: {log_paths(cluster)}"
    assert producer.errors == [], f"{producer.errors[:5]}; {context}"
    assert len(producer.acked) == producer.sent and acked_during > 20
    assert leaderships(after) == leaderships(before), context
    assert after.controller == before.controller, context
    assert sorted(after.brokers) == cluster.broker_ids, context
    assert roles_given_up(cluster) == [], context
    assert producer.longest_gap() < STALL_BOUND_S, context


def test_killing_and_restarting_the_first_etcd_member_is_not_seen(cluster: LocalCluster) -> None:
    def fault() -> None:
        cluster.kill(ETCD)  # first in every broker's --etcd list
        time.sleep(LEASE_S + 1)  # the leases were kept through the other members
        cluster.start(ETCD)

    ridden_out(cluster, fault)


def test_the_whole_etcd_down_for_half_the_lease_is_not_seen(cluster: LocalCluster) -> None:
    def fault() -> None:
        for member in cluster.etcd_names:
            cluster.kill(member)
        time.sleep(LEASE_S / 2)
        cluster.start_all()  # etcd's members, then every broker still serving

    ridden_out(cluster, fault)
