"""Authenticated, encrypted replication (issue 21 item 7): three brokers whose clients
use a PLAINTEXT listener and who replicate among themselves over a SASL_SSL
(SCRAM-SHA-512) inter-broker listener, ACLs enforced.

* replication works there: an RF=3 acks=all producer succeeds and every ISR is full;
* a principal without CLUSTER_ACTION that sends a Fetch naming a follower's replica id
  gets no data and does not move the high watermark (the broker's own principal, sending
  the very same request, does: the request is one that would move it);
* the inter-broker listener refuses plaintext and wrong credentials;
* the followers' fetch connections go to the leaders' SASL_SSL listener (read from the
  kernel's socket table) and never to a PLAINTEXT one;
* Metadata answers each listener with the brokers' addresses on that listener.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.broker.config import BrokerConfig
from odradek.broker.security.inter_broker import InterBroker, client_ssl_context
from odradek.cluster.fetcher import LeaderConnection
from odradek.cluster.peer_connection import PeerAuthenticationError, PeerConnector
from odradek.devcluster.launcher import LocalCluster, run_coroutine
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_type,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch import encode_fetch_request, parse_fetch_response
from odradek.testing_tls import Pki, make_pki

from cluster_harness import (  # isort: skip
    cluster_metadata,
    eventually,
    running_cluster,
    wait_fully_replicated,
)

REPLICATION = "REPLICATION"
MECHANISM = "SCRAM-SHA-512"
BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"
DEADLINE_S = 60.0


def jaas(user: str, password: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )


def secured_settings(pki: Pki) -> dict[str, str]:
    """What docs/security.md "Securing replication" shows, with the test PKI."""
    return {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:SASL_SSL",
        "inter.broker.listener.name": REPLICATION,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.replication.sasl.enabled.mechanisms": MECHANISM,
        "listener.name.replication.scram-sha-512.sasl.jaas.config": jaas(
            BROKER_USER, BROKER_PASSWORD
        ),
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.location": str(pki.ca_cert),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # topics without ACLs stay open to the PLAINTEXT clients; the cluster resource
        # gets one ACL (CLUSTER_ACTION for the brokers), which closes it to everyone else
        "allow.everyone.if.no.acl.found": "true",
        # (b) pauses a follower for a few seconds: it must stay registered and in the ISR
        "broker.session.timeout.ms": "10000",
        "replica.lag.time.max.ms": "30000",
        "transaction.state.log.num.partitions": "1",
    }


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[LocalCluster]:
    data_dir = tmp_path_factory.mktemp("replication-security") / "dev"
    with running_cluster(
        data_dir, settings=secured_settings(pki), extra_listeners=(REPLICATION,)
    ) as local:
        admin = AdminClient({"bootstrap.servers": local.bootstrap_servers()})
        upserts = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
            )
            for user, password in ((BROKER_USER, BROKER_PASSWORD), (ALICE, ALICE_PASSWORD))
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(DEADLINE_S)
        brokers_may_replicate = AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            f"User:{BROKER_USER}",
            "*",
            AclOperation.CLUSTER_ACTION,
            AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([brokers_may_replicate]).values():
            future.result(DEADLINE_S)
        yield local


def peer(pki: Pki, user: str, password: str) -> PeerConnector:
    """What a broker connects to others with, as `user`."""
    config = BrokerConfig()
    config.set("ssl.truststore.location", str(pki.ca_cert))
    context = client_ssl_context(config, REPLICATION)
    return PeerConnector(InterBroker(REPLICATION, "SASL_SSL", MECHANISM, user, password, context))


def replication_address(cluster: LocalCluster, broker_id: int) -> tuple[str, int]:
    host, _, port = cluster.listener_address(broker_id, REPLICATION).rpartition(":")
    return host, int(port)


def create_topic(cluster: LocalCluster, name: str) -> tuple[int, list[int]]:
    """An RF=3 topic of one partition, fully replicated: (leader, followers)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    topic = NewTopic(name, 1, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[name].result(DEADLINE_S)
    md = wait_fully_replicated(cluster, DEADLINE_S)
    state = md.partitions[(name, 0)].state
    return state.leader, [b for b in md.topics[name].replicas[0] if b != state.leader]


def produce(cluster: LocalCluster, topic: str, values: list[bytes], acks: str) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers(), "acks": acks, "linger.ms": 0}
    )
    failures: list[Any] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: failures.append(err))
    assert producer.flush(DEADLINE_S) == 0
    assert failures == [None] * len(values), failures


