"""Any partition count, and placement, on a real three-broker cluster (issue 21, items 3
and 6).

- `odradek topics create` of 126 and of 2,000 partitions succeeds in one request each
  (etcd takes at most 128 operations per transaction: the metadata store writes such
  topics in batches), and so does CreatePartitions adding more than 125;
- a broker opens logs only for the replicas placed on it: 300 partitions with one
  replica each on 3 brokers give each broker 100 partition directories and open log
  files for those only; a replica moved away by a reassignment is deleted once the
  reassignment completes;
- the topics are usable: records produced to every partition are read back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition as KafkaPythonPartition
from kafka.admin import KafkaAdminClient

from odradek.devcluster.launcher import LocalCluster

from cluster_harness import eventually, running_cluster  # isort: skip

DEADLINE_S = 90.0
SEGMENT = re.compile(r"^\d{20}\.log$")  # a segment's data file, named by its base offset


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("scale") / "dev") as local:
        yield local


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})


def odradek(cluster: LocalCluster, *args: str) -> str:
    """The CLI, as an operator runs it; its output (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "odradek", *args, "--bootstrap", cluster.bootstrap_servers()],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env=os.environ,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def partitions(admin: AdminClient, topic: str) -> dict[int, Any]:
    return admin.list_topics(topic, timeout=10).topics[topic].partitions


def led(admin: AdminClient, topic: str, count: int) -> bool:
    found = partitions(admin, topic)
    return len(found) == count and all(p.leader >= 0 for p in found.values())


def round_trip(cluster: LocalCluster, topic: str, indexes: list[int]) -> None:
    """One record to each partition in `indexes`, each read back from its partition."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "acks": "all"})
    failures: list[Any] = []
    for index in indexes:
        producer.produce(
            topic,
            value=b"%s-%d" % (topic.encode(), index),
            partition=index,
            on_delivery=lambda error, _m: error is not None and failures.append(error),
        )
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0 and not failures, failures
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": f"scale-{topic}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([ConfluentPartition(topic, i, 0) for i in indexes])
        read: dict[int, bytes] = {}
        eventually(
            lambda: _poll_into(consumer, read) >= len(indexes), f"{topic} read back", DEADLINE_S
        )
    finally:
        consumer.close()
    assert read == {i: b"%s-%d" % (topic.encode(), i) for i in indexes}


def _poll_into(consumer: Consumer, read: dict[int, bytes]) -> int:
    for message in consumer.consume(500, timeout=1):
        if message.error() is None:
            read[message.partition()] = message.value()
    return len(read)


def partition_dirs(cluster: LocalCluster, broker: int, topic: str) -> set[int]:
    root = cluster.layout.broker_dir(broker)
    prefix = topic + "-"
    return {
        int(p.name[len(prefix) :])
        for p in root.iterdir()
        if p.is_dir() and p.name.startswith(prefix) and p.name[len(prefix) :].isdigit()
    }


def open_logs(cluster: LocalCluster, broker: int) -> list[Path]:
    """The segment files the broker's process holds open (its /proc/<pid>/fd)."""
    pid = cluster.pid(broker)
    assert pid is not None
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue  # closed meanwhile
        if SEGMENT.match(target.name):
            found.append(target)
    return found


def test_126_and_2000_partitions_are_created_in_one_request_each(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    out = odradek(cluster, "topics", "create", "wide", "-p", "126", "-r", "1")
    assert "126 partitions" in out
    out = odradek(cluster, "topics", "create", "widest", "-p", "2000", "-r", "1")
    assert "2000 partitions" in out
    eventually(lambda: led(admin, "wide", 126) or None, "126 leaders", DEADLINE_S)
    eventually(lambda: led(admin, "widest", 2000) or None, "2000 leaders", DEADLINE_S)
    round_trip(cluster, "widest", [0, 1, 999, 1998, 1999])
    # Growing by more than one etcd transaction holds (125 partition states) at once.
    out = odradek(cluster, "topics", "alter", "wide", "--partitions", "400")
    assert "400 partitions" in out
    eventually(lambda: led(admin, "wide", 400) or None, "400 leaders", DEADLINE_S)
    round_trip(cluster, "wide", [0, 125, 126, 300, 399])
    # Each broker holds the replicas placed on it, not all 2,000.
    held = {b: partition_dirs(cluster, b, "widest") for b in cluster.broker_ids}
    assert sum(len(d) for d in held.values()) == 2000, {b: len(d) for b, d in held.items()}
    assert set().union(*held.values()) == set(range(2000))


def test_each_broker_holds_and_opens_only_the_replicas_placed_on_it(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    odradek(cluster, "topics", "create", "spread", "-p", "300", "-r", "1")
    eventually(lambda: led(admin, "spread", 300) or None, "300 leaders", DEADLINE_S)
    placed: dict[int, set[int]] = {b: set() for b in cluster.broker_ids}
    for index, p in partitions(admin, "spread").items():
        (replica,) = p.replicas
        placed[replica].add(index)
    assert sorted(len(s) for s in placed.values()) == [100, 100, 100]  # round-robin
    round_trip(cluster, "spread", list(range(300)))  # every log has a segment in use
    for broker in cluster.broker_ids:
        assert partition_dirs(cluster, broker, "spread") == placed[broker]
        logs = open_logs(cluster, broker)
        spread = {
            int(p.parent.name.rpartition("-")[2])
            for p in logs
            if p.parent.name.startswith("spread-")
        }
        assert spread <= placed[broker], spread - placed[broker]
        # Every open log file belongs to a partition directory this broker holds.
        root = cluster.layout.broker_dir(broker).resolve()
        strays = [p for p in logs if p.parent.parent != root or not p.parent.is_dir()]
        assert not strays, strays[:5]


def test_a_replica_moved_away_is_deleted_once_the_reassignment_completes(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    odradek(cluster, "topics", "create", "mover", "-p", "3", "-r", "1")
    eventually(lambda: led(admin, "mover", 3) or None, "leaders", DEADLINE_S)
    round_trip(cluster, "mover", [0, 1, 2])
    (source,) = partitions(admin, "mover")[0].replicas
    target = next(b for b in cluster.broker_ids if b != source)
    assert 0 in partition_dirs(cluster, source, "mover")
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers())
    try:
        client.alter_partition_reassignments({KafkaPythonPartition("mover", 0): [target]})
        eventually(
            lambda: list(partitions(admin, "mover")[0].replicas) == [target] or None,
            "the reassignment to complete",
            DEADLINE_S,
        )
        assert client.list_partition_reassignments() == {}
    finally:
        client.close()
    eventually(
        lambda: 0 not in partition_dirs(cluster, source, "mover") or None,
        "the old replica's directory to go",
        DEADLINE_S,
    )
    assert 0 in partition_dirs(cluster, target, "mover")
    assert not any(p.parent.name == "mover-0" for p in open_logs(cluster, source))
    # The moved partition kept its record and takes new ones on its new broker.
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers(), "group.id": "mover-check"}
    )
    try:
        consumer.assign([ConfluentPartition("mover", 0, 0)])
        read: dict[int, bytes] = {}
        eventually(lambda: _poll_into(consumer, read) >= 1 or None, "the moved record", DEADLINE_S)
        assert read == {0: b"mover-0"}
    finally:
        consumer.close()
