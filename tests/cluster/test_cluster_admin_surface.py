"""The new admin APIs in a cluster (issue 19, item 6): DescribeQuorum names the controller
etcd elected, and AlterReplicaLogDirs moves a replica this broker holds between its log
directories while it keeps replicating (acks=all with min.insync.replicas=2 goes on),
and refuses one it does not hold. Two brokers, each with two log directories."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import NoError, ReplicaNotAvailableError
from kafka.structs import TopicPartitionReplica

from odradek.cluster.etcd_server import EtcdServer
from odradek.testing import BrokerProcess

pytestmark = [pytest.mark.timeout(180), pytest.mark.embedded]

SETTLE_TIMEOUT_S = 60
SETTINGS = {
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "5000",
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "2",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "2",
}


@pytest.fixture
def brokers(tmp_path: Path, etcd_server: EtcdServer) -> Iterator[dict[int, BrokerProcess]]:
    host, port = etcd_server.endpoint
    started: dict[int, BrokerProcess] = {}
    try:
        for node in (1, 2):
            started[node] = BrokerProcess(
                tmp_path / f"b{node}-disk1",
                extra_args=["--data-dir", str(tmp_path / f"b{node}-disk2")],
                settings={**SETTINGS, "etcd.endpoints": f"{host}:{port}", "node.id": str(node)},
            ).start()
        yield started
    finally:
        for broker in started.values():
            broker.stop()


def eventually(check: object, what: str) -> object:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        try:
            value = check()  # type: ignore[operator]
        except Exception as exc:  # a broker still joining, a leader still elected
            value, last = None, exc
        else:
            last = None
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: {last!r}"
        time.sleep(0.2)


def log_dir_of(admin: KafkaAdminClient, node: int, topic: str, partition: int) -> list[str]:
    [described] = admin.describe_log_dirs(brokers=[node])
    return [
        d["log_dir"]
        for d in described["log_dirs"]
        for t in d["topics"]
        if t["name"] == topic
        for p in t["partitions"]
        if p["partition_index"] == partition and not p["is_future_key"]
    ]


def test_quorum_and_replica_moves_in_a_cluster(
    tmp_path: Path, brokers: dict[int, BrokerProcess]
) -> None:
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        controller = eventually(
            lambda: (
                admin.describe_cluster()["controller_id"] in (1, 2)
                and admin.describe_cluster()["controller_id"]
            ),
            "a controller",
        )
        quorum = eventually(lambda: admin.describe_metadata_quorum(), "DescribeQuorum")
        [partition] = quorum["topics"][0]["partitions"]  # type: ignore[index]
        assert partition["error"] is None
        assert partition["leader_id"] == controller
        assert partition["leader_epoch"] >= 1
        assert partition["high_watermark"] > 0  # the etcd revision this broker applied
        assert sorted(v["replica_id"] for v in partition["current_voters"]) == [1, 2]
        assert sorted(n["node_id"] for n in quorum["nodes"]) == [1, 2]  # type: ignore[index]

        admin.create_topics(
            [
                NewTopic("both", 1, 2, topic_configs={"min.insync.replicas": "2"}),
                NewTopic("solo", replica_assignments={0: [2]}),
            ]
        )
        # A replica broker 1 does not hold: refused, and not listed by broker 1.
        absent = TopicPartitionReplica("solo", 0, 1)
        assert admin.alter_replica_log_dirs({absent: str(tmp_path / "b1-disk2")}) == {
            absent: ReplicaNotAvailableError
        }
        assert log_dir_of(admin, 1, "solo", 0) == []
        assert len(log_dir_of(admin, 2, "solo", 0)) == 1

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        values = [f"v{i}".encode() for i in range(2000)]
        for value in values[:1000]:
            producer.produce("both", value, partition=0)
        assert producer.flush(30) == 0

        # Broker 1's replica moves to its other directory and goes on replicating.
        [here] = eventually(lambda: log_dir_of(admin, 1, "both", 0), "broker 1 holds both-0")
        there = next(
            str(d) for d in (tmp_path / "b1-disk1", tmp_path / "b1-disk2") if str(d) != here
        )
        replica = TopicPartitionReplica("both", 0, 1)
        assert admin.alter_replica_log_dirs({replica: there}) == {replica: NoError}
        eventually(lambda: log_dir_of(admin, 1, "both", 0) == [there], "the move")
        failures: list[object] = []
        for value in values[1000:]:
            producer.produce(
                "both", value, partition=0, on_delivery=lambda e, _: e and failures.append(e)
            )
        assert producer.flush(30) == 0
        assert failures == []  # acks=all, min.insync.replicas=2: the moved replica keeps up

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
        consumer.assign([TopicPartition("both", 0, 0)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            got += [(m.offset(), m.value()) for m in consumer.consume(1000, 0.5) if not m.error()]
        consumer.close()
        assert got == list(enumerate(values))
    finally:
        admin.close()