def high_watermark(cluster: LocalCluster, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers(), "group.id": "hw"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def forged_fetch(
    cluster: LocalCluster, connector: PeerConnector, leader: int, topic: str, **fetch: int
) -> Any:
    """One Fetch v12 to the leader's REPLICATION listener naming `replica_id` and
    claiming that replica holds everything up to `offset`; the partition's answer."""

    async def send() -> Any:
        connection = LeaderConnection(
            *replication_address(cluster, leader), "forger", 10.0, connector.open
        )
        try:
            body = encode_fetch_request(
                12,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[(topic, [(0, fetch["offset"], 1 << 20, -1, 0)])],
                replica_id=fetch["replica_id"],
            )
            payload = await connection.send(ApiKey.FETCH, 12, body)
            (answer,) = parse_fetch_response(payload, 12).responses
            (part,) = answer.partitions
            return part
        finally:
            connection.close()

    return run_coroutine(lambda: asyncio.wait_for(send(), 30))


def offset_for_leader_epoch(
    cluster: LocalCluster, connector: PeerConnector, leader: int, topic: str, replica_id: int
) -> Any:
    """OffsetForLeaderEpoch v3 (with a replica id) for partition 0's epoch 0."""

    async def send() -> Any:
        connection = LeaderConnection(
            *replication_address(cluster, leader), "forger", 10.0, connector.open
        )
        try:
            body = build(
                request_type(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3),
                {
                    "replica_id": replica_id,
                    "topics": [
                        {
                            "topic": topic,
                            "partitions": [
                                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}
                            ],
                        }
                    ],
                },
            )
            payload = await connection.send(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, body)
            _, response = decode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, payload)
            return response.topics[0].partitions[0]
        finally:
            connection.close()

    return run_coroutine(lambda: asyncio.wait_for(send(), 30))


def test_replication_over_sasl_ssl_with_acls(cluster: LocalCluster) -> None:
    leader, followers = create_topic(cluster, "secured")
    produce(cluster, "secured", [b"v-%d" % i for i in range(20)], acks="all")
    md = wait_fully_replicated(cluster, DEADLINE_S)
    assert set(md.partitions[("secured", 0)].state.isr) == {leader, *followers}
    assert eventually(lambda: high_watermark(cluster, "secured") == 20, "high watermark 20")


def test_a_fetch_as_a_replica_without_cluster_action_moves_nothing(
    cluster: LocalCluster, pki: Pki
) -> None:
    leader, (paused, _) = create_topic(cluster, "forged")
    produce(cluster, "forged", [b"before-%d" % i for i in range(5)], acks="all")
    assert eventually(lambda: high_watermark(cluster, "forged") == 5, "high watermark 5")
    with cluster.paused(paused):
        # The paused follower holds 5 records and stays in the ISR: the high watermark
        # stays at 5 while the leader's log grows to 10.
        produce(cluster, "forged", [b"after-%d" % i for i in range(5)], acks="1")
        assert high_watermark(cluster, "forged") == 5
        claim = {"replica_id": paused, "offset": 10}

        alice = forged_fetch(cluster, peer(pki, ALICE, ALICE_PASSWORD), leader, "forged", **claim)
        assert alice.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # Kafka's answer
        assert alice.high_watermark == -1 and not bytes(alice.records or b"")
        assert high_watermark(cluster, "forged") == 5, "an unauthorized fetch moved it"
        epochs = offset_for_leader_epoch(
            cluster, peer(pki, ALICE, ALICE_PASSWORD), leader, "forged", replica_id=paused
        )
        assert epochs.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        md = cluster_metadata(cluster)
        assert paused in md.partitions[("forged", 0)].state.isr

        # The same request from the brokers' principal is served and moves the high
        # watermark: the refusal above is what kept it.
        brokers = forged_fetch(
            cluster, peer(pki, BROKER_USER, BROKER_PASSWORD), leader, "forged", **claim
        )
        assert brokers.error_code == ErrorCode.NONE
        assert eventually(lambda: high_watermark(cluster, "forged") == 10, "high watermark 10")


