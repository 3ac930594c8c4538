"""ACLs and SCRAM credentials are cluster-wide in cluster mode: kept in etcd, taken by
every broker (also one that was down when they changed), and changes made through
different brokers compose instead of overwriting each other."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.devcluster.launcher import LocalCluster

from cluster_harness import START_TIMEOUT_S, eventually, running_cluster  # isort: skip

SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir = tmp_path_factory.mktemp("security") / "dev"
    with running_cluster(data_dir, brokers=2, settings=SETTINGS) as local:
        yield local


def admin_of(cluster: LocalCluster, broker: int) -> AdminClient:
    """An admin client that talks to one broker only (no other bootstrap address)."""
    return AdminClient({"bootstrap.servers": cluster.broker_address(broker)})


def wait_for(predicate: Callable[[], Any], what: str) -> Any:
    return eventually(predicate, what, DEADLINE_S)


def acl(principal: str, topic: str) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        principal,
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )


def described(admin: AdminClient) -> set[tuple[str, str]]:
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    return {(b.principal, b.name) for b in admin.describe_acls(everything).result(DEADLINE_S)}


def scram_users(admin: AdminClient) -> set[str]:
    return set(admin.describe_user_scram_credentials().result(DEADLINE_S))


def test_acls_created_through_one_broker_hold_on_every_broker(cluster: LocalCluster) -> None:
    one, two = admin_of(cluster, 1), admin_of(cluster, 2)
    for future in one.create_acls([acl("User:alice", "orders")]).values():
        future.result(DEADLINE_S)
    for future in two.create_acls([acl("User:bob", "payments")]).values():
        future.result(DEADLINE_S)
    expected = {("User:alice", "orders"), ("User:bob", "payments")}
    assert described(one) == expected, "both changes kept: neither overwrote the other"
    assert described(two) == expected


def test_a_broker_down_during_a_change_takes_it_when_back(cluster: LocalCluster) -> None:
    cluster.kill(2)
    try:
        one = admin_of(cluster, 1)
        # Once its lease has ended, metadata stops naming broker 2 (clients would try it).
        wait_for(lambda: 2 not in one.list_topics(timeout=5).brokers, "broker 2 to leave")
        deleted = AclBindingFilter(
            ResourceType.TOPIC,
            "orders",
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        for future in one.delete_acls([deleted]).values():
            assert len(future.result(DEADLINE_S)) == 1
        upsert = UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"secret"
        )
        for future in one.alter_user_scram_credentials([upsert]).values():
            future.result(DEADLINE_S)
    finally:
        cluster.restart(2, timeout_s=START_TIMEOUT_S)
    two = admin_of(cluster, 2)
    assert wait_for(lambda: described(two) == {("User:bob", "payments")}, "the deletion")
    assert wait_for(lambda: "carol" in scram_users(two), "carol's credential")
    assert "carol" in scram_users(admin_of(cluster, 1))
