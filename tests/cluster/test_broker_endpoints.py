"""A broker's registration lists every advertised listener (Kafka's BrokerRegistration
endpoints); registrations written before it did are still read, their one address
serving every listener as it did then. Clients hear of brokers on their own listener
only, as Kafka's metadata cache answers."""

from __future__ import annotations

import json
from functools import partial
from types import SimpleNamespace

from odradek.broker.apis.metadata import partition_entry
from odradek.broker.control_plane import PartitionInfo
from odradek.cluster.node import ClusterNode
from odradek.protocol.errors import ErrorCode
from odradek.replication.model import BrokerInfo, Endpoint

PLAIN = Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")
REPLICATION = Endpoint("REPLICATION", "10.0.0.1", 9094, "SASL_SSL")


def test_endpoints_round_trip_and_are_found_by_listener() -> None:
    info = BrokerInfo(1, "127.0.0.1", 9092, "r1", 42, (PLAIN, REPLICATION))
    assert BrokerInfo.decode(info.encode()) == info
    assert info.address_on("REPLICATION") == ("10.0.0.1", 9094)
    assert info.address_on("PLAINTEXT") == ("127.0.0.1", 9092)
    assert info.address_on("SASL_SSL") is None  # Kafka leaves such a broker out
    assert info.address_on(None) == ("127.0.0.1", 9092)


def test_a_registration_without_endpoints_serves_every_listener_at_its_address() -> None:
    old = json.dumps({"id": 2, "host": "h", "port": 9093, "rack": None}).encode()
    info = BrokerInfo.decode(old)
    assert info.endpoints == ()
    assert info.address_on("REPLICATION") == ("h", 9093)
    assert info.address_on(None) == ("h", 9093)


def cluster_view(*brokers: BrokerInfo) -> SimpleNamespace:
    """What ClusterNode's address lookups read: the live brokers by id."""
    return SimpleNamespace(brokers={b.broker_id: b for b in brokers})


ONE = BrokerInfo(1, "127.0.0.1", 9092, None, None, (PLAIN, REPLICATION))
TWO_PLAIN_ONLY = BrokerInfo(2, "127.0.0.2", 9092, None, None, (PLAIN,))


def test_clients_are_told_of_brokers_with_their_listener_only() -> None:
    view = cluster_view(ONE, TWO_PLAIN_ONLY)
    on_replication = ClusterNode.live_brokers(view, "REPLICATION")  # type: ignore[arg-type]
    assert [(b.node_id, b.host, b.port) for b in on_replication] == [(1, "10.0.0.1", 9094)]
    on_plain = ClusterNode.live_brokers(view, "PLAINTEXT")  # type: ignore[arg-type]
    assert [b.node_id for b in on_plain] == [1, 2]
    assert ClusterNode.address_of(view, 2, "REPLICATION") is None  # type: ignore[arg-type]
    assert ClusterNode.address_of(view, 3, "PLAINTEXT") is None  # type: ignore[arg-type]


def test_a_leader_without_the_clients_listener_is_no_leader_for_it() -> None:
    view = cluster_view(ONE, TWO_PLAIN_ONLY)
    info = PartitionInfo(ErrorCode.NONE, 2, 4, (1, 2), (1, 2))
    control = SimpleNamespace(
        partition_info=lambda topic, index: info,
        address_of=partial(ClusterNode.address_of, view),
    )

    def entry(listener: str, version: int) -> dict[str, object]:
        ctx = SimpleNamespace(
            broker=SimpleNamespace(control=control, node_id=1),
            listener_name=listener,
            version=version,
        )
        return partition_entry(ctx, "t", 0)  # type: ignore[arg-type]

    assert entry("PLAINTEXT", 12)["leader_id"] == 2
    assert entry("PLAINTEXT", 12)["error_code"] == ErrorCode.NONE
    missing = entry("REPLICATION", 12)
    assert (missing["leader_id"], missing["error_code"]) == (-1, ErrorCode.LISTENER_NOT_FOUND)
    assert entry("REPLICATION", 5)["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
    assert missing["replica_nodes"] == (1, 2) and missing["leader_epoch"] == 4