def test_the_inter_broker_listener_refuses_plaintext_and_wrong_credentials(
    cluster: LocalCluster, pki: Pki
) -> None:
    host, port = replication_address(cluster, 1)
    api_versions = encode_request(
        RequestHeader(ApiKey.API_VERSIONS, 0, 1, "plain"),
        build(request_type(ApiKey.API_VERSIONS, 0), {}),
    )
    with socket.create_connection((host, port), timeout=10) as plain:
        plain.sendall(api_versions)
        try:
            answer = plain.recv(4096)
        except ConnectionError:
            answer = b""
        assert answer in (b"",) or answer[:1] == b"\x15", (
            f"a plaintext request got {answer[:16]!r}, not a TLS alert or a close"
        )

    wrong = peer(pki, ALICE, "not-her-password")
    with pytest.raises(PeerAuthenticationError, match="refused this broker's credentials"):
        run_coroutine(lambda: asyncio.wait_for(wrong.open(host, port), 30))

    untrusting = peer(pki, BROKER_USER, BROKER_PASSWORD)
    assert untrusting.inter is not None
    no_ca = replace(untrusting.inter, ssl_context=client_ssl_context(BrokerConfig(), REPLICATION))
    with pytest.raises(PeerAuthenticationError, match="TLS with broker"):
        run_coroutine(lambda: asyncio.wait_for(PeerConnector(no_ca).open(host, port), 30))


def established_remote_ports(pid: int) -> set[int]:
    """Remote ports of the process's established TCP connections (its fds' socket inodes
    looked up in the kernel's table)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                ports.add(int(fields[2].rpartition(":")[2], 16))
    return ports


def test_followers_fetch_over_the_tls_listener_only(cluster: LocalCluster) -> None:
    leader, followers = create_topic(cluster, "watched")
    produce(cluster, "watched", [b"w"], acks="all")
    replication_port = replication_address(cluster, leader)[1]
    plaintext_ports = {
        int(cluster.broker_address(b).rpartition(":")[2]) for b in cluster.broker_ids
    }
    for follower in followers:
        pid = cluster.pid(follower)
        assert pid is not None
        ports = eventually(
            lambda pid=pid: (
                (found := established_remote_ports(pid)) and replication_port in found and found
            ),
            f"broker {follower}'s fetch connection to {leader}'s {REPLICATION} listener",
        )
        assert not ports & plaintext_ports, f"broker {follower} talks to a PLAINTEXT listener"


def test_metadata_answers_each_listener_with_its_own_addresses(
    cluster: LocalCluster, pki: Pki
) -> None:
    plain = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    listed = plain.list_topics(timeout=10).brokers
    assert {b: f"{m.host}:{m.port}" for b, m in listed.items()} == {
        b: cluster.broker_address(b) for b in cluster.broker_ids
    }
    secure = AdminClient(
        {
            "bootstrap.servers": cluster.listener_address(1, REPLICATION),
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": ALICE,
            "sasl.password": ALICE_PASSWORD,
            "ssl.ca.location": str(pki.ca_cert),
        }
    )
    expected = {b: cluster.listener_address(b, REPLICATION) for b in cluster.broker_ids}
    listed = secure.list_topics(timeout=10).brokers
    assert {b: f"{m.host}:{m.port}" for b, m in listed.items()} == expected
    described = secure.describe_cluster(request_timeout=10).result(DEADLINE_S)
    assert {n.id: f"{n.host}:{n.port}" for n in described.nodes} == expected


def test_transaction_markers_reach_leaders_over_the_secured_listener(
    cluster: LocalCluster,
) -> None:
    """A transaction over partitions led by every broker commits: the coordinator's
    markers for partitions other brokers lead go over the inter-broker listener."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    admin.create_topics([NewTopic("transacted", 3, 3)])["transacted"].result(DEADLINE_S)
    md = wait_fully_replicated(cluster, DEADLINE_S)
    leaders = {md.partitions[("transacted", p)].state.leader for p in range(3)}
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers(), "transactional.id": "secured-tx"}
    )
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce("transacted", b"tx-%d" % partition, partition=partition)
    producer.commit_transaction(DEADLINE_S)
    md = cluster_metadata(cluster)
    coordinator = md.partitions[("__transaction_state", 0)].state.leader
    assert leaders - {coordinator}, f"every partition led by the coordinator {coordinator}"
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers(),
            "group.id": "tx-reader",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["transacted"])
        seen: set[bytes] = set()
        deadline = time.monotonic() + DEADLINE_S
        while len(seen) < 3 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                seen.add(bytes(message.value()))
        assert seen == {b"tx-0", b"tx-1", b"tx-2"}
    finally:
        consumer.close()
