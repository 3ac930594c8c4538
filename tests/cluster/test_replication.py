"""Cluster mode end to end: three real brokers and etcd on loopback, driven with
confluent-kafka and kafka-python (issue 15: replication, acks=all, truncation,
reassignment, elections, transactions across brokers).

One cluster serves the module; tests that kill or pause a broker bring it back and
wait until every partition's ISR is whole again before they return. Logs are
compared on disk at the end, with the cluster stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka import TopicPartition as KafkaPythonPartition
from kafka.admin import KafkaAdminClient

from odradek.client import Consumer as OdradekConsumer
from odradek.client import Producer as OdradekProducer
from odradek.devcluster.launcher import LocalCluster
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch

from ..broker.wire import WireClient

from cluster_harness import (  # isort: skip
    START_TIMEOUT_S,
    cluster_metadata,
    eventually,
    read_replica_log,
    running_cluster,
)

SETTINGS = {"replica.lag.time.max.ms": "4000"}
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("replication") / "dev", settings=SETTINGS
    ) as local:
        yield local


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    return eventually(predicate, what, timeout_s)


def partitions(admin: AdminClient, topic: str) -> dict[int, Any]:
    return admin.list_topics(topic, timeout=10).topics[topic].partitions


def create(admin: AdminClient, topic: str, *args: Any, **kwargs: Any) -> None:
    for future in admin.create_topics([NewTopic(topic, *args, **kwargs)]).values():
        future.result(30)
    wait_for(lambda: all(p.leader >= 0 for p in partitions(admin, topic).values()), "leaders")


def isr_whole(admin: AdminClient, topic: str) -> bool:
    return all(
        p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas)
        for p in partitions(admin, topic).values()
    )


def produce(
    cluster: LocalCluster, topic: str, values: list[bytes], **config: Any
) -> list[tuple[int, int, bytes]]:
    """Produce, flush; the (partition, offset, value) of each acknowledged record."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers(), **config})
    acked: list[tuple[int, int, bytes]] = []
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            acked.append((message.partition(), message.offset(), message.value()))

    for value in values:
        producer.produce(topic, value=value, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0
    if errors:
        raise RuntimeError(errors)
    return acked


def read_log(cluster: LocalCluster, broker: int, topic: str) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record of `topic`-0 on `broker`'s disk."""
    return [(r.offset, r.value) for r in read_replica_log(cluster, broker, topic, 0).records]


def test_metadata_names_every_broker_replica_and_isr(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    create(admin, "described", 4, 3)
    metadata = admin.list_topics(timeout=10)
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert metadata.controller_id in (1, 2, 3)
    leaders = set()
    for partition in metadata.topics["described"].partitions.values():
        assert sorted(partition.replicas) == [1, 2, 3]
        assert sorted(partition.isrs) == [1, 2, 3]
        assert partition.leader == partition.replicas[0]  # the preferred replica leads first
        leaders.add(partition.leader)
    assert len(leaders) > 1, "leadership is spread over the brokers"


def test_acks_all_needs_min_insync_replicas(cluster: LocalCluster, admin: AdminClient) -> None:
    create(admin, "strict", 1, 3, config={"min.insync.replicas": "3"})
    leader = partitions(admin, "strict")[0].leader
    follower = next(b for b in (1, 2, 3) if b != leader)
    cluster.kill(follower)
    try:
        # The controller drops the dead broker from the ISR once its lease ends.
        wait_for(lambda: follower not in partitions(admin, "strict")[0].isrs, "ISR shrink")
        described = subprocess.run(
            [
                sys.executable,
                "-m",
                "odradek",
                "topics",
                "describe",
                "strict",
                "described",
                "--under-replicated",
                "--format",
                "json",
                "--bootstrap",
                cluster.bootstrap_servers(),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        shown = {t["name"]: t["partitions"] for t in json.loads(described.stdout)}
        assert [p["under_replicated"] for p in shown["strict"]] == [True]
        assert all(p["under_replicated"] for p in shown["described"])  # RF 3, one broker down
        with pytest.raises(RuntimeError) as refused:
            produce(cluster, "strict", [b"x"], acks="all", **{"message.timeout.ms": 3000})
        codes = {e.code() for e in refused.value.args[0]}
        assert codes & {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError._MSG_TIMED_OUT}, codes
        assert produce(cluster, "strict", [b"one"], acks=1)  # a single ack needs only the leader
    finally:
        cluster.restart(follower, timeout_s=START_TIMEOUT_S)
    wait_for(lambda: isr_whole(admin, "strict"), "ISR whole again")
    assert produce(cluster, "strict", [b"all"], acks="all")


def test_leader_failover_keeps_every_acknowledged_record(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    create(admin, "failover", 1, 3, config={"min.insync.replicas": "2"})
    first = produce(
        cluster,
        "failover",
        [b"a%d" % i for i in range(200)],
        acks="all",
        **{"enable.idempotence": True},
    )
    leader = partitions(admin, "failover")[0].leader
    cluster.kill(leader)
    try:
        wait_for(lambda: partitions(admin, "failover")[0].leader not in (-1, leader), "new leader")
        second = produce(
            cluster,
            "failover",
            [b"b%d" % i for i in range(200)],
            acks="all",
            **{"enable.idempotence": True},
        )
    finally:
        cluster.restart(leader, timeout_s=START_TIMEOUT_S)
    wait_for(lambda: isr_whole(admin, "failover"), "the old leader back in the ISR")
    offsets = [offset for _, offset, _ in first + second]
    assert offsets == list(range(400)), "acknowledged once each, in order, no gap"


def test_odradek_client_follows_a_leader_change(cluster: LocalCluster, admin: AdminClient) -> None:
    """Odradek's own producer and consumer ride through a leader failover: sends after
    the kill go to the new leader (NOT_LEADER_OR_FOLLOWER / a dead connection refresh
    the metadata), every record is acknowledged once and read back once, in order."""
    create(admin, "own-client", 1, 3, config={"min.insync.replicas": "2"})
    bootstrap = cluster.bootstrap_servers()
    with OdradekProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2) as producer:
        before = [producer.send("own-client", value=b"before-%d" % i) for i in range(100)]
        producer.flush(DEADLINE_S)
        leader = partitions(admin, "own-client")[0].leader
        cluster.kill(leader)
        try:
            after = [producer.send("own-client", value=b"after-%d" % i) for i in range(100)]
            producer.flush(DEADLINE_S)
            offsets = [f.result(0).offset for f in before + after]
        finally:
            cluster.restart(leader, timeout_s=START_TIMEOUT_S)
    assert offsets == list(range(200))
    assert partitions(admin, "own-client")[0].leader != leader or isr_whole(admin, "own-client")
    with OdradekConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([("own-client", 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(values) < 200 and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(0.5)]
    assert values == [b"before-%d" % i for i in range(100)] + [b"after-%d" % i for i in range(100)]
    wait_for(lambda: isr_whole(admin, "own-client"), "the old leader back in the ISR")


def test_a_returning_leader_truncates_what_the_new_leader_never_had(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    """acks=1 records only the old leader held are cut when it comes back as follower
    (OffsetForLeaderEpoch): every replica ends with the new leader's log."""
    create(admin, "diverge", 1, 3, config={"min.insync.replicas": "1"})
    produce(cluster, "diverge", [b"kept%d" % i for i in range(50)], acks="all")
    leader = partitions(admin, "diverge")[0].leader
    followers = [b for b in (1, 2, 3) if b != leader]
    for follower in followers:
        cluster.pause(follower)
    try:
        # Let fetches the followers had parked at the leader run out empty (they wait
        # replica.fetch.wait.max.ms), so nothing written from now on reaches them.
        time.sleep(1.0)
        lost = produce(cluster, "diverge", [b"lost%d" % i for i in range(20)], acks=1)
        assert len(lost) == 20
    finally:
        cluster.kill(leader)
        for follower in followers:
            cluster.resume(follower)
    old_log = read_log(cluster, leader, "diverge")
    assert [v for _, v in old_log][50:] == [b"lost%d" % i for i in range(20)], (
        "the old leader holds a suffix no follower has"
    )
    try:
        wait_for(lambda: partitions(admin, "diverge")[0].leader in followers, "a follower leads")
        produce(cluster, "diverge", [b"new%d" % i for i in range(30)], acks="all")
    finally:
        cluster.restart(leader, timeout_s=START_TIMEOUT_S)
    wait_for(lambda: isr_whole(admin, "diverge"), "the old leader caught up")


def test_reassignment_moves_a_partition_and_completes(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    create(admin, "moving", 1, 2)
    produce(cluster, "moving", [b"m%d" % i for i in range(300)], acks="all")
    before = partitions(admin, "moving")[0].replicas
    spare = next(b for b in (1, 2, 3) if b not in before)
    target = [spare, before[1]]  # the leader (before[0]) leaves
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers())
    try:
        tp = KafkaPythonPartition("moving", 0)
        client.alter_partition_reassignments({tp: target})
        wait_for(
            lambda: (
                sorted(partitions(admin, "moving")[0].replicas) == sorted(target)
                and isr_whole(admin, "moving")
            ),
            "the reassignment to complete",
        )
        assert client.list_partition_reassignments() == {}
        assert partitions(admin, "moving")[0].leader in target
    finally:
        client.close()
    assert len(produce(cluster, "moving", [b"after"], acks="all")) == 1


def test_preferred_leader_election_moves_leadership_back(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    create(admin, "preferred", 1, 3)
    preferred = partitions(admin, "preferred")[0].replicas[0]
    cluster.kill(preferred)
    try:
        wait_for(
            lambda: partitions(admin, "preferred")[0].leader not in (-1, preferred), "failover"
        )
    finally:
        cluster.restart(preferred, timeout_s=START_TIMEOUT_S)
    wait_for(lambda: isr_whole(admin, "preferred"), "the preferred replica back in sync")
    assert partitions(admin, "preferred")[0].leader != preferred
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers())
    try:
        client.elect_leaders(0, {"preferred": [0]})
    finally:
        client.close()
    wait_for(lambda: partitions(admin, "preferred")[0].leader == preferred, "preferred leads")


def test_unclean_election_only_where_a_topic_allows_it(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    """Both replicas die, the ISR member last; the other returns first. A topic with
    unclean.leader.election.enable=true gets it as leader (losing what it missed); the
    default keeps the partition offline until the last ISR member is back."""
    create(admin, "clean", 1, replica_assignment=[[1, 2]])
    unclean = {"unclean.leader.election.enable": "true"}
    create(admin, "unclean", 1, replica_assignment=[[1, 2]], config=unclean)
    cluster.kill(2)
    try:
        for topic in ("clean", "unclean"):
            wait_for(lambda t=topic: partitions(admin, t)[0].isrs == [1], f"{topic}: ISR [1]")
        cluster.kill(1)
        try:
            cluster.restart(2, timeout_s=START_TIMEOUT_S)
            wait_for(lambda: partitions(admin, "unclean")[0].leader == 2, "unclean leader 2")
            assert partitions(admin, "clean")[0].leader == -1, "clean: offline, no data lost"
        finally:
            cluster.restart(1, timeout_s=START_TIMEOUT_S)
        wait_for(lambda: partitions(admin, "clean")[0].leader == 1, "clean: broker 1 leads again")
    finally:
        if not cluster.is_running(2):
            cluster.restart(2, timeout_s=START_TIMEOUT_S)
    for topic in ("clean", "unclean"):
        wait_for(lambda t=topic: isr_whole(admin, t), f"{topic}: ISR whole again")


def test_create_partitions_places_the_new_ones(cluster: LocalCluster, admin: AdminClient) -> None:
    create(admin, "growing", 2, 3)
    for future in admin.create_partitions([NewPartitions("growing", 5)]).values():
        future.result(30)
    wait_for(lambda: len(partitions(admin, "growing")) == 5, "five partitions")
    wait_for(lambda: isr_whole(admin, "growing"), "every new partition led and in sync")
    acked = produce(cluster, "growing", [b"g%d" % i for i in range(100)], acks="all")
    assert {p for p, _, _ in acked} <= set(range(5))


def test_transactions_commit_across_partition_leaders(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    create(admin, "txn", 3, 3, config={"min.insync.replicas": "2"})
    assert len({p.leader for p in partitions(admin, "txn").values()}) > 1
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers(), "transactional.id": "cluster-txn"}
    )
    producer.init_transactions(DEADLINE_S)
    for round_ in range(3):
        producer.begin_transaction()
        for i in range(60):
            producer.produce("txn", key=b"%d" % i, value=b"%d-%d" % (round_, i))
        if round_ == 1:
            producer.abort_transaction(DEADLINE_S)
        else:
            producer.commit_transaction(DEADLINE_S)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": f"txn-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(["txn"])
    seen: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(seen) < 120 and time.monotonic() < deadline:
            seen += [m.value() for m in consumer.consume(200, 0.5) if m.error() is None]
    finally:
        consumer.close()
    assert len(seen) == 120
    assert not [v for v in seen if v.startswith(b"1-")], "aborted records stay invisible"


def test_a_config_change_through_one_broker_holds_on_every_broker(cluster: LocalCluster) -> None:
    """AlterConfigs goes to etcd; each broker takes it, and applies it to its logs."""
    one = AdminClient({"bootstrap.servers": cluster.broker_address(1)})
    create(one, "tuned", 1, 3)
    entry = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "tuned", incremental_configs=[entry])
    for future in one.incremental_alter_configs([resource]).values():
        future.result(DEADLINE_S)
    for broker in (1, 2, 3):
        admin = AdminClient({"bootstrap.servers": cluster.broker_address(broker)})

        def retention(admin: AdminClient = admin) -> str | None:
            described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "tuned")])
            configs = next(iter(described.values())).result(DEADLINE_S)
            return configs["retention.ms"].value

        wait_for(lambda retention=retention: retention() == "3600000", f"broker {broker}")


def test_delete_records_moves_every_replicas_log_start(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    """DeleteRecords on the leader; followers take the new log start from their fetches
    (checked on disk by the last test)."""
    create(admin, "trimmed", 1, 3)
    produce(cluster, "trimmed", [b"t%d" % i for i in range(100)], acks="all")
    (future,) = admin.delete_records([ConfluentPartition("trimmed", 0, 40)]).values()
    assert future.result(DEADLINE_S).low_watermark == 40
    # followers learn it with their next fetch: give them something to fetch
    produce(cluster, "trimmed", [b"after"], acks="all")


def test_deleting_a_topic_removes_it_from_every_broker(cluster: LocalCluster) -> None:
    one = AdminClient({"bootstrap.servers": cluster.broker_address(1)})
    create(one, "doomed", 2, 3)
    produce(cluster, "doomed", [b"d"], acks="all")
    for future in one.delete_topics(["doomed"]).values():
        future.result(DEADLINE_S)
    for broker in (1, 2, 3):
        other = AdminClient({"bootstrap.servers": cluster.broker_address(broker)})
        wait_for(lambda other=other: "doomed" not in other.list_topics(timeout=5).topics, "gone")
        directory = cluster.layout.broker_dir(broker)
        wait_for(lambda d=directory: not list(d.glob("doomed-*")), f"broker {broker}'s files")


def test_not_leader_answers_name_the_current_leader(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    """KIP-951: a Produce (v12) or Fetch (v16) sent to a follower is refused with
    NOT_LEADER_OR_FOLLOWER naming the partition's leader and epoch, and the response
    carries that leader's endpoint, so a client moves without a Metadata round trip."""
    create(admin, "hinted", 1, 3)
    state = cluster_metadata(cluster).partitions[("hinted", 0)].state
    leader, epoch = state.leader, state.leader_epoch
    follower = next(b for b in cluster.broker_ids if b != leader)
    host, _, port = cluster.broker_address(leader).rpartition(":")
    endpoint = [(leader, host, int(port))]

    batch = build_batch([(None, b"hint", ())], timestamp_ms=0)
    produce = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 5000,
        "topic_data": [{"name": "hinted", "partition_data": [{"index": 0, "records": batch}]}],
    }
    with WireClient(cluster.broker_address(follower)) as to_follower:
        produced = to_follower.request(ApiKey.PRODUCE, 12, produce)
    [answer] = produced.responses[0].partition_responses
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (leader, epoch)
    assert [(n.node_id, n.host, n.port) for n in produced.node_endpoints] == endpoint

    topic_id = cluster_metadata(cluster).topics["hinted"].topic_id
    fetch = {
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    with WireClient(cluster.broker_address(follower)) as to_follower:
        fetched = to_follower.request(ApiKey.FETCH, 16, fetch)
    [part] = fetched.responses[0].partitions
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader, epoch)
    assert [(n.node_id, n.host, n.port) for n in fetched.node_endpoints] == endpoint
    # From the leader itself: no error, no hint.
    with WireClient(cluster.broker_address(leader)) as to_leader:
        fetched = to_leader.request(ApiKey.FETCH, 16, fetch)
    [part] = fetched.responses[0].partitions
    assert part.error_code == 0 and part.current_leader.leader_id == -1
    assert fetched.node_endpoints == ()


def test_every_replica_holds_the_same_log(cluster: LocalCluster, admin: AdminClient) -> None:
    """Last (it stops the cluster): every replica's log on disk equals the others'."""
    cluster.stop_all(timeout_s=15.0)
    starts = {b: read_replica_log(cluster, b, "trimmed", 0).start_offset for b in (1, 2, 3)}
    assert starts == {1: 40, 2: 40, 3: 40}, "every replica's log starts where the leader's does"
    for topic in ("failover", "diverge", "moving"):
        # The replica a reassignment moved away was deleted once the move completed.
        holders = [b for b in (1, 2, 3) if (cluster.layout.broker_dir(b) / f"{topic}-0").is_dir()]
        assert len(holders) == (2 if topic == "moving" else 3), (topic, holders)
        logs = {b: read_log(cluster, b, topic) for b in holders}
        reference = next(iter(logs.values()))
        for broker, log in logs.items():
            assert log == reference, f"{topic}-0: broker {broker} differs"
        values = [v for _, v in reference]
        if topic == "failover":
            assert len(values) == len(set(values)) == 400
        if topic == "diverge":
            assert not [v for v in values if v is not None and v.startswith(b"lost")]
            assert len(values) == 80
